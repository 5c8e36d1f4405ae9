#include "rendezvous/store.h"

#include "rendezvous/error.h"

namespace hvd::rendezvous {

Bytes Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  auto value = tryGet(key);
  // A key can only vanish between wait() and tryGet() if another client deleted it.
  HVD_CHECK(value.has_value(), StoreError, "key '", key, "' was deleted from ", describe(),
            " while being read");
  return std::move(*value);
}

bool Store::check(const std::vector<std::string>& keys) {
  for (const auto& key : keys) {
    if (!tryGet(key)) return false;
  }
  return true;
}

std::string formatKeys(const std::vector<std::string>& keys) {
  constexpr size_t kMaxShown = 32;
  std::string out = "[";
  for (size_t i = 0; i < keys.size() && i < kMaxShown; ++i) {
    if (i) out += ", ";
    out += keys[i];
  }
  if (keys.size() > kMaxShown) out += detail::concat(", ... and ", keys.size() - kMaxShown, " more");
  return out + "]";
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : prefix_(std::move(prefix)), store_(std::move(store)) {
  HVD_INTERNAL_ASSERT(store_ != nullptr, "PrefixStore needs an underlying store");
}

std::string PrefixStore::join(const std::string& key) const { return prefix_ + "/" + key; }

std::vector<std::string> PrefixStore::join(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(join(key));
  return out;
}

void PrefixStore::set(const std::string& key, const Bytes& value) { store_->set(join(key), value); }
std::optional<Bytes> PrefixStore::tryGet(const std::string& key) { return store_->tryGet(join(key)); }
void PrefixStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(join(keys), timeout);
}
int64_t PrefixStore::add(const std::string& key, int64_t delta) { return store_->add(join(key), delta); }
void PrefixStore::deleteKey(const std::string& key) { store_->deleteKey(join(key)); }
Bytes PrefixStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return store_->get(join(key), timeout);
}
bool PrefixStore::check(const std::vector<std::string>& keys) { return store_->check(join(keys)); }
std::string PrefixStore::describe() const { return store_->describe() + " (scope '" + prefix_ + "')"; }

}  // namespace hvd::rendezvous

#include "rendezvous/store.h"

#include <algorithm>

#include "base/error.h"
#include "rendezvous/round.h"

namespace hvd::rendezvous {

Bytes Store::get(const std::string& key, std::chrono::milliseconds timeout) {
  wait({key}, timeout);
  auto value = tryGet(key);
  // A key can only vanish between wait() and tryGet() if another client deleted it.
  HVD_CHECK(value.has_value(), StoreError, "key '", key, "' was deleted from ", describe(),
            " while being read");
  return std::move(*value);
}

ValueList Store::waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  wait(keys, timeout);
  ValueList values;
  for (const auto& key : keys) {
    auto value = tryGet(key);
    HVD_CHECK(value.has_value(), StoreError, "key '", key, "' was deleted from ", describe(), " while being read");
    values.append(std::string_view(value->data(), value->size()));
  }
  return values;
}

ValueList Store::waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout, ValueRange range) {
  return sliceValues(waitAndGet(keys, timeout), range);
}

ValueList sliceValues(const ValueList& values, ValueRange range) {
  ValueList out;
  for (size_t i = 0; i < values.size(); ++i) out.append(range.of(values[i]));
  return out;
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

KeyMappingStore::KeyMappingStore(std::shared_ptr<Store> store) : store_(std::move(store)) {
  HVD_INTERNAL_ASSERT(store_ != nullptr, "a key-mapping store needs an underlying store");
}

std::vector<std::string> KeyMappingStore::map(const std::vector<std::string>& keys) const {
  std::vector<std::string> out;
  out.reserve(keys.size());
  for (const auto& key : keys) out.push_back(map(key));
  return out;
}

void KeyMappingStore::set(const std::string& key, const Bytes& value) { store_->set(map(key), value); }
std::optional<Bytes> KeyMappingStore::tryGet(const std::string& key) { return store_->tryGet(map(key)); }
void KeyMappingStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  store_->wait(map(keys), timeout);
}
int64_t KeyMappingStore::add(const std::string& key, int64_t delta) { return store_->add(map(key), delta); }
void KeyMappingStore::deleteKey(const std::string& key) { store_->deleteKey(map(key)); }
Bytes KeyMappingStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  return store_->get(map(key), timeout);
}
bool KeyMappingStore::check(const std::vector<std::string>& keys) { return store_->check(map(keys)); }
ValueList KeyMappingStore::waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  return store_->waitAndGet(map(keys), timeout);
}

ValueList KeyMappingStore::waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                                      ValueRange range) {
  return store_->waitAndGet(map(keys), timeout, range);
}

PrefixStore::PrefixStore(std::string prefix, std::shared_ptr<Store> store)
    : KeyMappingStore(std::move(store)), prefix_(std::move(prefix)) {}

std::string PrefixStore::describe() const { return underlying()->describe() + " (scope '" + prefix_ + "')"; }

RoundStore::RoundStore(uint64_t round, std::shared_ptr<Store> store)
    : KeyMappingStore(std::move(store)), round_(round) {}

std::string RoundStore::map(const std::string& key) const {
  const auto slash = key.find('/');
  HVD_CHECK(slash != std::string::npos && slash > 0, StoreError, "key '", key,
            "' has no scope to put in elastic round ", round_, " (expected '<scope>/<key>')");
  return roundScope(round_, key.substr(0, slash)) + key.substr(slash);
}

std::string RoundStore::describe() const {
  return underlying()->describe() + " (elastic round " + std::to_string(round_) + ")";
}

}  // namespace hvd::rendezvous

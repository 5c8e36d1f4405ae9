#include "rendezvous/memory_store.h"

#include <string>

#include "base/error.h"

namespace hvd::rendezvous {

void MemoryStore::set(const std::string& key, const Bytes& value) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    data_[key] = value;
  }
  changed_.notify_all();  // after unlock: waiters wake straight into a free mutex
}

std::optional<Bytes> MemoryStore::tryGet(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = data_.find(key);
  if (it == data_.end()) return std::nullopt;
  return it->second;
}

void MemoryStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  auto missing = [&] {
    std::vector<std::string> out;
    for (const auto& key : keys) {
      if (!data_.count(key)) out.push_back(key);
    }
    return out;
  };
  if (changed_.wait_for(lock, timeout, [&] { return missing().empty(); })) return;
  throw RendezvousTimeout(detail::concat("timed out after ", timeout.count(), " ms waiting for key(s) ",
                                         formatKeys(missing()), " in ", describe()));
}

int64_t MemoryStore::add(const std::string& key, int64_t delta) {
  int64_t value = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    auto& stored = data_[key];
    if (!stored.empty()) {
      try {
        value = std::stoll(std::string(stored.begin(), stored.end()));
      } catch (const std::exception&) {
        throw StoreError(detail::concat("add(): key '", key, "' in ", describe(), " holds a non-integer value"));
      }
    }
    value += delta;
    const std::string text = std::to_string(value);
    stored.assign(text.begin(), text.end());
  }
  changed_.notify_all();
  return value;
}

void MemoryStore::deleteKey(const std::string& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  data_.erase(key);
}

}  // namespace hvd::rendezvous

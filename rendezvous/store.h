// The key-value store through which the ranks of a job meet.
//
// One interface, shared by the rendezvous client, the Gloo backend, the launcher and the tests:
//   MemoryStore  in-process (ranks as threads in tests; single-process jobs)
//   FileStore    a directory on a shared file system (multi-process tests without a server)
//   HttpStore    the rendezvous server over HTTP (production; speaks Horovod's protocol)
//   PrefixStore  a decorator that scopes keys ("global" + "rank_0" -> "global/rank_0")
//   RoundStore   a decorator that puts keys in an elastic round's scopes ("global/0" -> "r3.global/0")
//
// Keys are '/'-separated paths. HttpStore maps key "scope/name" to the URL "/scope/name", so a
// PrefixStore("global") over an HttpStore issues exactly the requests real Horovod workers issue.
//
// Threading: every implementation is safe to call from several threads at once.
// Errors: blocking calls throw RendezvousTimeout naming the keys still missing; transport or I/O
// failures throw StoreError naming the store (server address, directory) and the key.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::rendezvous {

// Values are opaque bytes: Gloo address blobs contain NULs. Same type as gloo::rendezvous::Store uses,
// so the Gloo adapter passes values through without copies.
using Bytes = std::vector<char>;

// The values of a multi-key fetch (Store::waitAndGet), in the order of the keys asked for: one buffer and
// a (start, length) per value, so a fetch of N values costs two allocations, not N.
class ValueList {
 public:
  ValueList() = default;
  // Takes a buffer whose values lie at the given (start, length) spans.
  ValueList(std::string buffer, std::vector<std::pair<size_t, size_t>> spans)
      : buffer_(std::move(buffer)), spans_(std::move(spans)) {}
  void append(std::string_view value) {
    spans_.emplace_back(buffer_.size(), value.size());
    buffer_.append(value);
  }
  size_t size() const { return spans_.size(); }
  std::string_view operator[](size_t i) const { return std::string_view(buffer_).substr(spans_[i].first, spans_[i].second); }
  Bytes bytes(size_t i) const {
    const auto v = (*this)[i];
    return Bytes(v.begin(), v.end());
  }

 private:
  std::string buffer_;
  std::vector<std::pair<size_t, size_t>> spans_;
};

// A slice of a value: bytes [offset, offset + length), clipped to the value's end (empty past it).
// repeats: many of the slices are expected to be equal (a field that the ranks of one host share); a
// store may then send each distinct slice once and the others as references to it. The values returned
// are the same either way.
struct ValueRange {
  uint64_t offset = 0;
  uint64_t length = 0;
  bool repeats = false;
  bool operator==(const ValueRange& o) const {
    return offset == o.offset && length == o.length && repeats == o.repeats;
  }
  // This slice of `value`.
  std::string_view of(std::string_view value) const {
    if (offset >= value.size()) return {};
    return value.substr(offset, std::min<uint64_t>(length, value.size() - offset));
  }
};

// Each value of `values` cut to `range` (Store::waitAndGet's slicing on the client).
ValueList sliceValues(const ValueList& values, ValueRange range);

class Store {
 public:
  // One default for every blocking call in every layer (Gloo's default is also 30 s).
  static constexpr std::chrono::milliseconds kDefaultTimeout{std::chrono::seconds(30)};

  virtual ~Store() = default;

  // Stores value at key, replacing any previous value.
  virtual void set(const std::string& key, const Bytes& value) = 0;

  // Non-blocking read: the value, or nullopt when the key is absent.
  virtual std::optional<Bytes> tryGet(const std::string& key) = 0;

  // Blocks until every key exists or the timeout expires; then throws RendezvousTimeout whose
  // message lists the keys still missing.
  virtual void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) = 0;

  // Atomically adds delta to the decimal integer stored at key (absent counts as 0) and returns the
  // new value.
  virtual int64_t add(const std::string& key, int64_t delta) = 0;

  // Removes key. Removing an absent key is not an error. Over HTTP this is Horovod's "finalize": for
  // scopes whose size the server knows, it records that a rank has finished with the scope.
  virtual void deleteKey(const std::string& key) = 0;

  // Blocking read: waits for key (as wait()), then returns its value.
  virtual Bytes get(const std::string& key, std::chrono::milliseconds timeout);

  // True when every key exists now. Non-blocking.
  virtual bool check(const std::vector<std::string>& keys);

  // Blocks until every key exists (as wait()), then returns their values in the order of keys. The
  // default waits, then reads each key; HttpStore asks the server for all of them in one request.
  // Throws RendezvousTimeout as wait() does, and StoreError when a key vanished before it was read.
  virtual ValueList waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout);
  // The same, but only the slice `range` of each value. The default slices whole values here; HttpStore
  // asks the server for the slices only (and does the same against a server without that extension).
  virtual ValueList waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                               ValueRange range);

  // Human-readable name for error messages, e.g. "http://127.0.0.1:4321" or "memory store".
  virtual std::string describe() const = 0;
};

// A store that forwards every call to an underlying store with each key rewritten by map(): the common part
// of PrefixStore and RoundStore.
class KeyMappingStore : public Store {
 public:
  explicit KeyMappingStore(std::shared_ptr<Store> store);

  void set(const std::string& key, const Bytes& value) override;
  std::optional<Bytes> tryGet(const std::string& key) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;
  void deleteKey(const std::string& key) override;
  Bytes get(const std::string& key, std::chrono::milliseconds timeout) override;
  bool check(const std::vector<std::string>& keys) override;
  ValueList waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  ValueList waitAndGet(const std::vector<std::string>& keys, std::chrono::milliseconds timeout,
                       ValueRange range) override;

 protected:
  virtual std::string map(const std::string& key) const = 0;
  std::vector<std::string> map(const std::vector<std::string>& keys) const;
  const std::shared_ptr<Store>& underlying() const { return store_; }

 private:
  std::shared_ptr<Store> store_;
};

// Scopes every key of an underlying store: key k becomes "<prefix>/k". Cheap to create; shares the
// underlying store.
class PrefixStore final : public KeyMappingStore {
 public:
  PrefixStore(std::string prefix, std::shared_ptr<Store> store);
  std::string describe() const override;
  const std::string& prefix() const { return prefix_; }

 private:
  std::string map(const std::string& key) const override { return prefix_ + "/" + key; }
  using KeyMappingStore::map;

  std::string prefix_;
};

// An elastic round's view of an underlying store: key "scope/rest" becomes "r<round>.scope/rest"
// (roundScope, rendezvous/round.h), so the Gloo contexts of different rounds never share a key, and the
// server refuses a worker of a round that is over. Cheap to create; shares the underlying store.
class RoundStore final : public KeyMappingStore {
 public:
  RoundStore(uint64_t round, std::shared_ptr<Store> store);
  std::string describe() const override;
  uint64_t round() const { return round_; }

 private:
  std::string map(const std::string& key) const override;
  using KeyMappingStore::map;

  uint64_t round_;
};

// Formats a list of keys for error messages: "[a, b, c]" (at most a few dozen, then "... and N more").
std::string formatKeys(const std::vector<std::string>& keys);

}  // namespace hvd::rendezvous

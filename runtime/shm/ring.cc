#include "runtime/shm/ring.h"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "base/error.h"

namespace hvd::runtime::shm {

struct Ring::Header {
  alignas(64) std::atomic<uint64_t> tail;  // bytes written, by the producer
  alignas(64) std::atomic<uint64_t> head;  // bytes read, by the consumer
  alignas(64) std::atomic<uint32_t> asleep;
};
static_assert(std::atomic<uint64_t>::is_always_lock_free && std::atomic<uint32_t>::is_always_lock_free,
              "the ring's words are shared between processes");

Ring::Ring(std::byte* base, size_t capacity)
    : header_(reinterpret_cast<Header*>(base)), data_(base + kHeaderBytes), capacity_(capacity) {
  static_assert(sizeof(Header) <= kHeaderBytes);
  HVD_INTERNAL_ASSERT(capacity >= 64 && (capacity & (capacity - 1)) == 0, "ring capacity ", capacity,
                      " is not a power of two of at least 64");
}

void Ring::write(uint64_t at, const void* from, size_t n) {
  const size_t offset = at & (capacity_ - 1);
  const size_t first = std::min(n, capacity_ - offset);
  std::memcpy(data_ + offset, from, first);
  std::memcpy(data_, static_cast<const std::byte*>(from) + first, n - first);
}

void Ring::read(uint64_t at, void* to, size_t n) const {
  const size_t offset = at & (capacity_ - 1);
  const size_t first = std::min(n, capacity_ - offset);
  std::memcpy(to, data_ + offset, first);
  std::memcpy(static_cast<std::byte*>(to) + first, data_, n - first);
}

bool Ring::push(const char* data, uint32_t length) {
  HVD_INTERNAL_ASSERT(length != kDiverted, "ring record of ", length, " bytes");
  const uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  const uint64_t head = header_->head.load(std::memory_order_acquire);
  if (capacity_ - (tail - head) < sizeof length + length) return false;
  write(tail, &length, sizeof length);
  write(tail + sizeof length, data, length);
  header_->tail.store(tail + sizeof length + length, std::memory_order_seq_cst);
  return true;
}

bool Ring::pushDiverted() {
  const uint64_t tail = header_->tail.load(std::memory_order_relaxed);
  const uint64_t head = header_->head.load(std::memory_order_acquire);
  if (capacity_ - (tail - head) < sizeof kDiverted) return false;
  write(tail, &kDiverted, sizeof kDiverted);
  header_->tail.store(tail + sizeof kDiverted, std::memory_order_seq_cst);
  return true;
}

bool Ring::takeSleeper() {
  return header_->asleep.load(std::memory_order_seq_cst) != 0 &&
         header_->asleep.exchange(0, std::memory_order_seq_cst) != 0;
}

bool Ring::pop(std::vector<char>& message, bool& diverted) {
  const uint64_t head = header_->head.load(std::memory_order_relaxed);
  const uint64_t tail = header_->tail.load(std::memory_order_acquire);
  if (head == tail) return false;
  uint32_t length = 0;
  read(head, &length, sizeof length);
  diverted = length == kDiverted;
  const size_t payload = diverted ? 0 : length;
  HVD_INTERNAL_ASSERT(tail - head >= sizeof length + payload, "ring record of ", length, " bytes with only ",
                      tail - head, " written");
  message.resize(payload);
  read(head + sizeof length, message.data(), payload);
  header_->head.store(head + sizeof length + payload, std::memory_order_release);
  return true;
}

bool Ring::empty() const {
  return header_->tail.load(std::memory_order_acquire) == header_->head.load(std::memory_order_relaxed);
}

bool Ring::announceSleep() {
  header_->asleep.store(1, std::memory_order_seq_cst);
  if (header_->tail.load(std::memory_order_seq_cst) == header_->head.load(std::memory_order_relaxed))
    return true;
  header_->asleep.store(0, std::memory_order_relaxed);
  return false;
}

void Ring::awake() { header_->asleep.store(0, std::memory_order_relaxed); }

}  // namespace hvd::runtime::shm

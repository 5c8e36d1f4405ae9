// Ring: one direction of a control channel in shared memory, a single-producer single-consumer queue of
// messages between two processes, and the handshake that lets its consumer sleep.
//
// Layout (at `base`: kHeaderBytes, then `capacity` bytes of data, a power of two): the producer's count of
// bytes written (tail) and the consumer's count of bytes read (head), each on a cache line of its own, and
// the consumer's asleep word. A record is [u32 length][payload] and may wrap around the end of the data
// area; length kDiverted is a record without payload that stands for a message sent another way (see
// ring_channel.h). A record appears whole: the producer writes it, then advances tail (release); the
// consumer reads up to the tail it loaded (acquire), then advances head, which frees the room.
//
// Sleeping: a consumer that is about to block elsewhere (in poll()) sets its asleep word and then looks for
// records once more (announceSleep: false when some wait, and then it must not block); a producer, after it
// published a record, takes the asleep word (takeSleeper: true once per announcement) and then wakes the
// consumer its own way. All four accesses are sequentially consistent, so at least one side sees the other:
// no record is left behind a consumer that sleeps.
//
// Threading: one producer thread and one consumer thread, in any processes that map the memory. Ring is a
// view: it neither owns nor initialises the memory, which must start zeroed (an empty ring).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace hvd::runtime::shm {

class Ring {
 public:
  static constexpr size_t kHeaderBytes = 192;
  static constexpr uint32_t kDiverted = 0xffffffffu;
  static size_t bytes(size_t capacity) { return kHeaderBytes + capacity; }

  Ring(std::byte* base, size_t capacity);

  // Producer. push: false when the message does not fit now (the consumer is behind). Messages above
  // largest() should go another way (a diverted record), so that one never waits for most of the ring.
  bool push(const char* data, uint32_t length);
  bool pushDiverted();
  bool takeSleeper();
  size_t largest() const { return capacity_ / 4; }

  // Consumer. pop: the next record, false when none; a diverted one leaves message empty and sets diverted.
  bool pop(std::vector<char>& message, bool& diverted);
  bool empty() const;
  bool announceSleep();
  void awake();

 private:
  struct Header;
  void write(uint64_t at, const void* from, size_t n);
  void read(uint64_t at, void* to, size_t n) const;

  Header* header_;
  std::byte* data_;
  size_t capacity_;
};

}  // namespace hvd::runtime::shm

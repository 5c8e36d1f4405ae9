#include "runtime/shm/announcements.h"

namespace hvd::runtime::shm {
namespace {

// Rounds wrap around (2^32 of them): "reached" is the signed distance, as the data rounds compare counters.
bool reached(uint32_t seq, uint32_t target) { return static_cast<int32_t>(seq - target) >= 0; }

uint32_t roundOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

}  // namespace

void Announcements::reset(uint32_t complete) {
  AnnouncementWords& mine = words_[rank_];
  // The word of complete's parity holds it; the other holds complete - 1, what announcing the next round
  // replaces.
  mine.word[complete & 1].store(uint64_t{complete} << 32, std::memory_order_relaxed);
  mine.word[(complete + 1) & 1].store(uint64_t{complete - 1} << 32, std::memory_order_relaxed);
  mine.busy.store(0, std::memory_order_relaxed);
  mine.read.store(complete, std::memory_order_release);
}

bool Announcements::announce(int member, uint32_t round, uint32_t value) {
  std::atomic<uint64_t>& word = words_[member].word[round & 1];
  uint64_t seen = word.load(std::memory_order_acquire);
  if (roundOf(seen) != round - 2) return false;
  for (int r = 0; r < size_; ++r) {
    if (!reached(words_[r].read.load(std::memory_order_acquire), round - 2)) return false;
  }
  return word.compare_exchange_strong(seen, (uint64_t{round} << 32) | value, std::memory_order_seq_cst);
}

std::optional<uint32_t> Announcements::announced(int member, uint32_t round) const {
  const uint64_t word = words_[member].word[round & 1].load(std::memory_order_acquire);
  if (roundOf(word) != round) return std::nullopt;
  return static_cast<uint32_t>(word);
}

bool Announcements::announcedAll(uint32_t round) const {
  for (int r = 0; r < size_; ++r) {
    if (!reached(roundOf(words_[r].word[round & 1].load(std::memory_order_acquire)), round)) return false;
  }
  return true;
}

void Announcements::read(uint32_t round) { words_[rank_].read.store(round, std::memory_order_release); }

void Announcements::setBusy(bool busy) { words_[rank_].busy.store(busy, std::memory_order_seq_cst); }

bool Announcements::busy(int member) const {
  return words_[member].busy.load(std::memory_order_acquire) != 0;
}

}  // namespace hvd::runtime::shm

// shm::Announcements: the words in a host's shared-memory segment on which its ranks agree on the next
// operation without a coordinator (the runtime's negotiation-free cached operations: runtime/announcer.h has
// one rank's side of the protocol, runtime/agreement.cc its use).
//
// A second sequence of rounds, beside the segment's data rounds. Each member has:
//   - two words, one per parity, holding (round << 32) | value. announce() writes a member's word for round n
//     by compare-and-swap, and only while it still holds round n - 2: so of a member's own announcement and
//     an answer given for it by another member, exactly one lands, and a value once written for round n stays
//     until round n + 2 replaces it;
//   - a read word: the last round whose words the member will not read again. A word of round n - 2 is
//     overwritten only once every member has read past n - 2, so a member descheduled in the middle of
//     reading round n - 2 still finds every word of it when it runs again;
//   - a busy word: a hint (the member has operations at the coordinator) that lets an announcer answer for
//     such a member at once instead of waiting for it.
// Round n is complete once every member's word holds n.
//
// Each call below is one atomic step as far as the other members can tell: announce() takes effect at its
// compare-and-swap (the read words it checks first only grow, so a check that passed stays passed), and
// announcedAll() reads words that only grow, so all of them held at least the round at its last read. The
// model-checking test of the protocol (tests/runtime/announcer_test.cc) relies on that and runs this class
// on ordinary memory.
//
// Threading: every call may come from any member's process at any time; none blocks.
#pragma once

#include <atomic>
#include <cstdint>
#include <optional>

namespace hvd::runtime::shm {

// One member's words, on a cache line of their own (the data rounds poll the counters beside them).
struct alignas(64) AnnouncementWords {
  std::atomic<uint64_t> word[2];  // by parity: (round << 32) | value
  std::atomic<uint32_t> busy;     // the member has operations at the coordinator
  std::atomic<uint32_t> read;     // the last round whose words this member will not read again
};

class Announcements {
 public:
  // words: the group's `size` members' words; rank: this member. Does not touch the words.
  Announcements(AnnouncementWords* words, int size, int rank) : words_(words), size_(size), rank_(rank) {}

  // Sets this member's words to the start: round `complete` complete and read, not busy (the first
  // announcement is of the round after). Before the group's first round; the runtime starts at 0.
  void reset(uint32_t complete = 0);

  // Writes value as member's word for round (member: this one, or another it answers for); false when the
  // word no longer holds round - 2 (someone wrote it first) or some member still reads round - 2.
  bool announce(int member, uint32_t round, uint32_t value);
  // member's value for round; nullopt while its word holds an earlier round.
  std::optional<uint32_t> announced(int member, uint32_t round) const;
  // Round is complete: every member's word holds it or a later round.
  bool announcedAll(uint32_t round) const;
  // This member will not read the words of round or earlier again.
  void read(uint32_t round);
  void setBusy(bool busy);
  bool busy(int member) const;

  int size() const { return size_; }
  int rank() const { return rank_; }

 private:
  AnnouncementWords* words_;
  int size_;
  int rank_;
};

}  // namespace hvd::runtime::shm

// Announcer: one rank's side of the protocol by which the ranks of one host agree on the next operation
// without the coordinator, over the words of shm::Announcements (runtime/shm/announcements.h). The runtime
// (runtime/agreement.cc) decides when to announce and what an outcome means; this class keeps the rounds.
//
// The protocol, for a member m:
//   - m announces a value v (non-zero: a response cache id) for round n = the last round complete on m, + 1,
//     by writing its own word for n;
//   - m settles the announcement by looking at every other member's word for n. A member whose word does not
//     hold n yet is waited for, or answered for: m writes kNo into that member's word (a compare-and-swap, so
//     either the member's own announcement or the answer lands, never both, and whichever landed stays);
//   - once every word holds n, round n is complete; it is agreed when every word holds v, refused otherwise;
//   - a member that did not announce (it was answered for, or it answered kNo itself because it has business
//     at the coordinator) finds rounds complete later and catches up with them; it never runs anything for
//     them.
// What makes it safe to run an agreed round without the coordinator is the runtime's rule for announcing (see
// agreement.cc); what this class guarantees is that every member that settles round n sees the same words,
// so all of them conclude the same, and that no member ever waits on another to settle: whoever has not
// announced can always be answered for.
//
// Every method that touches the words makes exactly one call of shm::Announcements (one atomic step for the
// other members), so that a test can interleave members step by step: tests/runtime/announcer_test.cc checks
// every interleaving of two and three members announcing, answering, catching up and dying. The production
// loop calls the steps back to back.
//
// Threading: one thread at a time per member (the runtime's progress lock). The object is a plain value.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/shm/announcements.h"

namespace hvd::runtime {

class Announcer {
 public:
  static constexpr uint32_t kNo = 0;  // an answer that agrees to nothing (cache ids start at 1)

  enum class Settle {
    kOpen,     // a step was taken: call again
    kWaiting,  // a member has not announced and may not be answered for yet: call again later
    kAgreed,   // complete, every member announced this member's value: run it
    kRefused,  // complete, some member did not: nothing ran for this round
  };

  // complete: the last round complete when the group started (0 in the runtime, as the words' reset(); a
  // test starts near the wrap-around of the 32-bit round numbers).
  explicit Announcer(uint32_t complete = 0) : complete_(complete), read_(complete) {}

  // Catching up: one look whether the round after the last complete one is complete (by others' answers and
  // announcements); true when it was, and this member advanced to it (call again). Then publishRead().
  bool catchUpStep(const shm::Announcements& board);
  // Tells the other members that this one is done reading the rounds it completed (one step), so that their
  // words for those rounds may be overwritten. A no-op without a step when there is nothing new.
  void publishRead(shm::Announcements& board);
  bool readBehind() const { return read_ != complete_; }

  // Announces value (not kNo) for the next round: one step. false: this member was answered for in that
  // round already (or has not caught up); nothing is open then.
  bool announce(shm::Announcements& board, uint32_t value);
  bool announcing() const { return announcing_; }
  uint32_t value() const { return value_; }

  // One step towards settling the open announcement. may_answer(member): whether a member that has not
  // announced yet may be answered for now (the runtime waits a grace first; a test answers at any step).
  template <typename MayAnswer>
  Settle settleStep(shm::Announcements& board, MayAnswer&& may_answer);

  // For a member with business at the coordinator, which answers kNo for itself as soon as someone asks
  // rather than making the announcer wait: whether member announced the next round (one step), and the
  // answer (one step; false when someone answered for this member first).
  bool asked(const shm::Announcements& board, int member) const;
  bool answerNo(shm::Announcements& board);

  uint32_t completeRound() const { return complete_; }  // the last round complete on this member
  uint32_t nextRound() const { return complete_ + 1; }

  // Everything this member keeps, for tests that explore the protocol's states.
  std::array<uint32_t, 7> state() const {
    return {complete_, read_, announcing_, value_, static_cast<uint32_t>(peer_), answer_, all_same_};
  }

 private:
  void nextPeer(int rank);

  uint32_t complete_ = 0;
  uint32_t read_ = 0;  // the last round published as read
  bool announcing_ = false;
  uint32_t value_ = 0;
  int peer_ = 0;         // the member settling looks at next
  bool answer_ = false;  // settling answers for peer_ at its next step
  bool all_same_ = true;
};

template <typename MayAnswer>
Announcer::Settle Announcer::settleStep(shm::Announcements& board, MayAnswer&& may_answer) {
  const uint32_t round = complete_ + 1;
  if (peer_ >= board.size()) {
    board.read(round);
    complete_ = read_ = round;
    announcing_ = false;
    return all_same_ ? Settle::kAgreed : Settle::kRefused;
  }
  if (answer_) {
    // Lands, or the member announced meanwhile; either way its word holds the round now, and the next look
    // reads it (the words of round - 2 are read by everyone: this member's own announcement needed that).
    answer_ = false;
    board.announce(peer_, round, kNo);
    return Settle::kOpen;
  }
  const auto seen = board.announced(peer_, round);
  if (!seen) {
    if (!may_answer(peer_)) return Settle::kWaiting;
    answer_ = true;
    return Settle::kOpen;
  }
  all_same_ = all_same_ && *seen == value_;
  nextPeer(board.rank());
  return Settle::kOpen;
}

}  // namespace hvd::runtime

#include "runtime/announcer.h"

namespace hvd::runtime {

bool Announcer::catchUpStep(const shm::Announcements& board) {
  if (announcing_ || !board.announcedAll(complete_ + 1)) return false;
  ++complete_;
  return true;
}

void Announcer::publishRead(shm::Announcements& board) {
  if (read_ == complete_) return;
  board.read(complete_);
  read_ = complete_;
}

bool Announcer::announce(shm::Announcements& board, uint32_t value) {
  if (announcing_ || value == kNo || !board.announce(board.rank(), complete_ + 1, value)) return false;
  announcing_ = true;
  value_ = value;
  all_same_ = true;
  answer_ = false;
  peer_ = -1;
  nextPeer(board.rank());
  return true;
}

bool Announcer::asked(const shm::Announcements& board, int member) const {
  return member != board.rank() && board.announced(member, complete_ + 1).has_value();
}

bool Announcer::answerNo(shm::Announcements& board) {
  return !announcing_ && board.announce(board.rank(), complete_ + 1, kNo);
}

void Announcer::nextPeer(int rank) {
  ++peer_;
  if (peer_ == rank) ++peer_;
}

}  // namespace hvd::runtime

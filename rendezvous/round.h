// Elastic rounds: the membership of each re-formation of an elastic job, as the driver decides it and the
// rendezvous server serves it (GET /rank_and_size, rendezvous/handler.h). Plain data.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/slot.h"

namespace hvd::rendezvous {

// One slot's place in an elastic round (Horovod's SlotInfo); -1 everywhere when the slot is not in it.
struct SlotAssignment : SlotInfo {
  SlotAssignment() : SlotInfo{-1, -1, -1, -1, -1, -1} {}  // not in the round
  explicit SlotAssignment(const SlotInfo& place) : SlotInfo(place) {}
  SlotAssignment(int rank, int size, int local_rank, int local_size, int cross_rank, int cross_size)
      : SlotInfo{rank, size, local_rank, local_size, cross_rank, cross_size} {}
};

// One re-formation of an elastic job.
struct ElasticRound {
  uint64_t number = 0;
  std::map<std::string, SlotAssignment> slots;  // "<host>:<local_rank>" -> its place
  std::map<std::string, int> scope_sizes;       // the round's sized scopes (Server::setScopeSizes)
  std::vector<std::string> blacklist;           // hosts left out for now (shown in /status)
  unsigned changes = 0;                         // kRoundRemoved | kRoundAdded, against the round before
};

// What changed in a round against the one before it: members left (failed, removed, blacklisted), and
// members joined (new hosts or slots, replacements of failed workers).
inline constexpr unsigned kRoundRemoved = 1, kRoundAdded = 2;

// The rounds a worker has not joined yet: the latest round, and the OR of the changes of every round
// after the one the worker is in ({that round, 0} when none began since).
struct RoundNews {
  uint64_t round = 0;
  unsigned changes = 0;
};

// "r<round>.<scope>": a scope of that round (the server refuses PUTs into it once the round is over).
std::string roundScope(uint64_t round, const std::string& scope);
// The round of a scope named as roundScope() makes them; nullopt for other scopes.
std::optional<uint64_t> roundOfScope(const std::string& scope);

}  // namespace hvd::rendezvous

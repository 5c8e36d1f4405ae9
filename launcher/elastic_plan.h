// Where an elastic job's processes go (launcher/elastic.h describes the job): the slots the usable hosts
// offer, the places of one round's members, and how long a failing host stays blacklisted.
// Pure functions of their arguments: safe from any thread; nothing throws but allocation.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "launcher/host_plan.h"

namespace hvd::launcher {

// "<host>:<local_rank>": a process's identity across rounds (horovodrun's), as rank_and_size names it.
std::string slotName(const std::string& host, int local_rank);

// The slots the usable `hosts` (in the order they first appeared) offer: host by host, slot indexes
// 0..slots-1, up to `max_np` (horovodrun's get_host_assignments).
std::vector<std::string> offeredSlots(const std::vector<HostSpec>& hosts, std::optional<int> max_np);

// One member of a round.
struct ElasticPlace {
  std::string slot;  // "<host>:<index>", the process's identity
  int index = 0;     // its slot index (the HOROVOD_LOCAL_RANK it was started with)
  Placement place;   // its place in the round
};

// The places of one round: its members are the offered slots (above) that are `survivors` (processes of
// the last round, in their rank order) or `joining` (processes ready to join). Ranks go to the survivors
// first, in their order, then to the joining slots in host order. A host's members get local ranks
// 0..n-1 by slot index (so a slot's local rank is its index unless a lower slot of its host is missing);
// cross_rank and cross_size are over the hosts, in order, that have a member at that local rank.
std::vector<ElasticPlace> planElasticRound(const std::vector<HostSpec>& hosts, const std::vector<std::string>& survivors,
                                           const std::set<std::string>& joining, std::optional<int> max_np);

// Seconds a host stays blacklisted the `count`-th time (1, 2, ...) with --blacklist-cooldown-range MIN MAX:
// MIN, 2*MIN, 4*MIN, ... capped at MAX (what horovodrun's documentation describes; its code starts at 2-3x MIN).
std::chrono::seconds blacklistCooldown(int count, std::pair<int, int> range);

// "a:2, b:1": the hosts of a round's placements, in the order they first appear, with their process counts
// (for the driver's "elastic round N" message).
std::string describeHosts(const std::vector<Placement>& plan);

}  // namespace hvd::launcher

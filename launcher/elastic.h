// Elastic jobs (--min-np, --host-discovery-script): the driver that keeps a job running while workers die
// and hosts come and go.
//
// Membership is a sequence of rounds served by the rendezvous server (rendezvous/round.h). The driver
// reconciles what runs with what should run: after every worker exit (a short debounce gathers the exits
// of one event), every discovery result and every cooldown expiry, it plans the slots the usable hosts
// offer and, when they differ from the current round's members or a member has died, begins the next
// round: workers left out are stopped, every slot without a live process gets one, and the survivors
// learn of the round when a collective fails (a peer died) or between steps (GET /round_news, from
// rank 0). Where this departs from horovodrun's driver:
//   - A worker that fails on a healthy host is started again there. A host is blacklisted (for the
//     --blacklist-cooldown-range period, else for good) only when it keeps failing (kFailuresToBlacklist
//     failures within kFailureWindow) or cannot be reached (an ssh connection lost, a failed start).
//   - New hosts' workers start at once and wait in the rendezvous while the old ones finish their step.
//   - Survivors keep their order and come first, so rank 0 is always a process holding the job's state
//     (horovodrun: host order, which makes a restarted process rank 0 when its host comes first).
//   - The discovery script has a time limit (HVD_DISCOVERY_TIMEOUT_SECONDS, default 30 s); a failing,
//     hanging or garbled script is reported once per kind of failure and the previous hosts are kept,
//     also on the first call, while the --elastic-timeout for the first hosts runs.
//   - A single host (or localhost) may run an elastic job.
// The job fails, naming why, when: fewer than --min-np slots are usable for longer than --elastic-timeout
// (the message names what was lost), --reset-limit re-formations have happened and another is needed,
// every worker of a round failed, or no process of the previous round is left to hand the state on.
// It ends when its workers have ended after one of them exited 0 (no re-formation after that).
// Teardown on signals and on failure is the static job's (launcher/job.h), with the same guarantees.
// Threading: run() on the calling thread, which runs the io_context; not reentrant.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/host_plan.h"
#include "launcher/launcher.h"

namespace hvd::launcher {

inline constexpr int kFailuresToBlacklist = 3;
inline constexpr std::chrono::seconds kFailureWindow{60};
inline constexpr std::chrono::seconds kDefaultDiscoveryTimeout{30};

// "<host>:<local_rank>": a process's identity across rounds (horovodrun's), as rank_and_size names it.
std::string slotName(const std::string& host, int local_rank);

// The places of one round. `hosts`: the usable hosts in the order they first appeared, with their slots.
// Slots are taken host by host, local ranks 0..n-1, up to `max_np` (horovodrun's get_host_assignments).
// Ranks go first to `survivors` (slot names in their previous rank order) that are among those slots, then
// to the other slots in host order. local_size counts a host's slots taken; cross_rank and cross_size are
// over the hosts that have a slot at that local rank, in host order.
std::vector<Placement> planElasticRound(const std::vector<HostSpec>& hosts, const std::vector<std::string>& survivors,
                                        std::optional<int> max_np);

// Seconds a host stays blacklisted the `count`-th time (1, 2, ...) with --blacklist-cooldown-range MIN MAX:
// MIN, 2*MIN, 4*MIN, ... capped at MAX (what horovodrun's documentation describes; its code starts at 2-3x MIN).
std::chrono::seconds blacklistCooldown(int count, std::pair<int, int> range);

class ElasticJob {
 public:
  // `fixed_hosts`: the -H/--hostfile hosts when there is no discovery script (else empty).
  ElasticJob(HvdrunOptions options, std::vector<HostSpec> fixed_hosts, Environment inherited);
  RunResult run();

 private:
  HvdrunOptions options_;
  std::vector<HostSpec> fixed_hosts_;
  Environment inherited_;
};

}  // namespace hvd::launcher

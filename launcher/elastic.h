// Elastic jobs (--min-np, --host-discovery-script): the driver that keeps a job running while workers die
// and hosts come and go.
//
// Membership is a sequence of rounds served by the rendezvous server (rendezvous/round.h). The driver
// reconciles what runs with what should run: after every worker exit (kSettle gathers the exits of one
// event), every discovery result and every cooldown expiry, it plans the slots the usable hosts
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
// Teardown on signals and on failure is the static job's (launcher/supervisor.h), with the same guarantees.
// Threading: runElasticJob() on the calling thread, which runs the io_context; not reentrant.
#pragma once

#include <chrono>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/host_plan.h"
#include "launcher/launcher.h"

namespace hvd::launcher {

inline constexpr int kFailuresToBlacklist = 3;
inline constexpr std::chrono::seconds kFailureWindow{60};
inline constexpr std::chrono::seconds kDefaultDiscoveryTimeout{30};
// After a worker's exit, the driver waits this long for the exits of the same event (a host going down ends
// all its workers within milliseconds) so that they make one round.
inline constexpr std::chrono::milliseconds kSettle{10};
// Workers wait this much longer than --elastic-timeout for a round (HOROVOD_ELASTIC_TIMEOUT), so that a job
// below --min-np fails with the driver's message naming what was lost, not with the workers' timeouts.
inline constexpr std::chrono::seconds kWorkerTimeoutSlack{30};

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

// Runs the elastic job (above) to its end on the calling thread; the arguments must outlive the call.
// `fixed_hosts`: the -H/--hostfile hosts when there is no discovery script (else empty).
RunResult runElasticJob(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts,
                        const Environment& inherited);

}  // namespace hvd::launcher

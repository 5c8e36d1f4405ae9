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
// Where a round's processes go: launcher/elastic_plan.h; the driver itself: launcher/elastic_driver.h.
#pragma once

#include <chrono>
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

// Runs the elastic job (above) to its end on the calling thread; the arguments must outlive the call.
// `fixed_hosts`: the -H/--hostfile hosts when there is no discovery script (else empty).
RunResult runElasticJob(const HvdrunOptions& options, const std::vector<HostSpec>& fixed_hosts,
                        const Environment& inherited);

}  // namespace hvd::launcher

// hvd-rendezvous: the rendezvous server as a standalone daemon, for workers started by other tools
// (srun, mpirun, a job script). cmd/hvd_rendezvous.cc is only `return daemonMain(argc, argv);`.
//
// Workers find it through HOROVOD_GLOO_RENDEZVOUS_ADDR / HOROVOD_GLOO_RENDEZVOUS_PORT and, unless it
// runs with --no-token, present the token from HVD_RENDEZVOUS_TOKEN.
//
// Exit codes: 0 stopped by SIGINT/SIGTERM; 1 cannot listen (message names the address) or another
// runtime failure; 2 bad command line (one line naming the bad value).
#pragma once

namespace hvd::rendezvous {

inline constexpr int kDaemonExitOk = 0;
inline constexpr int kDaemonExitFailure = 1;
inline constexpr int kDaemonExitUsage = 2;

int daemonMain(int argc, char** argv);

}  // namespace hvd::rendezvous

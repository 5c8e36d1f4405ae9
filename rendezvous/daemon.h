// hvd-rendezvous: the rendezvous server as a standalone daemon, for workers started by other tools
// (srun, mpirun, a job script). cmd/hvd_rendezvous.cc is only `return daemonMain(argc, argv);`.
//
// Workers find it through HVD_RENDEZVOUS=HOST:PORT (or HOROVOD_GLOO_RENDEZVOUS_ADDR / _PORT) and, unless it
// runs with --no-token, present the token from HVD_RENDEZVOUS_TOKEN. For job scripts: --address-file F
// writes HOST:PORT to F once listening (removed on exit); --detach returns once the server listens in the
// background, printing `export HVD_RENDEZVOUS=...`, `export HVD_RENDEZVOUS_TOKEN=...` (a token it made up
// when no token option is given) and `export HVD_RENDEZVOUS_PID=...` for eval. HOST is the bind address, or
// the machine's host name for a wildcard bind.
//
// --status-port PORT (--status-address ADDR, default 127.0.0.1) serves the status page (status_page.h) on a
// second listener and prints "hvd-rendezvous status page on http://ADDR:PORT/" after the listening line
// (on stderr with --detach). Without a launcher it knows workers only from their reports: they appear
// "running" with their first report and never "exited". Its access rules follow the token options: with a
// token (--token-file, --detach's, or --trust-local-peers' secret) the details need it or a loopback
// connection of this user; with --no-token everything is open.
//
// Exit codes: 0 stopped by SIGINT/SIGTERM (--detach: the server listens); 1 cannot listen (message names
// the address), cannot write the address file, or another runtime failure; 2 bad command line (one line
// naming the bad value).
#pragma once

namespace hvd::rendezvous {

inline constexpr int kDaemonExitOk = 0;
inline constexpr int kDaemonExitFailure = 1;
inline constexpr int kDaemonExitUsage = 2;

int daemonMain(int argc, char** argv);

}  // namespace hvd::rendezvous

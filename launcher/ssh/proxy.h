// hvd-proxy: the one process hvdrun starts per remote host (as MPICH Hydra starts hydra_pmi_proxy). It
// speaks the frames of launcher/ssh/proxy_protocol.h on its stdin/stdout (one ssh exec channel) and
//   - answers reachability checks with a TCP connect from this host to the rendezvous address;
//   - starts each rank it is sent: cd to its directory (missing: "hvdrun: remote directory D missing on
//     H" on the rank's stderr, exit code 126), its environment over the proxy's own (the remote login's),
//     its own session and process group (setsid), stdin /dev/null or, for a forwarded stdin, a pipe fed
//     from kStdin frames; a command that cannot be executed ends with exit code 127 and
//     "hvdrun: rank N: cannot execute 'cmd': <errno text>" on its stderr, as a local worker does;
//   - forwards each rank's stdout and stderr as kOutput frames and its end as one kExit frame (a signal
//     death as the signal), after the rank's pipes reached EOF or kProxyDrainTimeout after it ended;
//     members of a rank's process group left behind when it ends get SIGTERM;
//   - delivers kSignal frames to a rank's process group;
//   - watchdog: on EOF of its stdin (hvdrun exited or was killed, the connection closed) or after
//     kWatchdogTimeout without a byte from hvdrun (heartbeats come every kHeartbeatInterval: a silently
//     dead network), SIGTERM to every rank's process group, SIGKILL kKillGrace later, then exit.
// Its exit status says nothing about the ranks (theirs travel as kExit frames): 0 after a normal end,
// 1 after a protocol error (reported on stderr, one line).
// SIGTERM, SIGINT or SIGHUP to the proxy starts the same teardown as the watchdog, except that the ranks'
// output and exits still reach hvdrun (as exits by that signal, unless a rank handles it).
//
// Under srun (launcher/slurm/launcher.h) it runs as `hvd-proxy --connect HOST:PORT`: it connects to hvdrun,
// sends one join line, kProxyJoinPrefix + the token from kProxyTokenEnv + " " + its node's name + "\n"
// (the variable is removed from the environment its ranks inherit, as is HVD_PROXY_NAME), and then speaks the same frames over
// that connection. Exit status 2 for a bad command line or a missing token, 1 when hvdrun cannot be
// reached (one line on stderr naming the address).
// Threading: single-threaded, one poll() loop; no thread, no asio (a small, fast-starting process).
#pragma once

#include <chrono>
#include <string>

namespace hvd::launcher::ssh {

// After a rank ended, how long its pipes may stay open (a background grandchild) before its exit is sent.
inline constexpr std::chrono::milliseconds kProxyDrainTimeout{1000};

// The variable that carries hvdrun's token to a proxy started with --connect.
inline constexpr const char* kProxyTokenEnv = "HVD_PROXY_TOKEN";
// The join line's first word.
inline constexpr const char* kProxyJoinPrefix = "HVD-PROXY-JOIN ";

// The variable that, when set, names a proxy started with --connect in its join line: a launcher agent
// (launcher/agent/launcher.h) starts one proxy per rank and tells them apart by it.
inline constexpr const char* kProxyNameEnv = "HVD_PROXY_NAME";

// The name a proxy gives in its join line: HVD_PROXY_NAME when set, else SLURMD_NODENAME when set (Slurm's
// name for the node), else the hostname.
std::string proxyNodeName();

// main() of hvd-proxy: serves the protocol on fds 0 and 1 until the channel ends. Returns the exit status.
int runProxy(int argc, char** argv);

}  // namespace hvd::launcher::ssh

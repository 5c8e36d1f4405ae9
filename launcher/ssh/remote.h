// What runs on a remote host for one worker: a fixed bootstrap command line and a script sent on stdin.
//
// The command line carries no job data at all (so nothing secret can show up in `ps` on the remote
// host): it is
//     exec bash --norc --noprofile -c 'IFS= read -r n && eval "$(head -c "$n")"' hvdrun-worker
// which reads a length line and then exactly that many bytes of script from the channel's stdin.
// The script (bash) then
//   1. changes to the launcher's working directory, or prints
//      "hvdrun: remote directory <dir> missing on <host>" and exits 126;
//   2. exports every variable as NAME='value' (single-quoted: spaces, quotes, newlines, any bytes
//      survive); names that are not shell identifiers are passed through `env` instead;
//   3. starts the user command under `setsid` (its own session and process group, stdin /dev/null) and
//      keeps the channel's stdin as fd 3 for a watchdog;
//   4. the watchdog reads lines from fd 3: "S<n>" delivers signal n to the worker's process group (to
//      the worker itself while `setsid` has not yet made that group), an empty line is a heartbeat. On EOF (the ssh connection is gone: hvdrun was killed or the network
//      dropped and sshd closed the channel) or after kWatchdogTimeout without a line (network silently
//      dead), it sends SIGTERM to the group and SIGKILL kKillGrace later: no orphans;
//   5. waits for the worker and exits with its status; a worker killed by signal N makes the wrapper
//      re-raise N, so the channel reports an exit signal rather than 128+N.
#pragma once

#include <chrono>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace hvd::launcher::ssh {

// The launcher writes a heartbeat line at least this often on every worker channel.
inline constexpr std::chrono::milliseconds kHeartbeatInterval{1000};
// The remote watchdog gives up on the launcher after this long without a line.
inline constexpr std::chrono::seconds kWatchdogTimeout{3};
// Between the watchdog's SIGTERM and SIGKILL.
inline constexpr std::chrono::seconds kKillGrace{1};

// POSIX shell single-quoting: 'it'\''s'. The empty string becomes ''.
std::string shellQuote(std::string_view s);

// True for [A-Za-z_][A-Za-z0-9_]*.
bool isShellIdentifier(std::string_view name);

struct RemoteWorker {
  std::string host;  // for the missing-directory message
  std::string cwd;
  std::vector<std::pair<std::string, std::string>> env;
  std::vector<std::string> argv;
};

// The fixed bootstrap command line (see above).
const std::string& bootstrapCommand();

// "<length>\n<script>": what the launcher writes first on the channel's stdin.
std::string bootstrapInput(const RemoteWorker& worker);

// "hvdrun: remote directory DIR missing on HOST" (no newline): what a rank whose working directory is
// missing prints, from the per-rank bootstrap and from hvd-proxy alike.
std::string missingDirectoryMessage(const std::string& cwd, const std::string& host);

// The line that asks the watchdog to deliver signal `signo` to the worker's process group.
std::string signalLine(int signo);

}  // namespace hvd::launcher::ssh

#include "launcher/ssh/remote.h"

#include "base/error.h"

namespace hvd::launcher::ssh {

std::string shellQuote(std::string_view s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  out += '\'';
  return out;
}

bool isShellIdentifier(std::string_view name) {
  if (name.empty()) return false;
  for (size_t i = 0; i < name.size(); ++i) {
    const char c = name[i];
    const bool alpha = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_';
    const bool digit = c >= '0' && c <= '9';
    if (!(alpha || (i > 0 && digit))) return false;
  }
  return true;
}

const std::string& bootstrapCommand() {
  static const std::string command =
      "exec bash --norc --noprofile -c 'IFS= read -r n && eval \"$(head -c \"$n\")\"' hvdrun-worker";
  return command;
}

std::string bootstrapInput(const RemoteWorker& worker) {
  HVD_CHECK(!worker.argv.empty(), LaunchError, "empty command for host ", worker.host);
  std::string s;
  const std::string missing = missingDirectoryMessage(worker.cwd, worker.host);
  s += "cd -- " + shellQuote(worker.cwd) + " 2>/dev/null || { printf '%s\\n' " + shellQuote(missing) +
       " >&2; exit 126; }\n";
  std::string odd_names;  // NAME=value words for `env`, for names bash cannot export
  for (const auto& [name, value] : worker.env) {
    HVD_CHECK(name.find('=') == std::string::npos && !name.empty(), LaunchError,
              "environment variable name '", name, "' for host ", worker.host, " is empty or contains '='");
    if (isShellIdentifier(name)) {
      s += "export " + name + "=" + shellQuote(value) + "\n";
    } else {
      odd_names += " " + shellQuote(name + "=" + value);
    }
  }
  std::string command;
  for (const auto& arg : worker.argv) command += " " + shellQuote(arg);
  const auto timeout = std::to_string(kWatchdogTimeout.count());
  const auto grace = std::to_string(kKillGrace.count());
  // fd 3 keeps the channel's stdin for the watchdog; the worker reads /dev/null.
  s += "exec 3<&0 </dev/null\n";
  s += "setsid env --" + odd_names + command + " 3<&- &\n";
  s += "w=$!\n";
  s += "{ while IFS= read -r -t " + timeout +
       " -u 3 l; do\n"
       "    case $l in S[0-9]|S[0-9][0-9]) kill -s \"${l#S}\" -- \"-$w\" 2>/dev/null ||\n"
       "      kill -s \"${l#S}\" \"$w\" 2>/dev/null;; esac\n"
       "  done\n"
       "  kill -s TERM -- \"-$w\" 2>/dev/null; sleep " +
       grace +
       "; kill -s KILL -- \"-$w\" 2>/dev/null\n"
       "} 1>/dev/null 2>&1 &\n";
  s += "d=$!\n";
  s += "exec 3<&-\n";
  s += "wait \"$w\"; s=$?\n";
  // Left-over members of the worker's group (it exited, they did not) would be orphans.
  s += "kill -s TERM -- \"-$w\" 2>/dev/null\n";
  s += "kill \"$d\" 2>/dev/null\n";
  s += "if [ \"$s\" -gt 128 ] && [ \"$s\" -lt 193 ]; then trap - \"$((s-128))\"; kill -s \"$((s-128))\" $$; "
       "fi\n";
  s += "exit \"$s\"\n";
  return std::to_string(s.size()) + "\n" + s;
}

std::string missingDirectoryMessage(const std::string& cwd, const std::string& host) {
  return "hvdrun: remote directory " + cwd + " missing on " + host;
}

std::string signalLine(int signo) { return "S" + std::to_string(signo) + "\n"; }

}  // namespace hvd::launcher::ssh

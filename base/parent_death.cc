#include "base/parent_death.h"

#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/error.h"

namespace hvd {
namespace {

template <typename T>
bool parseWhole(const std::string& text, T& value) {
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  return ec == std::errc() && end == text.data() + text.size() && !text.empty();
}

}  // namespace

void applyParentDeathSignal() {
  const char* raw = std::getenv(kParentDeathSignalVariable);
  if (raw == nullptr || *raw == '\0') return;
  const std::string value = raw;
  ::unsetenv(kParentDeathSignalVariable);  // `raw` points into the environment: copied first
  const auto colon = value.find(':');
  int sig = 0;
  long parent = 0;
  if (colon == std::string::npos || !parseWhole(value.substr(0, colon), sig) || sig < 1 || sig > 64 ||
      !parseWhole(value.substr(colon + 1), parent) || parent < 1) {
    throw UsageError(detail::concat(kParentDeathSignalVariable, "=\"", value,
                                    "\": expected <signal number 1-64>:<parent pid>"));
  }
  if (::prctl(PR_SET_PDEATHSIG, sig) != 0) {
    throw Error(detail::concat("prctl(PR_SET_PDEATHSIG, ", sig, ") for ", kParentDeathSignalVariable, "=\"",
                               value, "\" failed: ", std::strerror(errno)));
  }
  // The starter ended before the prctl (this process was handed to another parent, and the starter is gone):
  // the signal it asked for, now. A parent other than the starter while the starter lives is a program
  // between them (a wrapper script that does not exec): then this process ends with that program instead.
  if (::getppid() != static_cast<pid_t>(parent) && ::kill(static_cast<pid_t>(parent), 0) != 0 &&
      errno == ESRCH) {
    ::raise(sig);
    ::_exit(128 + sig);  // the signal was ignored or blocked: this process still must not run on
  }
}

}  // namespace hvd

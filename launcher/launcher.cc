// Shared parts of the Launcher interface: state names, exit status text, local-host detection, the
// signal reset of a child before exec and the signal to a worker's group.
#include "launcher/launcher.h"
#include "launcher/options.h"

#include <arpa/inet.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <netinet/in.h>
#include <signal.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <set>

#include "base/enum_names.h"
#include "base/error.h"

namespace hvd::launcher {

void resetSignalsForExec() noexcept {
  for (int sig = 1; sig < NSIG; ++sig) {
    if (sig != SIGKILL && sig != SIGSTOP) ::signal(sig, SIG_DFL);
  }
  sigset_t none;
  ::sigemptyset(&none);
  ::sigprocmask(SIG_SETMASK, &none, nullptr);
}

void execOrExit(char* const argv[], char* envp[], std::string_view exec_error) noexcept {
  environ = envp;
  ::execvp(argv[0], argv);
  // strerrordesc_np, not strerror: no locale lookup (which may lock or allocate) in a forked child.
  const char* why = ::strerrordesc_np(errno);
  if (!why) why = "unknown error";
  iovec parts[] = {{const_cast<char*>(exec_error.data()), exec_error.size()},
                   {const_cast<char*>(why), std::strlen(why)},
                   {const_cast<char*>("\n"), 1}};
  [[maybe_unused]] const ssize_t n = ::writev(STDERR_FILENO, parts, 3);
  ::_exit(127);
}

int signalWorkerGroup(pid_t pid, int signo) noexcept {
  if (::kill(-pid, signo) == 0) return 0;
  if (errno != ESRCH) return -1;
  return ::kill(pid, signo);
}

std::string cannotExecutePrefix(int rank, const std::string& program) {
  return detail::concat("hvdrun: rank ", rank, ": cannot execute '", program, "': ");
}

namespace {
constexpr EnumName<WorkerState> kWorkerStateNames[] = {
    {WorkerState::kInit, "init"},           {WorkerState::kRunning, "running"},
    {WorkerState::kSucceeded, "succeeded"}, {WorkerState::kFailed, "failed"},
    {WorkerState::kStopped, "stopped"},     {WorkerState::kUnknown, "unknown"}};
static_assert(namesEvery(kWorkerStateNames, WorkerState::kInit, WorkerState::kUnknown));
}  // namespace

const char* toString(WorkerState state) { return nameOf(kWorkerStateNames, state); }

int ExitStatus::shellCode() const {
  switch (kind) {
    case Kind::kExited:
      return code;
    case Kind::kSignaled:
      return 128 + signal;
    case Kind::kLost:
      return 255;
  }
  return 1;
}

std::string ExitStatus::describe() const {
  switch (kind) {
    case Kind::kExited:
      return detail::concat("exit code ", code);
    case Kind::kSignaled: {
      const char* name = ::strsignal(signal);
      return detail::concat("signal ", signal, " (", name ? name : "unknown", ")");
    }
    case Kind::kLost:
      return detail::concat("lost: ", detail);
  }
  return "invalid status";
}

int RunResult::exitCode() const {
  if (first_failed_rank) {
    const auto it = failures.find(*first_failed_rank);
    HVD_INTERNAL_ASSERT(it != failures.end(), "first failed rank ", *first_failed_rank, " has no failure");
    const int code = it->second.status.shellCode();
    return code == 0 ? 1 : code;
  }
  if (interrupted_by) return 128 + *interrupted_by;
  if (error || !failures.empty()) return 1;
  return 0;
}

std::set<std::string> interfaceAddresses() {
  std::set<std::string> out;
  ifaddrs* list = nullptr;
  if (::getifaddrs(&list) != 0) return out;
  for (ifaddrs* it = list; it; it = it->ifa_next) {
    if (!it->ifa_addr) continue;
    char buf[INET6_ADDRSTRLEN] = {};
    if (it->ifa_addr->sa_family == AF_INET) {
      ::inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(it->ifa_addr)->sin_addr, buf, sizeof buf);
    } else if (it->ifa_addr->sa_family == AF_INET6) {
      ::inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(it->ifa_addr)->sin6_addr, buf, sizeof buf);
    } else {
      continue;
    }
    out.insert(buf);
  }
  ::freeifaddrs(list);
  return out;
}

namespace {

bool isLoopbackLiteral(const std::string& host) {
  in_addr v4{};
  if (::inet_pton(AF_INET, host.c_str(), &v4) == 1) return (ntohl(v4.s_addr) >> 24) == 127;
  in6_addr v6{};
  if (::inet_pton(AF_INET6, host.c_str(), &v6) == 1) return IN6_IS_ADDR_LOOPBACK(&v6);
  return false;
}

}  // namespace

bool isLocalHost(const std::string& host) {
  if (host == "localhost" || isLoopbackLiteral(host)) return true;
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) == 0) {
    const std::string self = name;
    if (host == self || host == self.substr(0, self.find('.'))) return true;
  }
  // A name that resolves to a loopback address or to an address of one of our interfaces. Unlike
  // horovodrun, 127.0.1.1 (Debian's /etc/hosts entry for the hostname) counts as local.
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &res) != 0) return false;
  const auto mine = interfaceAddresses();
  bool local = false;
  for (addrinfo* it = res; it && !local; it = it->ai_next) {
    char buf[NI_MAXHOST] = {};
    if (::getnameinfo(it->ai_addr, it->ai_addrlen, buf, sizeof buf, nullptr, 0, NI_NUMERICHOST) != 0)
      continue;
    local = isLoopbackLiteral(buf) || mine.count(buf) > 0;
  }
  ::freeaddrinfo(res);
  return local;
}

}  // namespace hvd::launcher

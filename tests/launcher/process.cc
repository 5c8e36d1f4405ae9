#include "tests/launcher/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <thread>

extern char** environ;

namespace hvd::launcher::test {

namespace {

std::vector<char*> cstrings(std::vector<std::string>& v) {
  std::vector<char*> out;
  for (auto& s : v) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

std::vector<std::string> mergedEnv(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e; ++e) env.emplace_back(*e);
  for (const auto& kv : extra) {
    const std::string name = kv.substr(0, kv.find('=') + 1);
    for (auto it = env.begin(); it != env.end();) {
      it = it->compare(0, name.size(), name) == 0 ? env.erase(it) : it + 1;
    }
    env.push_back(kv);
  }
  return env;
}

int shellCode(int status) { return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status); }

}  // namespace

Completed runProcess(const std::vector<std::string>& argv_in, const std::vector<std::string>& env_in,
                     const std::string& input, std::chrono::milliseconds timeout) {
  auto argv_s = argv_in;
  auto env_s = mergedEnv(env_in);
  auto argv = cstrings(argv_s);
  auto envp = cstrings(env_s);
  int in[2], out[2], err[2];
  if (::pipe2(in, O_CLOEXEC) || ::pipe2(out, O_CLOEXEC) || ::pipe2(err, O_CLOEXEC))
    throw std::runtime_error("pipe");
  const auto begin = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    ::dup2(in[0], 0);
    ::dup2(out[1], 1);
    ::dup2(err[1], 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  ::close(in[0]);
  ::close(out[1]);
  ::close(err[1]);
  ::signal(SIGPIPE, SIG_IGN);
  [[maybe_unused]] ssize_t w = input.empty() ? 0 : ::write(in[1], input.data(), input.size());
  ::close(in[1]);
  Completed c;
  pollfd fds[2] = {{out[0], POLLIN, 0}, {err[0], POLLIN, 0}};
  int open = 2;
  bool killed = false;
  while (open > 0) {
    const auto left = timeout - (std::chrono::steady_clock::now() - begin);
    if (left <= std::chrono::milliseconds(0)) {
      ::kill(pid, SIGKILL);
      killed = true;
      break;
    }
    if (::poll(fds, 2,
               static_cast<int>(std::chrono::duration_cast<std::chrono::milliseconds>(left).count())) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || !(fds[i].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      char buf[65536];
      const ssize_t n = ::read(fds[i].fd, buf, sizeof buf);
      if (n <= 0) {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open;
      } else {
        (i ? c.err : c.out).append(buf, static_cast<size_t>(n));
      }
    }
  }
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  c.elapsed = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - begin);
  c.exit_code = killed ? -1 : shellCode(status);
  return c;
}

Started startProcess(const std::vector<std::string>& argv_in, const std::string& dir,
                     const std::vector<std::string>& env_in) {
  auto argv_s = argv_in;
  auto env_s = mergedEnv(env_in);
  auto argv = cstrings(argv_s);
  auto envp = cstrings(env_s);
  const std::string out = dir + "/out.txt";
  const std::string err = dir + "/err.txt";
  const pid_t pid = ::fork();
  if (pid < 0) throw std::runtime_error("fork");
  if (pid == 0) {
    const int o = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    const int n = ::open("/dev/null", O_RDONLY);
    ::dup2(n, 0);
    ::dup2(o, 1);
    ::dup2(e, 2);
    ::execvpe(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
  return {pid, dir};
}

int waitProcess(pid_t pid, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    int status = 0;
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return shellCode(status);
    if (std::chrono::steady_clock::now() > deadline) {
      ::kill(pid, SIGKILL);
      ::waitpid(pid, &status, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::vector<pid_t> processesWithEnv(const std::string& marker) {
  std::vector<pid_t> out;
  DIR* proc = ::opendir("/proc");
  if (!proc) return out;
  while (dirent* d = ::readdir(proc)) {
    const pid_t pid = static_cast<pid_t>(std::atoi(d->d_name));
    if (pid <= 0 || pid == ::getpid()) continue;
    const std::string base = std::string("/proc/") + d->d_name;
    const std::string stat = readFile(base + "/stat");
    const auto close = stat.rfind(')');
    if (close == std::string::npos || close + 2 >= stat.size() || stat[close + 2] == 'Z') continue;
    const std::string env = readFile(base + "/environ");
    std::stringstream in(env);
    std::string entry;
    while (std::getline(in, entry, '\0')) {
      if (entry == marker) {
        out.push_back(pid);
        break;
      }
    }
  }
  ::closedir(proc);
  return out;
}

std::vector<pid_t> waitUntilGone(const std::string& marker, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    auto left = processesWithEnv(marker);
    if (left.empty() || std::chrono::steady_clock::now() > deadline) return left;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

std::string hvdrunPath() {
  if (const char* exact = std::getenv("HVD_TEST_HVDRUN"))
    return exact;  // set by tests/launcher/CMakeLists.txt
  const char* dir = std::getenv("HVD_BUILD_DIR");
  if (!dir) throw std::runtime_error("HVD_BUILD_DIR is not set (run through ctest)");
  return std::string(dir) + "/hvdrun";
}

hvd::test::TempDir tempDir() { return hvd::test::TempDir("/tmp/hvd-launcher-test-"); }

std::string uniqueMarker() {
  std::random_device rd;
  return "HVD_TEST_MARKER=" + std::to_string(rd()) + std::to_string(::getpid());
}

}  // namespace hvd::launcher::test

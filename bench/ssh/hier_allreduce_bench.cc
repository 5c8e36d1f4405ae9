// libhvd's hierarchical allreduce against its flat one on 2 ssh hosts x 2 ranks (network namespaces, one
// sshd each: tests/ssh's NetnsLab), one hvdrun job per subject running bench/peers/hvd_allreduce.
//
//   bench_hier_allreduce PEER BYTES:ITERS[,...] [--subjects hier,flat] [--timeout SECONDS]
//        (root; needs `ip netns`; HVD_BUILD_DIR = the build tree whose hvdrun starts the jobs)
//
// Subjects, run in the order given:
//   hier  hvdrun --hierarchical-allreduce: reduce-scatter within each host over shared memory, allreduce
//         across the hosts over Gloo, allgather within each host over shared memory
//   flat  hvdrun --no-hierarchical-allreduce: the 4 ranks in one Gloo context over TCP
// Prints PEER's JSON lines (rank 0's) with "subject":"hvd_hier" or "hvd_flat" added, once the runtime's log
// has confirmed that the job took that data path. Exit codes: 0 every job ran; 1 a job failed, took the
// wrong data path or ran past --timeout (default 300 s; its output goes to stderr); 2 usage; 77 SKIPPED
// (no network namespaces here).
// Namespaces, sshds and workers go on every exit: through the lab's destructor on a normal exit, a failure
// or SIGINT/SIGTERM/SIGHUP, and through a watcher process when this one is killed outright.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/ssh/sshd_fixture.h"

namespace {

volatile std::sig_atomic_t g_stop = 0;

// A child in its own session (out of reach of a killpg of this job) that waits until this process is
// gone, then deletes the namespaces NetnsLab names after this process id (hvdB<pid>, hvdL<pid>,
// hvdH<pid>_<i>) with every process in them, and removes `home` and the lab's directory. After a normal
// exit there is nothing left for it to do.
void startWatcher(const std::string& home) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) return;
  const std::string pid = std::to_string(::getpid());
  if (::fork() == 0) {
    ::setsid();
    ::close(fds[1]);
    const int null = ::open("/dev/null", O_RDWR);
    for (int fd = 0; fd < 3; ++fd) ::dup2(null, fd);
    char c;
    while (::read(fds[0], &c, 1) != 0) {
    }
    // $1: the pid, $2: home. The lab's directory is the one its sshds run from (-f DIR/hostN/sshd_config).
    const char* script = R"sh(dirs=$2
for ns in $(ip netns list | awk '{print $1}' | grep -E "^hvd(B$1|L$1|H$1_[0-9]+)\$"); do
  pids=$(ip netns pids $ns)
  for p in $pids; do
    dirs="$dirs $(tr '\0' ' ' </proc/$p/cmdline | grep -o '/tmp/hvd-netns-[^/ ]*/host[0-9]*/sshd_config' | cut -d/ -f1-3)"
  done
  echo $pids | xargs -r kill -9
  ip netns del $ns
done
rm -rf $dirs)sh";
    ::execl("/bin/sh", "sh", "-c", script, "sh", pid.c_str(), home.c_str(), static_cast<char*>(nullptr));
    ::_exit(127);
  }
  ::close(fds[0]);  // the write end stays open, unseen by children (O_CLOEXEC), until this process ends
}

// hvdrun's output for the job of `subject`, or an error naming the subject and what went wrong.
std::string runJob(const hvd::test::NetnsLab& lab, const hvd::test::SshHome& home, const std::string& subject,
                   const std::vector<std::string>& args, int timeout_s) {
  hvd::test::LabHvdrun run(lab, home, args, home.home() + "/hvdrun.out");
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(timeout_s);
  int rc = -1;
  while (rc == -1 && !g_stop && std::chrono::steady_clock::now() < end)
    rc = run.wait(std::chrono::milliseconds(100));
  if (rc != 0) {
    const std::string why = g_stop     ? "stopped by a signal"
                            : rc == -1 ? "still running after " + std::to_string(timeout_s) + " s"
                                       : "exit " + std::to_string(rc);
    throw std::runtime_error("the " + subject + " job: hvdrun " + why + ":\n" + run.output());
  }
  return run.output();
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> pos, subjects = {"hier", "flat"};
  int timeout_s = 300;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--subjects" && i + 1 < argc) {
      subjects.clear();
      std::istringstream list(argv[++i]);
      for (std::string s; std::getline(list, s, ',');) subjects.push_back(s);
    } else if (a == "--timeout" && i + 1 < argc) {
      timeout_s = std::atoi(argv[++i]);
    } else {
      pos.push_back(a);
    }
  }
  bool usage = pos.size() != 2 || timeout_s < 1;
  for (const auto& s : subjects) usage |= s != "hier" && s != "flat";
  if (usage) {
    std::cerr << "usage: " << argv[0]
              << " PEER BYTES:ITERS[,...] [--subjects hier,flat] [--timeout SECONDS]\n";
    return 2;
  }
  const std::string why = hvd::test::NetnsLab::unavailable();
  if (!why.empty()) {
    std::cout << "SKIPPED: network namespaces unavailable (" << why << ")\n";
    return 77;
  }
  struct sigaction sa {};
  sa.sa_handler = [](int) { g_stop = 1; };
  sa.sa_flags = SA_RESTART;
  for (int sig : {SIGINT, SIGTERM, SIGHUP}) ::sigaction(sig, &sa, nullptr);
  try {
    hvd::test::SshHome home;
    startWatcher(home.home());
    hvd::test::NetnsLab lab(2, home);
    const std::string hosts = lab.hostAddress(0) + ":2," + lab.hostAddress(1) + ":2";
    for (const auto& s : subjects) {
      const bool hier = s == "hier";
      const std::string out = runJob(lab, home, s,
                                     {"-np", "4", "-H", hosts, "--ssh-known-hosts", "strict",
                                      hier ? "--hierarchical-allreduce" : "--no-hierarchical-allreduce", "-x",
                                      "HOROVOD_LOG_LEVEL=info", pos[0], pos[1]},
                                     timeout_s);
      const std::string path = hier ? "HIERARCHICAL" : "GLOO";
      if (out.find("data path of the job: " + path + " ") == std::string::npos)
        throw std::runtime_error("the " + s + " job did not take the " + path + " data path:\n" + out);
      std::istringstream lines(out);
      const std::string tag = "[0]<stdout>:{";
      for (std::string line; std::getline(lines, line);) {
        if (line.rfind(tag, 0) != 0 || line.back() != '}') continue;
        std::printf("{\"subject\":\"hvd_%s\",%s\n", s.c_str(), line.c_str() + tag.size());
      }
      std::fflush(stdout);
    }
  } catch (const std::exception& e) {
    std::cerr << e.what() << "\n";
    return 1;
  }
  return 0;
}

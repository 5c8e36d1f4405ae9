// 32 ranks on 8 ssh hosts (network namespaces, one sshd each) against one OpenSSH `ssh host true`,
// measured in the same run. Prints medians with min-max over the rounds and the ratio.
//
//   bench_ssh_launch [--rounds N]        (root; needs `ip netns`; HVD_BUILD_DIR = the build tree)
//
// Figures:
//   openssh_true     ssh -i KEY host true (one connection, key exchange, remote login shell)
//   openssh_8x       8 of those at once, one per host: the floor for any ssh launcher here (all 8
//                    "hosts" share this machine's CPUs)
//   openssh_32x      32 of those at once, 4 per host: what horovodrun runs for 32 ranks
//   hvdrun_np8_true  hvdrun -np 8 with the same -H (4 slots each): 8 /bin/true on the first 2 hosts
//   hvdrun_8x1_true  hvdrun -np 8, one /bin/true on each of the 8 hosts: the same remote work as openssh_8x
//   hvdrun_true      hvdrun -np 32 over 8 hosts, workers /bin/true: preflight of 8 hosts, reachability
//                    check, 32 remote starts, exits collected
// hvdrun starts one hvd-proxy per host over one channel (docs/ssh.md); HVD_SSH_PROXY=never in the
// environment measures the per-rank channels instead.
//   hvdrun_joined    the same with examples/hello_cpp: every rank joins the rendezvous, builds its Gloo
//                    context and does an allreduce: an upper bound of "all ranks joined"
//   hvdrun_all_joined  the issue's own figure, from the same runs: hvdrun --verbose prints when the
//                    rendezvous server has seen the last of the 32 ranks join ("hvdrun: all 32 ranks
//                    joined the rendezvous N ms after hvdrun started")
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <string>
#include <vector>

#include "tests/ssh/sshd_fixture.h"

extern char** environ;

namespace {

double runSeconds(const std::vector<std::string>& args, const std::string& home) {
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = hvd::test::spawnWithHome(args, home, home + "/bench.out");
  int status = 0;
  ::waitpid(pid, &status, 0);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << "command failed: " << args[4] << "\n" << hvd::test::sh("cat " + home + "/bench.out");
    std::exit(1);
  }
  return s;
}

struct Stats {
  double median, min, max;
};

Stats stats(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return {v[v.size() / 2], v.front(), v.back()};
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 7;
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::string(argv[i]) == "--rounds") rounds = std::atoi(argv[i + 1]);
  }
  const std::string why = hvd::test::NetnsLab::unavailable();
  if (!why.empty()) {
    std::cout << "SKIPPED: network namespaces unavailable (" << why << ")\n";
    return 77;
  }
  const char* build = std::getenv("HVD_BUILD_DIR");
  const std::string dir = build ? build : ".";
  std::string hvdrun = dir + "/hvdrun";
  if (::access(hvdrun.c_str(), X_OK) != 0) hvdrun = dir + "/cmd/hvdrun";
  const std::string hello = dir + "/examples/hello_cpp";

  hvd::test::SshHome home;
  hvd::test::NetnsLab lab(8, home);
  std::string hosts, hosts1;
  for (int i = 0; i < lab.hosts(); ++i) {
    hosts += (hosts.empty() ? "" : ",") + lab.hostAddress(i) + ":4";
    hosts1 += (hosts1.empty() ? "" : ",") + lab.hostAddress(i) + ":1";
  }
  const std::vector<std::string> in_ns = {"/usr/sbin/ip", "netns", "exec", lab.launcherNamespace()};
  auto with = [&](std::vector<std::string> tail) {
    auto v = in_ns;
    v.insert(v.end(), tail.begin(), tail.end());
    return v;
  };
  const auto openssh = with({"/usr/bin/ssh", "-i", home.userKey(), "-o", "IdentitiesOnly=yes", "-o",
                             "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o",
                             "UserKnownHostsFile=" + home.knownHosts(), lab.hostAddress(0), "true"});
  // `count` OpenSSH `ssh host true` at once, round-robin over the 8 hosts. 32: what horovodrun runs for
  // 32 ranks. 8: one per host, the least any ssh launcher must do (one connection and one remote login
  // shell per host); on this machine all 8 share the same 2 CPUs, so this is the floor for hvdrun.
  auto parallelSsh = [&](int count) {
    std::string parallel;
    for (int r = 0; r < count; ++r) {
      parallel +=
          "/usr/bin/ssh -i " + home.userKey() +
          " -o IdentitiesOnly=yes -o BatchMode=yes -o StrictHostKeyChecking=yes -o UserKnownHostsFile=" +
          home.knownHosts() + " " + lab.hostAddress(r % 8) + " true & ";
    }
    return with({"/bin/sh", "-c", parallel + "wait"});
  };
  const auto openssh32 = parallelSsh(32);
  const auto openssh8 = parallelSsh(8);
  const auto hv_true8 = with({hvdrun, "-np", "8", "-H", hosts, "--ssh-known-hosts", "strict", "/bin/true"});
  const auto hv_8x1 = with({hvdrun, "-np", "8", "-H", hosts1, "--ssh-known-hosts", "strict", "/bin/true"});
  const auto hv_true = with({hvdrun, "-np", "32", "-H", hosts, "--ssh-known-hosts", "strict", "/bin/true"});
  const auto hv_join =
      with({hvdrun, "--verbose", "-np", "32", "-H", hosts, "--ssh-known-hosts", "strict", hello});
  // The verbose line of the run that just ended (its output is home/bench.out), in seconds.
  auto allJoined = [&]() {
    const std::string out = hvd::test::sh("cat " + home.home() + "/bench.out");
    const std::string marker = "ranks joined the rendezvous ";
    const size_t at = out.find(marker);
    if (at == std::string::npos) {
      std::cerr << "hvdrun --verbose printed no 'all ranks joined' line:\n" << out;
      std::exit(1);
    }
    return std::atof(out.c_str() + at + marker.size()) / 1e3;
  };

  // Warm-up (page cache, sshd's first re-exec), not measured.
  runSeconds(openssh, home.home());
  runSeconds(hv_true, home.home());
  std::vector<double> a, a8, a32, b8, b81, b, c, j;
  for (int r = 0; r < rounds; ++r) {
    a.push_back(runSeconds(openssh, home.home()));
    a8.push_back(runSeconds(openssh8, home.home()));
    a32.push_back(runSeconds(openssh32, home.home()));
    b8.push_back(runSeconds(hv_true8, home.home()));
    b81.push_back(runSeconds(hv_8x1, home.home()));
    b.push_back(runSeconds(hv_true, home.home()));
    if (::access(hello.c_str(), X_OK) == 0) {
      c.push_back(runSeconds(hv_join, home.home()));
      j.push_back(allJoined());
    }
  }
  auto print = [&](const char* name, const std::vector<double>& v) {
    if (v.empty()) {
      std::printf("%-17s not measured (missing %s)\n", name, hello.c_str());
      return;
    }
    const Stats s = stats(v);
    const Stats base = stats(a);
    std::printf("%-17s median %7.1f ms  [%.1f-%.1f]  ratio vs openssh_true %.2fx\n", name, s.median * 1e3,
                s.min * 1e3, s.max * 1e3, s.median / base.median);
  };
  std::printf("32 ranks on 8 ssh hosts (network namespaces), %d rounds, medians [min-max]\n", rounds);
  print("openssh_true", a);
  print("openssh_8x", a8);
  print("openssh_32x", a32);
  print("hvdrun_np8_true", b8);
  print("hvdrun_8x1_true", b81);
  print("hvdrun_true", b);
  print("hvdrun_joined", c);
  print("hvdrun_all_joined", j);
  return 0;
}

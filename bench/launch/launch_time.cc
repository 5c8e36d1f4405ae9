// launch_time: runs a command R times and reports its wall time (median, min, max) and peak RSS.
//
//   launch_time [--rounds R] [--warmup W] [--label NAME] -- COMMAND [ARGS...]
//
// Prints one line: "NAME  median_ms min_ms max_ms  maxrss_kib  failures". Wall time is fork to wait4
// of the whole command; the RSS is wait4's ru_maxrss: the largest resident set of the command and the
// descendants it reaped (for hvdrun with /bin/true workers: hvdrun itself).
// A run that exits non-zero counts as a failure and is not timed.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  int rounds = 20;
  int warmup = 2;
  std::string label = "command";
  int i = 1;
  for (; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) {
      rounds = std::atoi(argv[++i]);
    } else if (a == "--warmup" && i + 1 < argc) {
      warmup = std::atoi(argv[++i]);
    } else if (a == "--label" && i + 1 < argc) {
      label = argv[++i];
    } else if (a == "--") {
      ++i;
      break;
    } else {
      std::fprintf(stderr, "usage: launch_time [--rounds R] [--warmup W] [--label NAME] -- COMMAND...\n");
      return 2;
    }
  }
  if (i >= argc || rounds < 1) {
    std::fprintf(stderr, "launch_time: no command\n");
    return 2;
  }
  std::vector<double> ms;
  long max_rss = 0;
  int failures = 0;
  for (int r = 0; r < warmup + rounds; ++r) {
    const auto begin = std::chrono::steady_clock::now();
    const pid_t pid = fork();
    if (pid < 0) {
      std::perror("fork");
      return 1;
    }
    if (pid == 0) {
      execvp(argv[i], argv + i);
      std::fprintf(stderr, "launch_time: cannot execute %s: %s\n", argv[i], std::strerror(errno));
      _exit(127);
    }
    int status = 0;
    rusage usage{};
    wait4(pid, &status, 0, &usage);
    const double elapsed =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - begin).count();
    if (r < warmup) continue;
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      ++failures;
      continue;
    }
    ms.push_back(elapsed);
    max_rss = std::max(max_rss, usage.ru_maxrss);
  }
  if (ms.empty()) {
    std::printf("%-28s failed in all %d runs\n", label.c_str(), rounds);
    return 1;
  }
  std::sort(ms.begin(), ms.end());
  const double median = ms.size() % 2 ? ms[ms.size() / 2] : (ms[ms.size() / 2 - 1] + ms[ms.size() / 2]) / 2;
  std::printf("%-28s %9.2f %9.2f %9.2f %10ld %4d\n", label.c_str(), median, ms.front(), ms.back(), max_rss,
              failures);
  return failures ? 1 : 0;
}

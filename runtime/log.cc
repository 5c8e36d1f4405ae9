#include "runtime/log.h"

#include <chrono>
#include <cstdio>
#include <ctime>
#include <unistd.h>

namespace hvd::runtime {

void logLine(LogLevel threshold, LogLevel level, int rank, const std::string& message) {
  if (level < threshold) return;
  static constexpr char kLetters[] = {'T', 'D', 'I', 'W', 'E', 'F'};
  const auto now = std::chrono::system_clock::now();
  const std::time_t t = std::chrono::system_clock::to_time_t(now);
  const auto usec =
      std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &tm);
  char head[96];
  std::snprintf(head, sizeof head, "[%s.%06lld: %c] [rank %d]: ", stamp, static_cast<long long>(usec),
                kLetters[static_cast<int>(level)], rank);
  const std::string line = head + message + "\n";
  // One write(2) per line so lines of concurrent threads and processes do not interleave.
  [[maybe_unused]] auto rv = ::write(STDERR_FILENO, line.data(), line.size());
}

}  // namespace hvd::runtime

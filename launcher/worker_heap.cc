#include "launcher/worker_heap.h"

#include <sstream>

namespace hvd::launcher {

namespace {

// True when the colon-separated GLIBC_TUNABLES list names tunable.
bool namesTunable(const std::string& tunables, const std::string& tunable) {
  std::istringstream in(tunables);
  std::string item;
  while (std::getline(in, item, ':')) {
    if (item.compare(0, item.find('='), tunable) == 0 && item.find('=') == tunable.size()) return true;
  }
  return false;
}

}  // namespace

std::optional<std::string> workerGlibcTunables(const std::vector<std::pair<std::string, std::string>>& env) {
  std::string tunables, mmap_alias, trim_alias;  // the last value of each (glibc ignores an empty alias)
  for (const auto& [name, value] : env) {
    if (name == "GLIBC_TUNABLES") tunables = value;
    if (name == "MALLOC_MMAP_THRESHOLD_") mmap_alias = value;
    if (name == "MALLOC_TRIM_THRESHOLD_") trim_alias = value;
  }
  if (!mmap_alias.empty() || !trim_alias.empty() || namesTunable(tunables, "glibc.malloc.mmap_threshold") ||
      namesTunable(tunables, "glibc.malloc.trim_threshold")) {
    return std::nullopt;
  }
  if (!tunables.empty()) tunables += ':';
  return tunables + "glibc.malloc.mmap_threshold=" + kMallocMmapThreshold +
         ":glibc.malloc.trim_threshold=" + kMallocTrimThreshold;
}

}  // namespace hvd::launcher

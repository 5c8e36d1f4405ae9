// Minimal leveled logging to stderr for the runtime, in Horovod's shape:
//   [2026-11-21 17:00:00.123456: W] [rank 0]: message
// HOROVOD_LOG_LEVEL selects the threshold (RuntimeOptions::log_level). Thread-safe (one write per line).
#pragma once

#include <string>

#include "runtime/options.h"

namespace hvd::runtime {

void logLine(LogLevel threshold, LogLevel level, int rank, const std::string& message);

}  // namespace hvd::runtime

// GPU pinning at init: when a CUDA runtime library can be loaded (dlopen, so libhvd has no CUDA
// dependency) and reports devices, select local_rank % device_count (the count the runtime reports
// already honours CUDA_VISIBLE_DEVICES). No library, no device, or an error: the CPU (-1), silently
// apart from a debug log line.
#pragma once

#include <string>

namespace hvd::runtime {

struct GpuPinning {
  int device = -1;     // the selected device, -1: CPU
  std::string detail;  // what happened, for the log ("libcudart.so.12: 0 devices", ...)
};

GpuPinning pinGpu(int local_rank, bool enabled);

}  // namespace hvd::runtime

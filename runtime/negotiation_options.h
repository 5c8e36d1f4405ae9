// NegotiationOptions: the settings of rank 0's negotiation (fusion, the response cache, the stall
// inspector) that a user chooses through HOROVOD_FUSION_THRESHOLD, HOROVOD_CACHE_CAPACITY and the
// HOROVOD_STALL_* variables, with their defaults. RuntimeOptions carries them from the environment to the
// coordinator (runtime/coordinator.h).
#pragma once

#include <chrono>
#include <cstddef>

namespace hvd::runtime {

struct NegotiationOptions {
  size_t fusion_threshold = size_t{1} << 20;
  size_t cache_capacity = 1024;  // response cache entries, 0: off
  bool stall_check = true;
  std::chrono::milliseconds stall_warning_time{std::chrono::seconds(60)};
  std::chrono::milliseconds stall_shutdown_time{0};  // 0: never
};

}  // namespace hvd::runtime

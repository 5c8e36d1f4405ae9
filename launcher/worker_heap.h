// Keeps each worker's freed heap memory mapped from one training step to the next.
//
// glibc's malloc gives memory back to the kernel in two ways: a block above M_MMAP_THRESHOLD is an mmap
// of its own, unmapped when freed, and the top of the heap is trimmed once more than M_TRIM_THRESHOLD
// bytes are free there (by default both adapt to the largest block freed so far: at most 32 MiB and
// twice that). Every training step allocates and frees the same large blocks: backward() computes each
// parameter's gradient into a fresh buffer, adds it into .grad and frees it, and the forward pass's
// activations live until backward() is done. Whenever the heap was trimmed in between, the next step
// faults every page of those blocks back in. Under a hypervisor that is slow: on this project's 2-core
// VM, 4096 faults (one 16 MiB gradient) took 60-75 ms inside backward(), a third of a wide MLP's step, on
// random steps.
//
// hvdrun therefore appends glibc.malloc.mmap_threshold=32 MiB (glibc's largest) and
// glibc.malloc.trim_threshold=1 GiB to every worker's GLIBC_TUNABLES: blocks up to 32 MiB come from the
// heap and stay mapped after free() until more than 1 GiB lies free at its top. PyTorch's CPU launcher
// (torch.backends.xeon.run_cpu) preloads jemalloc or tcmalloc, configured never to give memory back, for
// the same reason; a worker on another allocator (LD_PRELOAD) ignores these tunables. The cost: up to
// 1 GiB of freed heap kept instead of returned, per malloc arena and per process (child processes of the
// worker, such as data loaders, inherit the variable).
//
// hvdrun sets neither value when the worker's environment already chooses one of them (in GLIBC_TUNABLES,
// or through glibc's MALLOC_MMAP_THRESHOLD_ / MALLOC_TRIM_THRESHOLD_), and nothing with
// --no-malloc-tuning or HVD_MALLOC_TUNING=0.
#pragma once

#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace hvd::launcher {

inline constexpr const char* kMallocMmapThreshold = "33554432";
inline constexpr const char* kMallocTrimThreshold = "1073741824";

// The GLIBC_TUNABLES a worker with environment env should get, or nullopt to leave it as it is (the
// environment already sets one of the two thresholds). Later entries of env override earlier ones.
std::optional<std::string> workerGlibcTunables(const std::vector<std::pair<std::string, std::string>>& env);

}  // namespace hvd::launcher

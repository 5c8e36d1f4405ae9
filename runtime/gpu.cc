#include "runtime/gpu.h"

#include <dlfcn.h>

#include "base/error.h"

namespace hvd::runtime {

GpuPinning pinGpu(int local_rank, bool enabled) {
  if (!enabled) return {-1, "GPU pinning disabled (HVD_DISABLE_GPU_PINNING)"};
  // The unversioned name exists with a CUDA toolkit (its development package); without one, the sonames
  // of CUDA 13, 12 and 11, which is all PyTorch's wheels carry.
  static const char* const kLibraries[] = {"libcudart.so", "libcudart.so.13", "libcudart.so.12", "libcudart.so.11.0"};
  void* lib = nullptr;
  const char* found = nullptr;
  for (const char* name : kLibraries) {
    lib = ::dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (lib) {
      found = name;
      break;
    }
  }
  if (!lib) return {-1, "no CUDA runtime library (libcudart) found: running on the CPU"};
  using GetDeviceCount = int (*)(int*);
  using SetDevice = int (*)(int);
  auto getCount = reinterpret_cast<GetDeviceCount>(::dlsym(lib, "cudaGetDeviceCount"));
  auto setDevice = reinterpret_cast<SetDevice>(::dlsym(lib, "cudaSetDevice"));
  // The library stays loaded: the selection is per process and CUDA keeps state in it.
  if (!getCount || !setDevice) return {-1, detail::concat(found, " lacks cudaGetDeviceCount/cudaSetDevice")};
  int count = 0;
  if (const int rv = getCount(&count); rv != 0 || count <= 0) {
    return {-1, detail::concat(found, ": no CUDA device (cudaGetDeviceCount returned ", rv, ", count ", count,
                               "): running on the CPU")};
  }
  const int device = local_rank % count;
  if (const int rv = setDevice(device); rv != 0) {
    return {-1, detail::concat(found, ": cudaSetDevice(", device, ") failed with ", rv, ": running on the CPU")};
  }
  return {device, detail::concat(found, ": pinned to device ", device, " of ", count, " (local rank ", local_rank,
                                 ")")};
}

}  // namespace hvd::runtime

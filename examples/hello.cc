// Minimal libhvd worker in C++: hvdrun -np 2 -H localhost:2 build/examples/hello_cpp
#include <cstdio>
#include <span>

#include <hvd/hvd.hpp>

int main() {
  try {
    hvd::Session session;
    float value = static_cast<float>(session.rank());
    hvd::allreduce<float>(std::span<float>(&value, 1), hvd::ReduceOp::kSum, "value");
    std::printf("rank %d of %d: sum of ranks = %g\n", session.rank(), session.size(), value);
    return 0;
  } catch (const hvd::CollectiveError& e) {
    std::fprintf(stderr, "%s\n", e.what());
    return 1;
  }
}

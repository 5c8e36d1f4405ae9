// A user's C++ program against the installed C++ API: allreduce(rank + 1), summed over ranks.
#include <cstdio>
#include <span>

#include <hvd/hvd.hpp>

int main() {
  try {
    hvd::Session session;
    float value = static_cast<float>(session.rank() + 1);
    hvd::allreduce<float>(std::span<float>(&value, 1), hvd::ReduceOp::kSum, "consumer.sum");
    std::printf("consumer: rank %d of %d, sum %g\n", session.rank(), session.size(), value);
    return 0;
  } catch (const hvd::CollectiveError& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 1;
  }
}

/* Worker for the job-script tests (started by mpirun, mpiexec or the test itself, never by hvdrun): joins
 * the job, allreduces rank + 1 over 1000 floats, and prints one line
 *   rank R size S local_rank L local_size LS cross_rank C cross_size CS sum X
 * or, when hvd_init fails, "init failed: <hvd_error_text()>" and exits 3. */
#include <stdio.h>

#include <hvd/hvd.h>

int main(void) {
  if (hvd_init() != HVD_SUCCESS) {
    printf("init failed: %s\n", hvd_error_text());
    fflush(stdout);
    return 3;
  }
  enum { kCount = 1000 };
  static float values[kCount];
  for (int i = 0; i < kCount; ++i) values[i] = (float)(hvd_rank() + 1);
  const int handle = hvd_allreduce_async("identity", values, values, kCount, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  if (handle < 0 || hvd_wait(handle) != HVD_SUCCESS) {
    printf("allreduce failed: %s\n", hvd_error_text());
    hvd_shutdown();
    return 4;
  }
  for (int i = 1; i < kCount; ++i) {
    if (values[i] != values[0]) {
      printf("allreduce differs at %d: %g against %g\n", i, values[i], values[0]);
      hvd_shutdown();
      return 5;
    }
  }
  printf("rank %d size %d local_rank %d local_size %d cross_rank %d cross_size %d sum %g\n", hvd_rank(), hvd_size(),
         hvd_local_rank(), hvd_local_size(), hvd_cross_rank(), hvd_cross_size(), values[0]);
  fflush(stdout);
  hvd_shutdown();
  return 0;
}

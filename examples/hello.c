/* Minimal libhvd worker in C: hvdrun -np 2 -H localhost:2 build/examples/hello_c */
#include <stdio.h>

#include <hvd/hvd.h>

int main(void) {
  if (hvd_init() != HVD_SUCCESS) {
    fprintf(stderr, "%s\n", hvd_error_text());
    return 1;
  }
  float value = (float)hvd_rank();
  int handle = hvd_allreduce_async("value", &value, &value, 1, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  if (handle < 0 || hvd_wait(handle) != HVD_SUCCESS) {
    fprintf(stderr, "allreduce failed: %s\n", hvd_error_text());
    hvd_shutdown();
    return 1;
  }
  printf("rank %d of %d: sum of ranks = %g\n", hvd_rank(), hvd_size(), value);
  hvd_shutdown();
  return 0;
}

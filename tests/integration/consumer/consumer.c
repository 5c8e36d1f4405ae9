/* A user's C program against the installed C API: allreduce(rank + 1), summed over ranks. */
#include <hvd/hvd.h>
#include <stdio.h>

int main(void) {
  if (hvd_init() != HVD_SUCCESS) {
    fprintf(stderr, "consumer: %s\n", hvd_error_text());
    return 1;
  }
  float value = (float)(hvd_rank() + 1);
  int handle = hvd_allreduce_async("consumer.sum", &value, &value, 1, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  if (handle < 0 || hvd_wait(handle) != HVD_SUCCESS) {
    fprintf(stderr, "consumer: allreduce failed: %s\n", hvd_error_text());
    hvd_shutdown();
    return 1;
  }
  printf("consumer: rank %d of %d, sum %g\n", hvd_rank(), hvd_size(), value);
  hvd_shutdown();
  return 0;
}

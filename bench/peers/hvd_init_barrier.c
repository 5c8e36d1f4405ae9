/* Launch-latency worker W used when bench/launch has none: init, one barrier, shutdown, through
 * the public C API only (`hvdrun -np 2 -H localhost:2 hvd_init_barrier`). */
#include <hvd/hvd.h>
#include <stdio.h>

int main(void) {
  int status = hvd_init();
  if (status == HVD_SUCCESS) status = hvd_wait(hvd_barrier_async());
  if (status != HVD_SUCCESS) {
    fprintf(stderr, "hvd_init_barrier: %s\n", hvd_error_text());
    return 1;
  }
  hvd_shutdown();
  return 0;
}

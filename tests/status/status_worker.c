/* Worker of the status page's end-to-end test (tests/status/test_status_browser.py), started by
 * hvdrun -np 4. Each step waits for a file the test creates in $STATUS_TEST_DIR, so the test decides when the
 * job moves on:
 *   1. every rank: 40 allreduces of 1 MiB ("warmup"), then one line; rank 1 also prints a line of markup
 *      (the page must show it as text);
 *   2. ranks 0, 1, 3 allreduce "grad.3" at once; rank 2 first waits for the file "go", so the others wait for
 *      it (the page shows rank 2 stuck);
 *   3. every rank shuts down (collective); rank 3 exits 0 at once, the others wait for the file "end" (the
 *      page shows rank 3 exited while the others still run).
 * Exit codes: 0 done; 3 init failed; 4 a collective failed; 5 a file did not appear within 120 s. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <hvd/hvd.h>

static int waitForFile(const char* name) {
  const char* dir = getenv("STATUS_TEST_DIR");
  char path[4096];
  snprintf(path, sizeof path, "%s/%s", dir ? dir : ".", name);
  const struct timespec pause = {0, 50 * 1000 * 1000};
  for (int i = 0; i < 120 * 20; ++i) {
    if (access(path, F_OK) == 0) return 0;
    nanosleep(&pause, NULL);
  }
  printf("rank %d: %s did not appear within 120 s\n", hvd_rank(), path);
  fflush(stdout);
  return -1;
}

static int allreduce(const char* name, float* values, size_t count) {
  const int handle = hvd_allreduce_async(name, values, values, count, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  if (handle < 0 || hvd_wait(handle) != HVD_SUCCESS) {
    printf("rank %d: allreduce %s failed: %s\n", hvd_rank(), name, hvd_error_text());
    fflush(stdout);
    return -1;
  }
  return 0;
}

int main(void) {
  if (hvd_init() != HVD_SUCCESS) {
    printf("init failed: %s\n", hvd_error_text());
    return 3;
  }
  const int rank = hvd_rank();
  enum { kCount = 256 * 1024 };
  static float values[kCount];
  for (int step = 0; step < 40; ++step) {
    for (int i = 0; i < kCount; ++i) values[i] = 1.0f;
    if (allreduce("warmup", values, kCount) != 0) return 4;
  }
  printf("rank %d warmed up: sum %g\n", rank, values[0]);
  if (rank == 1) printf("<script>document.title='pwned'</script><b>loss</b> 0.25 & falling\n");
  fflush(stdout);

  if (rank == 2) {
    printf("rank 2 sleeps before grad.3\n");
    fflush(stdout);
    if (waitForFile("go") != 0) return 5;
  }
  if (allreduce("grad.3", values, 1024) != 0) return 4;
  printf("rank %d done with grad.3\n", rank);
  fflush(stdout);
  hvd_shutdown();
  if (rank == 3) {
    printf("rank 3 finished\n");
    return 0;
  }
  printf("rank %d waits before exiting\n", rank);
  fflush(stdout);
  return waitForFile("end") == 0 ? 0 : 5;
}

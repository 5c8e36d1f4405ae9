/* libhvd C API: collectives over Gloo for workers started by hvdrun (or horovodrun, or any launcher
 * that sets Horovod's HOROVOD_* environment).
 *
 *   hvd_init();                                   reads HOROVOD_* and joins the job
 *   float g[n]; ...
 *   int h = hvd_allreduce_async("grad", g, g, n, HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0);
 *   if (hvd_wait(h) != HVD_SUCCESS) fprintf(stderr, "%s\n", hvd_error_text());
 *   hvd_shutdown();
 *
 * Operations are named: ranks may submit them in different orders; every rank must eventually submit
 * each name with the same type, shape, dtype and parameters (otherwise the operation fails on every
 * rank with HVD_ERR_MISMATCH and a message naming the tensor, the values and the ranks).
 *
 * Handles: enqueue functions return a handle >= 0, or a negative hvd_status when the request was
 * rejected at once. hvd_wait() releases the handle (except for the functions documented as keeping
 * results, whose handles are released by hvd_release()). Buffers passed to an enqueue function must
 * stay valid and untouched until the handle completed.
 *
 * Errors: every failing call sets a per-thread message read by hvd_error_text().
 * Threading: every function may be called from any thread; operations complete on libhvd's
 * background thread.
 */
#ifndef HVD_HVD_H
#define HVD_HVD_H

#include <stddef.h>
#include <stdint.h>

#include "hvd/config.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum hvd_status {
  HVD_SUCCESS = 0,
  HVD_IN_PROGRESS = 1,            /* hvd_poll: not finished yet */
  HVD_ERR_NOT_INITIALIZED = -1,   /* hvd_init() has not succeeded */
  HVD_ERR_INVALID_ARGUMENT = -2,  /* bad argument, duplicate in-flight name, unknown handle */
  HVD_ERR_MISMATCH = -3,          /* ranks disagree on an operation's parameters */
  HVD_ERR_SHUT_DOWN = -4,         /* libhvd was shut down (locally, by another rank, or after a failure) */
  HVD_ERR_BACKEND = -5,           /* communication failed: a peer died, a timeout expired */
  HVD_ERR_STALLED = -6,           /* cancelled by the stall inspector (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) */
  HVD_ERR_INIT = -7,              /* hvd_init() failed (environment, rendezvous) */
  HVD_ERR_INTERNAL = -8
} hvd_status;

/* Element types. */
typedef enum hvd_dtype {
  HVD_UINT8 = 0,
  HVD_INT8 = 1,
  HVD_INT32 = 2,
  HVD_INT64 = 3,
  HVD_FLOAT16 = 4,  /* IEEE binary16, as uint16_t bits */
  HVD_BFLOAT16 = 5, /* as uint16_t bits */
  HVD_FLOAT32 = 6,
  HVD_FLOAT64 = 7,
  HVD_BOOL = 8      /* one byte, 0 or 1 */
} hvd_dtype;

/* Reductions, with Horovod's values (horovod_reduce_op_*). Average divides the sum by the size. */
typedef enum hvd_reduce_op {
  HVD_AVERAGE = 0,
  HVD_SUM = 1,
  HVD_MIN = 3,
  HVD_MAX = 4,
  HVD_PRODUCT = 5
} hvd_reduce_op;

/* Starts libhvd: reads the environment (HOROVOD_RANK, _SIZE, _GLOO_RENDEZVOUS_ADDR/_PORT, ...), meets
 * the other ranks and starts the background thread. Returns HVD_SUCCESS, or HVD_ERR_INIT with the
 * reason in hvd_error_text() (a misconfigured environment is an error, never a silent single-process
 * run). Calling it again while initialized is a no-op returning HVD_SUCCESS. */
int hvd_init(void);

/* Orderly shutdown: every rank leaves together; pending operations fail with HVD_ERR_SHUT_DOWN.
 * hvd_init() may be called again afterwards. No-op when not initialized. */
void hvd_shutdown(void);

int hvd_is_initialized(void);

/* Identity; -1 when not initialized. */
int hvd_rank(void);
int hvd_size(void);
int hvd_local_rank(void);
int hvd_local_size(void);
int hvd_cross_rank(void);
int hvd_cross_size(void);

/* The CUDA device this process was pinned to at init (local_rank % device count), or -1 when running
 * on the CPU (no CUDA runtime, no device, or pinning disabled with HVD_DISABLE_GPU_PINNING=1). */
int hvd_device(void);

/* Allreduce of count elements from input into output (may be the same buffer: in place).
 * output = postscale * reduce_over_ranks(prescale * input); AVERAGE also divides by the size. */
int hvd_allreduce_async(const char* name, const void* input, void* output, size_t count, hvd_dtype dtype,
                        hvd_reduce_op op, double prescale, double postscale);

/* Broadcast of count elements of data from root_rank (global rank) to every rank, in place. */
int hvd_broadcast_async(const char* name, void* data, size_t count, hvd_dtype dtype, int root_rank);

/* Allgather: each rank contributes rows x row_elements elements (rows may differ between ranks,
 * row_elements must not). The result (all ranks' rows in rank order) is kept with the handle: after
 * hvd_wait(), read it with hvd_result() and free it with hvd_release(). */
int hvd_allgather_async(const char* name, const void* input, size_t rows, size_t row_elements,
                        hvd_dtype dtype);

/* Alltoall: rank r sends splits[p] rows (of row_elements) to rank p, consecutive in input; splits may be
 * NULL to split rows evenly. Result kept with the handle (hvd_result, hvd_received_splits,
 * hvd_release). */
int hvd_alltoall_async(const char* name, const void* input, size_t rows, size_t row_elements,
                       hvd_dtype dtype, const int64_t* splits);

/* Reducescatter (SUM or AVERAGE): reduces rows x row_elements over ranks; rank r receives its block
 * of rows (the first rows % size ranks get one extra row). Result kept with the handle. */
int hvd_reducescatter_async(const char* name, const void* input, size_t rows, size_t row_elements,
                            hvd_dtype dtype, hvd_reduce_op op, double prescale, double postscale);

/* Barrier over all ranks. */
int hvd_barrier_async(void);

/* Join: this rank has no more data; until every rank has joined it contributes zeros to the other
 * ranks' allreduces. Completes when all ranks joined; hvd_result_int() gives the last rank to join.
 * Result kept with the handle. */
int hvd_join_async(void);

/* 1 when the operation finished (successfully or not), 0 when still running, a negative hvd_status
 * for an unknown handle. Does not release the handle. */
int hvd_poll(int handle);

/* Blocks until the operation finished; returns its hvd_status. Releases the handle unless its
 * operation keeps a result (allgather, alltoall, reducescatter, join). */
int hvd_wait(int handle);

/* Results of a finished operation that keeps them. Pointers stay valid until hvd_release(). */
int hvd_result(int handle, const void** data, size_t* rows);
int hvd_received_splits(int handle, const int64_t** splits, size_t* count);
int hvd_result_int(int handle, int64_t* value);
int hvd_release(int handle);

/* The message of the last failing hvd_* call on this thread ("" if none). Valid until the next call on
 * this thread. */
const char* hvd_error_text(void);

#ifdef __cplusplus
}
#endif

#endif /* HVD_HVD_H */

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
  HVD_ERR_BACKEND = -5,           /* communication failed: a timeout expired, the backend failed */
  HVD_ERR_STALLED = -6,           /* cancelled by the stall inspector (HOROVOD_STALL_SHUTDOWN_TIME_SECONDS) */
  HVD_ERR_INIT = -7,              /* hvd_init() failed (environment, rendezvous) */
  HVD_ERR_INTERNAL = -8,
  HVD_ERR_PEER_LOST = -9,         /* a peer process died or became unreachable; every operation pending on
                                     every survivor fails with it and libhvd stops (hvd_shutdown() returns at
                                     once); elastic jobs re-form: hvd_shutdown(), hvd_init() */
  HVD_ERR_HOSTS_UPDATED = -10     /* elastic: the job's membership changed (a newer round began); reset
                                     between steps (hvd_state_commit, hvd_elastic_run) */
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
  HVD_BOOL = 8,     /* one byte, 0 or 1 */
  HVD_INT16 = 9
} hvd_dtype;

/* Reductions, with Horovod's values (horovod_reduce_op_*). Average divides the sum by the size. */
typedef enum hvd_reduce_op {
  HVD_AVERAGE = 0,
  HVD_SUM = 1,
  HVD_MIN = 3,
  HVD_MAX = 4,
  HVD_PRODUCT = 5
} hvd_reduce_op;

/* Collective operations (hvd_request.op). */
typedef enum hvd_op {
  HVD_OP_ALLREDUCE = 0,
  HVD_OP_ALLGATHER = 1,
  HVD_OP_BROADCAST = 2,
  HVD_OP_ALLTOALL = 3,
  HVD_OP_REDUCESCATTER = 4,
  HVD_OP_BARRIER = 5,
  HVD_OP_JOIN = 6
} hvd_op;

/* The process set of every rank of the job; always registered. */
#define HVD_GLOBAL_PROCESS_SET 0

/* Starts libhvd: reads the environment (HOROVOD_RANK, _SIZE, _GLOO_RENDEZVOUS_ADDR/_PORT, ...), meets
 * the other ranks and starts the background thread. Returns HVD_SUCCESS, or HVD_ERR_INIT with the
 * reason in hvd_error_text() (a misconfigured environment is an error, never a silent single-process
 * run). Calling it again while initialized is a no-op returning HVD_SUCCESS. */
int hvd_init(void);

/* hvd_init(), then registers `count` static process sets: set i holds the global ranks
 * ranks[offsets[i]] .. ranks[offsets[i] + sizes[i] - 1] and gets id i + 1. Every rank must pass the same
 * sets. Returns HVD_SUCCESS; HVD_ERR_INVALID_ARGUMENT (and libhvd stays uninitialized) for a rank out of
 * range, a rank twice in one set, a set equal to another or to the global set. Static sets need no
 * HOROVOD_DYNAMIC_PROCESS_SETS and cannot be removed. */
int hvd_init_process_sets(const int* ranks, const int* sizes, int count);

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

/* Process sets: collectives among a subset of ranks, each set with a Gloo context of its own. Ranks are
 * global ranks; a set's ranks are kept sorted, and "set rank" is the position in that order.
 *
 * hvd_add_process_set registers a set at run time. Collective over the whole job: every rank calls it,
 * with the same ranks, in the same order relative to other add/remove calls. Needs
 * HOROVOD_DYNAMIC_PROCESS_SETS=1 at init. Blocks until registered; returns the new id (>= 1, never
 * reused while the job runs) or a negative hvd_status (HVD_ERR_INVALID_ARGUMENT: dynamic sets not
 * enabled, a rank out of range or repeated, the same ranks as an existing set; HVD_ERR_MISMATCH: ranks
 * passed different sets). */
int hvd_add_process_set(const int* ranks, int count);
/* Removes a set added by hvd_add_process_set (collective, as adding). HVD_ERR_INVALID_ARGUMENT for the
 * global set, a static set, an unknown id, or dynamic sets not enabled. */
int hvd_remove_process_set(int process_set);
/* Number of ranks in the set, or HVD_ERR_INVALID_ARGUMENT for an unknown id. */
int hvd_process_set_size(int process_set);
/* Sets *set_rank to this rank's position in the set, or -1 when it is not a member. Returns HVD_SUCCESS,
 * or HVD_ERR_INVALID_ARGUMENT for an unknown id. */
int hvd_process_set_rank(int process_set, int* set_rank);
/* Copies up to capacity of the set's (sorted, global) ranks into ranks; returns the set's size, or
 * HVD_ERR_INVALID_ARGUMENT for an unknown id. */
int hvd_process_set_ranks(int process_set, int* ranks, int capacity);
/* Copies up to capacity registered set ids (ascending, 0 first) into ids; returns how many there are. */
int hvd_process_set_ids(int* ids, int capacity);

/* One collective, for hvd_enqueue()/hvd_enqueue_group(). Fill it with HVD_REQUEST_INIT, then set what the
 * operation needs:
 *   allreduce      input, output (same buffer: in place), rows = element count, dtype, reduce_op,
 *                  prescale, postscale
 *   broadcast      output (in place; input ignored), rows = element count, dtype, root_rank (global)
 *   allgather      input, rows x row_elements (rows may differ between ranks); result kept
 *   alltoall       input, rows x row_elements, splits (process-set-size entries, or NULL); result kept
 *   reducescatter  input, rows x row_elements, reduce_op (AVERAGE or SUM), prescale, postscale; result kept
 *   barrier, join  nothing (join: global set only; hvd_result_int gives the last rank to join)
 * process_set is a registered id (HVD_GLOBAL_PROCESS_SET by default) that must include this rank.
 * An AVERAGE divides by the size of the process set.
 * shape, ndim: optionally the tensor's shape (ndim >= 0 dims; ndim -1, the default: not given). When every rank
 * gives one, the ranks' shapes must agree (allreduce, broadcast, reducescatter: all of it; allgather, alltoall:
 * beyond the first dimension), else the operation fails on every rank naming the shapes, as Horovod's does;
 * their product must be the element count (rows x row_elements), else HVD_ERR_INVALID_ARGUMENT.
 * device: where the caller's tensor lives, HVD_CPU_DEVICE (the default) or a CUDA device ordinal. The data
 * libhvd reads and writes is always host memory (a GPU tensor's bindings stage it through pinned buffers);
 * the device is compared across ranks as Horovod does: one rank on the CPU and another on a GPU fail the
 * operation on every rank naming both, rather than reducing one rank's host copy with another's tensor. */
#define HVD_CPU_DEVICE (-1)
typedef struct hvd_request {
  hvd_op op;
  const char* name; /* NULL or "": "<op>.noname.<n>", n counting this rank's unnamed operations */
  const void* input;
  void* output;
  size_t rows;
  size_t row_elements;
  hvd_dtype dtype;
  hvd_reduce_op reduce_op;
  double prescale;
  double postscale;
  int root_rank;
  const int64_t* splits;
  int process_set;
  const int64_t* shape;
  int ndim;
  int device;
} hvd_request;

#define HVD_REQUEST_INIT \
  { HVD_OP_ALLREDUCE, NULL, NULL, NULL, 0, 1, HVD_FLOAT32, HVD_AVERAGE, 1.0, 1.0, 0, NULL, HVD_GLOBAL_PROCESS_SET, \
    NULL, -1, HVD_CPU_DEVICE }

/* Queues one operation; returns its handle (>= 0) or a negative hvd_status. Results are kept with the
 * handle for allgather, alltoall, reducescatter and join (read them after hvd_wait, then hvd_release). */
int hvd_enqueue(const hvd_request* request);

/* Queues count operations as one group: every rank negotiates the group as a unit, so its members run
 * together (allreduces fused into one buffer where the fusion threshold allows). All members must be of
 * the same operation and process set. Writes count handles (each released as for hvd_enqueue). Returns
 * HVD_SUCCESS, or a negative hvd_status and queues nothing. */
int hvd_enqueue_group(const hvd_request* requests, int count, int* handles);

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

/* Results of a finished operation that keeps them. Pointers stay valid until hvd_release(). hvd_result
 * gives the number of rows (each of the request's row_elements). */
int hvd_result(int handle, const void** data, size_t* rows);
int hvd_received_splits(int handle, const int64_t** splits, size_t* count);
int hvd_result_int(int handle, int64_t* value);
int hvd_release(int handle);

/* The message of the last failing hvd_* call on this thread ("" if none). Valid until the next call on
 * this thread. */
const char* hvd_error_text(void);

/* Elastic jobs (HOROVOD_ELASTIC=1, set by hvdrun for --min-np/--max-np/--host-discovery-script jobs).
 *
 * A job is re-formed in rounds: when a worker dies, every survivor's operations fail with
 * HVD_ERR_PEER_LOST; when hosts are added or removed, hvd_elastic_check_host_updates() (or
 * hvd_state_commit) says so between steps. Either way each process calls hvd_shutdown() and hvd_init(),
 * which joins the next round (possibly with another rank and size), restores or syncs its state, and
 * goes on. hvd_elastic_run() does all of that around a training function:
 *
 *   hvd_state* st = hvd_state_create();
 *   hvd_state_add(st, "weights", w, sizeof w);
 *   hvd_state_add(st, "step", &step, sizeof step);
 *   int status = hvd_elastic_run(st, train, &args);   (train calls hvd_state_commit(st) every few steps)
 *   hvd_state_free(st);
 *
 * Without HOROVOD_ELASTIC the same program runs as a static job: commits only copy, nothing resets. */

/* Membership changes reported by hvd_elastic_check_host_updates (a bit set). */
#define HVD_HOSTS_REMOVED 1 /* workers left (failed, removed hosts, blacklisted hosts) */
#define HVD_HOSTS_ADDED 2   /* workers joined (new hosts or slots, replacements of failed workers) */

/* 1 when this process runs in an elastic job (HOROVOD_ELASTIC=1), else 0. Needs no init. */
int hvd_elastic_enabled(void);

/* The elastic round this process's libhvd runs in; -1 when not initialized or not elastic. */
long long hvd_elastic_round(void);

/* Collective over the job (every rank calls it at the same point, between steps): rank 0 asks the
 * rendezvous server whether a round newer than this process's has begun and broadcasts the answer.
 * Returns 1 and sets *changes (HVD_HOSTS_REMOVED | HVD_HOSTS_ADDED, over every newer round) when one has,
 * 0 (and *changes = 0) when not, or a negative hvd_status (the server could not be asked: every rank gets
 * the error; the broadcast failed). Not elastic: returns 0 at once, with no communication. changes may be
 * NULL. */
int hvd_elastic_check_host_updates(int* changes);

/* Training state: named byte buffers that the program owns and registers, committed (copied) between
 * steps, restored after a failure, and synced from rank 0 after a reset. Not thread-safe: use one state
 * from one thread at a time. */
typedef struct hvd_state hvd_state;

/* A new, empty state (NULL only when out of memory). */
hvd_state* hvd_state_create(void);

/* Registers bytes bytes at data under name (unique in the state, non-empty). The buffer must stay valid
 * until hvd_state_free; its current contents are the first commit. HVD_ERR_INVALID_ARGUMENT for a null
 * state, data or name, an empty or duplicate name. */
int hvd_state_add(hvd_state* state, const char* name, void* data, size_t bytes);

/* Frees the state and its copies (not the registered buffers). NULL is a no-op. */
void hvd_state_free(hvd_state* state);

/* Copies every buffer (the new last commit), then, collectively, hvd_elastic_check_host_updates():
 * HVD_SUCCESS, HVD_ERR_HOSTS_UPDATED when the job is re-forming (reset between steps: hvd_elastic_run does),
 * or the check's negative status. Every rank must commit at the same step. */
int hvd_state_commit(hvd_state* state);

/* Copies the last commit back into every buffer. Local. */
int hvd_state_restore(hvd_state* state);

/* Broadcasts every buffer from rank 0 (collective, in registration order; every rank must have registered
 * the same names and sizes), then commits locally (without checking for host updates). */
int hvd_state_sync(hvd_state* state);

/* Registers fn(arg), called after every reset of hvd_elastic_run (in registration order), e.g. to adjust
 * the learning rate or data sharding to the new size. */
int hvd_state_on_reset(hvd_state* state, void (*fn)(void*), void* arg);

/* Runs train(state, arg) with Horovod's elastic loop: sync the state (unless skipped), call train;
 *   HVD_ERR_PEER_LOST, HVD_ERR_BACKEND, HVD_ERR_SHUT_DOWN: restore the last commit, reset, sync;
 *   HVD_ERR_HOSTS_UPDATED: reset, and sync unless the changes were only removals (the survivors hold the
 *   state committed at that step already);
 * where reset is hvd_shutdown() + hvd_init() (joining the next round) followed by the on_reset callbacks.
 * Returns train's status otherwise (HVD_SUCCESS, or any other error), or the failing sync's or init's
 * status (HVD_ERR_INIT, with the reason in hvd_error_text()). Resets are not counted here (hvdrun's
 * --reset-limit bounds them). Needs hvd_init() first. In a job that is not elastic nothing is reset:
 * train's status is returned as it is. */
int hvd_elastic_run(hvd_state* state, int (*train)(hvd_state* state, void* arg), void* arg);

#ifdef __cplusplus
}
#endif

#endif /* HVD_HVD_H */

// Worker for the failure tests. argv[1] selects the scenario:
//   stall   rank 0 allreduces "lonely", the other ranks "other": neither is ever complete; each prints
//           the error it gets (the stall shutdown)
//   die     every rank allreduces in a loop; rank 1 exits abruptly (_exit) after a few steps; the
//           survivors print the error their pending handle failed with and exit 0
//   kill_mid [allreduce|allgather]  every rank allreduces 64 MiB (allgathers 64 MiB from every rank) in a
//           loop; at step 3 rank 1 submits, waits 2 ms (the others are then inside the collective) and
//           SIGKILLs itself; the survivors print their error as for die
//   peer_lost [kill|stopped|hung]  every rank allreduces 16 MiB in a loop; at step 3 rank 1 submits, waits
//           2 ms and SIGKILLs itself (kill), or SIGSTOPs itself and is SIGKILLed by rank 0 500 ms later
//           (stopped: 64 MiB steps, every socket's buffers capped at 64 KiB, the stop 10 ms after the submit,
//           so that the survivors' sends to it fill its sockets first; rank 0 prints "rank 0 killed rank 1
//           at E"), or SIGSTOPs itself for good (hung: the survivors time out; rank 0 SIGKILLs it after its
//           shutdown); the survivors also submit "never" (which rank 1 never submits, so it stays queued);
//           prints "rank R failed at E" when its wait returned (E: seconds since the epoch) and
//           "rank R peer_lost step K big S1 queued S2 resubmit S3 shutdown T s: <error text>" with the
//           statuses of the in-flight allreduce, the queued one and a submission after the failure, and how
//           long hvd_shutdown() took
//   stop    (2 ranks) allreduces of 1 MiB for 4 s, checked each step, while rank 0 stops rank 1 with
//           SIGSTOP for 3 s and then continues it; prints "stop ok after N steps" or what differed
//   checksum  allreduces of several sizes, types and ops (sums, averages, maxima of small integers, exact in
//           any order), then allgathers of uneven rows; prints "rank R checksum H", H a hash of every result
//           (for comparing data paths)
//   collectives  broadcasts from every root, allgathers, alltoalls and reducescatters (sum, average) of
//           uneven sizes, from a few bytes to several MiB per rank, each result checked element by element;
//           prints "rank R collectives ok" or the first element that differed
//   forever  allreduces until killed (for the tests that SIGKILL a whole job)
//   timeline  a few named allreduces (for HOROVOD_TIMELINE)
//   elastic  (2 ranks, an elastic job) an allreduce, hvd_shutdown(), hvd_init() again (the next round) and
//           another allreduce; prints "round R rank K size N sum S" after each
//   init_round  (an elastic job) prints "init round R rank K size N sum S status T" after init and one
//           allreduce of rank + 1
//   host_updates  (2 ranks, an elastic job) hvd_elastic_check_host_updates() once ("check 0 changes C"),
//           then creates the file $HVD_TEST_SIGNAL_FILE (rank 0) and checks again every 20 ms until it
//           returns something else or 20 s passed ("check S changes C round R enabled E" with
//           hvd_elastic_round(), hvd_elastic_enabled())
//   state   (3 ranks) the C state API (sync, commit, restore of rank-dependent buffers) and the C++ State;
//           prints "state ok" or what differed
//   elastic_run c|cpp  (an elastic job of 3 ranks, or a static one) linear updates of 4 doubles for 12
//           steps with hvd_elastic_run (c) or hvd::elastic::run (cpp), committing every 3 steps; the rank 2
//           of round 1 SIGKILLs itself inside step 7's allreduce. Every rank prints "rank R round N size S
//           resets K done", rank 0 also "final step S w <4 values>"
//   process_sets  (3 ranks, HOROVOD_DYNAMIC_PROCESS_SETS=1) the C++ ProcessSet API and hvd_enqueue_group;
//           prints "process_sets ok" or what differed
//   sigpipe  after init and an allreduce, reads every thread's blocked signals from /proc/self/task and
//           prints "rank R sigpipe main M threads T blocked B disposition D": M 1 when the main thread
//           blocks SIGPIPE, T threads besides it, B of them blocking SIGPIPE, D "default" or "changed"
//   report  (a job of 3 or so) 5 allreduces of 1000 float32, 3 broadcasts of 256 int32 from rank 0 and 2
//           allgathers of rank + 1 rows of 4 float32, each checked; prints "rank R report ok" or what
//           differed
//   report_wait  every rank allreduces "late" once, rank 2 after sleeping 2.5 s; prints "rank R wait ok"
//   placement  (2 ranks) before init, every rank keeps the first two CPUs of its mask (so that the host's
//           ranks have two CPUs between them: HVD_MOVE_THREADS applies). Rank 0 pins its background thread
//           (named hvd-background) to the first of them, which runs a pair of allreduces there; rank 0 then
//           moves its main thread to the second CPU, and every rank submits two allreduces together (rank 1
//           50 ms later) and waits for them. Rank 0 prints "rank 0 placement background B main M": the
//           background thread's CPU and the main thread's right after the wait. "placement skipped: <why>"
//           where the mask has fewer than two CPUs.
// Every scenario runs with SIGPIPE's default action, as a C program starts (the test harness may ignore
// it, and an ignored disposition would be inherited across exec).
#include <dirent.h>
#include <sched.h>
#include <signal.h>
#include <sys/socket.h>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <optional>
#include <thread>

#include <hvd/hvd.h>
#include <hvd/hvd.hpp>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/common/cpus.h"

namespace {

// Whether the thread `tid` of this process blocks SIGPIPE, from the SigBlk mask in its status file;
// nothing when the thread has ended (its status is gone).
std::optional<bool> blocksSigpipe(const std::string& tid) {
  std::ifstream status("/proc/self/task/" + tid + "/status");
  std::string line;
  while (std::getline(status, line)) {
    // A thread that has exited but is still listed (a zombie, or dead and not yet reaped) has given up its
    // signal state: the kernel shows an empty SigBlk for it. Gloo's and init's short-lived threads end
    // this way, and the scan below may meet one: it holds no mask, so it is not counted.
    if (line.rfind("State:", 0) == 0) {
      const size_t at = line.find_first_not_of(" \t", 6);
      if (at != std::string::npos && (line[at] == 'Z' || line[at] == 'X')) return std::nullopt;
    }
    if (line.rfind("SigBlk:", 0) == 0) {
      const unsigned long long mask = std::stoull(line.substr(7), nullptr, 16);
      return (mask >> (SIGPIPE - 1)) & 1u;
    }
  }
  return std::nullopt;
}

// The id of this process's thread named `name` (/proc/self/task/TID/comm), or 0.
pid_t threadNamed(const std::string& name) {
  pid_t found = 0;
  DIR* dir = ::opendir("/proc/self/task");
  if (!dir) return 0;
  while (const dirent* e = ::readdir(dir)) {
    std::ifstream comm(std::string("/proc/self/task/") + e->d_name + "/comm");
    std::string line;
    if (std::getline(comm, line) && line == name) found = static_cast<pid_t>(std::atoi(e->d_name));
  }
  ::closedir(dir);
  return found;
}

int allreduceOnce(const char* name, float* v, size_t n) {
  const int h = hvd_allreduce_async(name, v, v, n, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
  return h < 0 ? h : hvd_wait(h);
}

// Caps the send and receive buffers of every TCP socket of this process (Gloo's pairs among them) at
// `bytes`, which also turns the kernel's autotuning of them off: a peer that stops reading then fills
// them after a few segments, and a sender's writes stay queued in Gloo.
void capSocketBuffers(int bytes) {
  DIR* dir = ::opendir("/proc/self/fd");
  if (!dir) return;
  while (const dirent* e = ::readdir(dir)) {
    const int fd = std::atoi(e->d_name);
    int type = 0;
    socklen_t len = sizeof type;
    if (fd <= 2 || ::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_STREAM) continue;
    ::setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &bytes, sizeof bytes);
    ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes);
  }
  ::closedir(dir);
}

// Every rank's pid: pids[rank] set by each rank, zeros elsewhere, summed.
int allreducePids(std::vector<int64_t>& pids) {
  const int h = hvd_allreduce_async("pids", pids.data(), pids.data(), pids.size(), HVD_INT64, HVD_SUM, 1.0, 1.0);
  return h < 0 ? h : hvd_wait(h);
}

// elastic_run: the training state, and the step both implementations run.
constexpr int64_t kElasticSteps = 12;
constexpr int64_t kCommitEvery = 3;
struct Linear {
  double w[4];
  int64_t step = 0;
  int resets = 0;
};

// One step: w -= 0.25 * mean over ranks of (w - target(rank, step)); the test recomputes it.
int linearStep(Linear& m) {
  const int rank = hvd_rank();
  if (hvd_elastic_round() == 1 && rank == 2 && m.step == 7) {
    double g[4] = {0, 0, 0, 0};
    hvd_allreduce_async("grad", g, g, 4, HVD_FLOAT64, HVD_SUM, 1.0, 1.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ::raise(SIGKILL);
  }
  double g[4];
  for (int i = 0; i < 4; ++i) g[i] = m.w[i] - static_cast<double>(rank + i + m.step % 5);
  const int h = hvd_allreduce_async("grad", g, g, 4, HVD_FLOAT64, HVD_SUM, 1.0, 1.0);
  const int status = h < 0 ? h : hvd_wait(h);
  if (status != HVD_SUCCESS) return status;
  for (int i = 0; i < 4; ++i) m.w[i] -= 0.25 * g[i] / hvd_size();
  ++m.step;
  return HVD_SUCCESS;
}

void printLinear(const Linear& m) {
  std::printf("rank %d round %lld size %d resets %d done\n", hvd_rank(), hvd_elastic_round(), hvd_size(), m.resets);
  if (hvd_rank() == 0) {
    std::printf("final step %lld w %.17g %.17g %.17g %.17g\n", static_cast<long long>(m.step), m.w[0], m.w[1],
                m.w[2], m.w[3]);
  }
  std::fflush(stdout);
}

int elasticRun(bool cpp) {
  Linear m;
  for (int i = 0; i < 4; ++i) m.w[i] = (hvd_rank() + 1.0) * (i + 1);  // differ per rank: sync must fix them
  if (cpp) {
    try {
      hvd::elastic::State state;
      state.add("w", m.w);
      state.add("step", m.step);
      state.onReset([&] { ++m.resets; });
      hvd::elastic::run(state, [&] {
        while (m.step < kElasticSteps) {
          hvd::check(linearStep(m));
          if (m.step % kCommitEvery == 0) state.commit();
        }
      });
    } catch (const std::exception& e) {
      std::printf("rank %d elastic_run failed: %s\n", hvd_rank(), e.what());
      return 1;
    }
  } else {
    hvd_state* state = hvd_state_create();
    hvd_state_add(state, "w", m.w, sizeof m.w);
    hvd_state_add(state, "step", &m.step, sizeof m.step);
    hvd_state_on_reset(state, [](void* p) { ++static_cast<Linear*>(p)->resets; }, &m);
    const int status = hvd_elastic_run(
        state,
        [](hvd_state* st, void* p) -> int {
          Linear& lm = *static_cast<Linear*>(p);
          while (lm.step < kElasticSteps) {
            if (const int s = linearStep(lm); s != HVD_SUCCESS) return s;
            if (lm.step % kCommitEvery == 0) {
              if (const int s = hvd_state_commit(st); s != HVD_SUCCESS) return s;
            }
          }
          return HVD_SUCCESS;
        },
        &m);
    hvd_state_free(state);
    if (status != HVD_SUCCESS) {
      std::printf("rank %d elastic_run failed with status %d: %s\n", hvd_rank(), status, hvd_error_text());
      return 1;
    }
  }
  printLinear(m);
  hvd_shutdown();
  return 0;
}

// state: "what differed" when a check fails.
struct StateFailure : std::runtime_error {
  using std::runtime_error::runtime_error;
};
void expect(bool ok, const std::string& what) {
  if (!ok) throw StateFailure(what);
}

// report: operations of known sizes, for the counts in the rank's reports.
int reportScenario() {
  const int rank = hvd_rank(), size = hvd_size();
  auto failed = [&](const std::string& what) {
    std::printf("rank %d report failed: %s: %s\n", rank, what.c_str(), hvd_error_text());
    hvd_shutdown();
    return 1;
  };
  for (int i = 0; i < 5; ++i) {
    std::vector<float> v(1000, static_cast<float>(rank + i));
    const std::string name = "report.allreduce." + std::to_string(i);
    if (allreduceOnce(name.c_str(), v.data(), v.size()) != HVD_SUCCESS) return failed(name);
    const float want = static_cast<float>(size * (size - 1) / 2 + size * i);
    if (v[0] != want || v[999] != want) return failed(name + " gave " + std::to_string(v[0]));
  }
  for (int i = 0; i < 3; ++i) {
    std::vector<int32_t> v(256, rank == 0 ? 7 + i : -1);
    const std::string name = "report.broadcast." + std::to_string(i);
    const int h = hvd_broadcast_async(name.c_str(), v.data(), v.size(), HVD_INT32, 0);
    if ((h < 0 ? h : hvd_wait(h)) != HVD_SUCCESS) return failed(name);
    if (v[0] != 7 + i || v[255] != 7 + i) return failed(name + " gave " + std::to_string(v[0]));
  }
  for (int i = 0; i < 2; ++i) {
    std::vector<float> rows(static_cast<size_t>(rank + 1) * 4, static_cast<float>(rank));
    const std::string name = "report.allgather." + std::to_string(i);
    const int h = hvd_allgather_async(name.c_str(), rows.data(), rank + 1, 4, HVD_FLOAT32);
    if (h < 0 || hvd_wait(h) != HVD_SUCCESS) return failed(name);
    const void* data = nullptr;
    size_t got = 0;
    hvd_result(h, &data, &got);
    hvd_release(h);
    if (got != static_cast<size_t>(size * (size + 1) / 2)) return failed(name + " gave " + std::to_string(got) + " rows");
  }
  std::printf("rank %d report ok\n", rank);
  std::fflush(stdout);
  hvd_shutdown();
  return 0;
}

int stateScenario() {
  const int rank = hvd_rank();
  try {
    double w[3];
    int64_t step = 100 + rank;
    for (int i = 0; i < 3; ++i) w[i] = rank * 10.0 + i;
    hvd_state* st = hvd_state_create();
    expect(hvd_state_add(st, "w", w, sizeof w) == HVD_SUCCESS, "add w");
    expect(hvd_state_add(st, "step", &step, sizeof step) == HVD_SUCCESS, "add step");
    expect(hvd_state_add(st, "w", &step, sizeof step) == HVD_ERR_INVALID_ARGUMENT, "duplicate name accepted");
    // Restore before any commit: the values at registration.
    w[0] = -1;
    step = -1;
    expect(hvd_state_restore(st) == HVD_SUCCESS && w[0] == rank * 10.0 && step == 100 + rank, "restore to add");
    expect(hvd_state_sync(st) == HVD_SUCCESS, std::string("sync: ") + hvd_error_text());
    expect(w[0] == 0.0 && w[1] == 1.0 && w[2] == 2.0 && step == 100, "sync did not give rank 0's values");
    for (double& x : w) x += rank + 1;  // differ again
    step = 7;
    expect(hvd_state_commit(st) == HVD_SUCCESS, std::string("commit: ") + hvd_error_text());
    w[1] = 1e9;
    step = 0;
    expect(hvd_state_restore(st) == HVD_SUCCESS, "restore");
    expect(w[1] == 2.0 + rank && step == 7, "restore did not give the last commit");
    // A sync commits too: restoring after it gives rank 0's values.
    expect(hvd_state_sync(st) == HVD_SUCCESS && w[1] == 2.0, "second sync");
    w[1] = 5;
    expect(hvd_state_restore(st) == HVD_SUCCESS && w[1] == 2.0, "restore after sync");
    hvd_state_free(st);

    hvd::elastic::State state;
    std::vector<float> v(5, static_cast<float>(rank));
    int32_t epoch = rank * 3;
    state.add("v", v);
    state.add("epoch", epoch);
    state.sync();
    expect(v == std::vector<float>(5, 0.0f) && epoch == 0, "C++ sync");
    v[4] = 9;
    epoch = 1;
    state.commit();
    v[4] = 0;
    epoch = 0;
    state.restore();
    expect(v[4] == 9.0f && epoch == 1, "C++ restore");
    std::printf("rank %d state ok\n", rank);
  } catch (const std::exception& e) {
    std::printf("rank %d state failed: %s\n", rank, e.what());
  }
  hvd_shutdown();
  return 0;
}

// A survivor's line for the step whose collective failed with `status` (the step began at `start`, the
// seconds are printed with `decimals` places), after which it shuts down; returns main's exit code, 0.
// The "collectives" scenario; returns the exit code.
int collectivesScenario(int rank, int size) {
  auto failed = [&](const std::string& what) {
    std::printf("rank %d: %s\n", rank, what.c_str());
    return 1;
  };
  // A result kept with handle h after hvd_wait; empty on failure (what says so).
  auto result = [&](int h, const std::string& name, size_t& rows, std::string& what) -> const void* {
    const void* out = nullptr;
    if (h < 0 || hvd_wait(h) != HVD_SUCCESS || hvd_result(h, &out, &rows) != HVD_SUCCESS) {
      what = name + " failed: " + hvd_error_text();
      return nullptr;
    }
    return out;
  };
  std::string what;
  // Broadcast from every root: 3 MiB + 3 bytes and 100 bytes.
  for (size_t bytes : {size_t{3u << 20} + 3, size_t{100}}) {
    for (int root = 0; root < size; ++root) {
      std::vector<uint8_t> data(bytes, 0);
      if (rank == root) {
        for (size_t i = 0; i < bytes; ++i) data[i] = static_cast<uint8_t>(i * 7 + root);
      }
      const std::string name = "bcast." + std::to_string(bytes) + "." + std::to_string(root);
      const int h = hvd_broadcast_async(name.c_str(), data.data(), bytes, HVD_UINT8, root);
      if (h < 0 || hvd_wait(h) != HVD_SUCCESS) return failed(name + " failed: " + hvd_error_text());
      for (size_t i = 0; i < bytes; ++i) {
        if (data[i] != static_cast<uint8_t>(i * 7 + root))
          return failed(name + " differs at " + std::to_string(i));
      }
    }
  }
  // Allgather: rank r contributes rows_r rows of 3 floats (none on rank 1), large and small.
  for (int64_t scale : {int64_t{100003}, int64_t{5}}) {
    auto rowsOf = [&](int r) { return r == 1 ? 0 : (r + 1) * scale; };
    auto value = [](int r, size_t i) { return static_cast<float>(r * 1000 + i % 997); };
    std::vector<float> in(static_cast<size_t>(rowsOf(rank)) * 3);
    for (size_t i = 0; i < in.size(); ++i) in[i] = value(rank, i);
    const std::string name = "gather." + std::to_string(scale);
    size_t rows = 0;
    const int h =
        hvd_allgather_async(name.c_str(), in.data(), static_cast<size_t>(rowsOf(rank)), 3, HVD_FLOAT32);
    const auto* out = static_cast<const float*>(result(h, name, rows, what));
    if (!out) return failed(what);
    size_t at = 0;
    for (int r = 0; r < size; ++r) {
      for (size_t i = 0; i < static_cast<size_t>(rowsOf(r)) * 3; ++i, ++at) {
        if (at >= rows * 3 || out[at] != value(r, i)) {
          return failed(name + " differs at element " + std::to_string(i) + " from rank " +
                        std::to_string(r));
        }
      }
    }
    if (at != rows * 3) return failed(name + " gave " + std::to_string(rows) + " rows");
    if (hvd_release(h) != HVD_SUCCESS) return failed(name + ": release failed: " + hvd_error_text());
    // Released once (its node now kept for the next handle): the number is unknown from then on.
    const std::string unknown = "unknown handle " + std::to_string(h);
    if (hvd_release(h) != HVD_ERR_INVALID_ARGUMENT || std::string(hvd_error_text()).find(unknown) != 0) {
      return failed(name + ": a second release of handle " + std::to_string(h) + " said '" +
                    hvd_error_text() + "'");
    }
  }
  // Alltoall: rank r sends splits[p] rows of 2 int32 to p, some none, some several MiB.
  for (int64_t scale : {int64_t{300007}, int64_t{3}}) {
    auto splitOf = [&](int from, int to) {
      return (from + to) % 3 == 0 ? 0 : scale * ((from + 2 * to) % 3 + 1);
    };
    auto value = [](int from, int to, size_t i) {
      return static_cast<int32_t>(from * 1000003 + to * 1009 + i);
    };
    std::vector<int64_t> splits(size);
    std::vector<int32_t> in;
    for (int p = 0; p < size; ++p) {
      splits[p] = splitOf(rank, p);
      for (size_t i = 0; i < static_cast<size_t>(splits[p]) * 2; ++i) in.push_back(value(rank, p, i));
    }
    const std::string name = "alltoall." + std::to_string(scale);
    size_t rows = 0;
    const int h = hvd_alltoall_async(name.c_str(), in.data(), in.size() / 2, 2, HVD_INT32, splits.data());
    const auto* out = static_cast<const int32_t*>(result(h, name, rows, what));
    if (!out) return failed(what);
    size_t at = 0;
    for (int q = 0; q < size; ++q) {
      for (size_t i = 0; i < static_cast<size_t>(splitOf(q, rank)) * 2; ++i, ++at) {
        if (at >= rows * 2 || out[at] != value(q, rank, i)) {
          return failed(name + " differs at element " + std::to_string(i) + " from rank " +
                        std::to_string(q));
        }
      }
    }
    if (at != rows * 2) return failed(name + " gave " + std::to_string(rows) + " rows");
    hvd_release(h);
  }
  // Reducescatter, sum and average of small integers (exact in any order), rows that do not divide evenly.
  for (int64_t rows_in : {int64_t{400009}, int64_t{7}}) {
    for (hvd_reduce_op op : {HVD_SUM, HVD_AVERAGE}) {
      auto value = [](int r, size_t i) { return static_cast<float>((r + i) % 5); };
      std::vector<float> in(static_cast<size_t>(rows_in) * 3);
      for (size_t i = 0; i < in.size(); ++i) in[i] = value(rank, i);
      const std::string name = "reducescatter." + std::to_string(rows_in) + "." + std::to_string(op);
      size_t rows = 0;
      const int h = hvd_reducescatter_async(name.c_str(), in.data(), static_cast<size_t>(rows_in), 3,
                                            HVD_FLOAT32, op, 1.0, 1.0);
      const auto* out = static_cast<const float*>(result(h, name, rows, what));
      if (!out) return failed(what);
      const int64_t base = rows_in / size, extra = rows_in % size;
      const int64_t first = rank * base + std::min<int64_t>(rank, extra);
      if (static_cast<int64_t>(rows) != base + (rank < extra ? 1 : 0)) {
        return failed(name + " gave " + std::to_string(rows) + " rows");
      }
      for (size_t i = 0; i < rows * 3; ++i) {
        float want = 0;
        for (int r = 0; r < size; ++r) want += value(r, static_cast<size_t>(first) * 3 + i);
        if (op == HVD_AVERAGE) want *= static_cast<float>(1.0 / size);  // the postscale, as libhvd applies it
        if (out[i] != want) {
          return failed(name + " element " + std::to_string(i) + " is " + std::to_string(out[i]) + ", want " +
                        std::to_string(want));
        }
      }
      hvd_release(h);
    }
  }
  std::printf("rank %d collectives ok\n", rank);
  hvd_shutdown();
  return 0;
}

int reportSurvived(int rank, int step, int status, std::chrono::steady_clock::time_point start,
                   int decimals) {
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("rank %d survived: step %d failed with status %d after %.*f s: %s\n", rank, step, status,
              decimals, s, hvd_error_text());
  hvd_shutdown();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const char* scenario = argc > 1 ? argv[1] : "";
  ::signal(SIGPIPE, SIG_DFL);
  const bool placement = std::strcmp(scenario, "placement") == 0;
  std::vector<int> two = placement ? hvd::test::allowedCpus() : std::vector<int>{};
  if (two.size() > 2) two.resize(2);
  if (placement && two.size() == 2 && !hvd::test::setCpus(two)) {
    std::printf("placement: cannot narrow the main thread's mask\n");
    return 1;
  }
  if (hvd_init() != HVD_SUCCESS) {
    std::fprintf(stderr, "init: %s\n", hvd_error_text());
    return 2;
  }
  const int rank = hvd_rank();
  float v[16] = {1};
  if (std::strcmp(scenario, "elastic") == 0) {
    for (int round = 1; round <= 2; ++round) {
      float x = static_cast<float>(hvd_rank() + 1);
      if (allreduceOnce("sum", &x, 1) != HVD_SUCCESS) {
        std::printf("round %d allreduce: %s\n", round, hvd_error_text());
        return 3;
      }
      std::printf("round %d rank %d size %d sum %g\n", round, hvd_rank(), hvd_size(), x);
      std::fflush(stdout);
      hvd_shutdown();
      if (round == 1 && hvd_init() != HVD_SUCCESS) {
        std::printf("re-init: %s\n", hvd_error_text());
        return 4;
      }
    }
    return 0;
  }
  if (std::strcmp(scenario, "report") == 0) return reportScenario();
  if (std::strcmp(scenario, "report_wait") == 0) {
    if (rank == 2) std::this_thread::sleep_for(std::chrono::milliseconds(2500));
    float x = 1;
    const int status = allreduceOnce("late", &x, 1);
    std::printf("rank %d wait %s\n", rank, status == HVD_SUCCESS && x == hvd_size() ? "ok" : hvd_error_text());
    std::fflush(stdout);
    hvd_shutdown();
    return status == HVD_SUCCESS ? 0 : 3;
  }
  if (std::strcmp(scenario, "init_round") == 0) {
    float x = static_cast<float>(rank + 1);
    const int status = allreduceOnce("sum", &x, 1);
    std::printf("init round %lld rank %d size %d sum %g status %d\n", hvd_elastic_round(), rank, hvd_size(), x, status);
    hvd_shutdown();
    return status == HVD_SUCCESS ? 0 : 3;
  }
  if (std::strcmp(scenario, "host_updates") == 0) {
    int changes = -1;
    int status = hvd_elastic_check_host_updates(&changes);
    std::printf("check %d changes %d\n", status, changes);
    std::fflush(stdout);
    if (status != 0) return 3;
    if (rank == 0) {
      const char* path = std::getenv("HVD_TEST_SIGNAL_FILE");
      std::FILE* signal = path ? std::fopen(path, "w") : nullptr;
      if (!signal) return 4;
      std::fclose(signal);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (status == 0 && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      status = hvd_elastic_check_host_updates(&changes);
    }
    std::printf("check %d changes %d round %lld enabled %d: %s\n", status, changes, hvd_elastic_round(),
                hvd_elastic_enabled(), status < 0 ? hvd_error_text() : "");
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "state") == 0) return stateScenario();
  if (std::strcmp(scenario, "elastic_run") == 0) return elasticRun(argc > 2 && std::strcmp(argv[2], "cpp") == 0);
  if (std::strcmp(scenario, "stall") == 0) {
    const char* name = rank == 0 ? "lonely" : "other";
    const int status = allreduceOnce(name, v, 16);
    std::printf("rank %d %s status %d: %s\n", rank, name, status, hvd_error_text());
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "die") == 0) {
    for (int step = 0;; ++step) {
      if (rank == 1 && step == 5) _exit(9);
      const auto start = std::chrono::steady_clock::now();
      const int status = allreduceOnce("step", v, 16);
      if (status != HVD_SUCCESS) return reportSurvived(rank, step, status, start, 1);
    }
  }
  if (std::strcmp(scenario, "collectives") == 0) return collectivesScenario(rank, hvd_size());
  if (std::strcmp(scenario, "kill_mid") == 0) {
    const bool gather = argc > 2 && std::strcmp(argv[2], "allgather") == 0;
    std::vector<float> big(16u << 20, 1.0f);
    for (int step = 0;; ++step) {
      const auto start = std::chrono::steady_clock::now();
      const int h = gather ? hvd_allgather_async("big", big.data(), big.size(), 1, HVD_FLOAT32)
                           : hvd_allreduce_async("big", big.data(), big.data(), big.size(), HVD_FLOAT32,
                                                 HVD_SUM, 1.0, 1.0);
      if (rank == 1 && step == 3) {
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
        ::raise(SIGKILL);
      }
      const int status = h < 0 ? h : hvd_wait(h);
      if (gather && status == HVD_SUCCESS) hvd_release(h);
      if (status != HVD_SUCCESS) return reportSurvived(rank, step, status, start, 3);
    }
  }
  if (std::strcmp(scenario, "peer_lost") == 0) {
    // How rank 1 goes: "kill" (it SIGKILLs itself), "stopped" (it SIGSTOPs itself, so it stops reading its
    // sockets and the survivors' sends to it fill them; rank 0 SIGKILLs it 500 ms later), "hung" (it
    // SIGSTOPs itself and stays stopped: the survivors time out; rank 0 SIGKILLs it after shutdown).
    const std::string how = argc > 2 ? argv[2] : "kill";
    std::vector<int64_t> pids(hvd_size(), 0);
    pids[rank] = ::getpid();
    if (allreducePids(pids) != HVD_SUCCESS) return 3;
    if (how == "stopped") capSocketBuffers(64 << 10);
    const auto epoch = [] {
      return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
    };
    // "stopped": 64 MiB, so that rank 1 stops well inside the ring, which the capped buffers slow down.
    std::vector<float> big(how == "stopped" ? 16u << 20 : 4u << 20, 1.0f);
    float never[4] = {0};
    for (int step = 0;; ++step) {
      const int h = hvd_allreduce_async("big", big.data(), big.data(), big.size(), HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
      int queued = -1;
      if (step == 3) {
        if (rank == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(how == "stopped" ? 10 : 2));
          ::raise(how == "kill" ? SIGKILL : SIGSTOP);
        }
        queued = hvd_allreduce_async("never", never, never, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
        if (rank == 0 && how == "stopped") {
          std::this_thread::sleep_for(std::chrono::milliseconds(500));
          ::kill(static_cast<pid_t>(pids[1]), SIGKILL);
          std::printf("rank 0 killed rank 1 at %.3f\n", epoch());
        }
      }
      const int status = h < 0 ? h : hvd_wait(h);
      if (status != HVD_SUCCESS) std::printf("rank %d failed at %.3f\n", rank, epoch());
      if (status == HVD_SUCCESS) {
        if (queued >= 0) {
          std::printf("rank %d: step %d succeeded after rank 1 was killed\n", rank, step);
          return 1;
        }
        continue;
      }
      const std::string text = hvd_error_text();
      const int queued_status = queued < 0 ? queued : hvd_wait(queued);
      // Refused at once, or (when submitted while the background thread was still stopping) failed.
      const int resubmit = hvd_allreduce_async("after", never, never, 4, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
      const int resubmit_status = resubmit < 0 ? resubmit : hvd_wait(resubmit);
      const auto start = std::chrono::steady_clock::now();
      hvd_shutdown();
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      std::printf("rank %d peer_lost step %d big %d queued %d resubmit %d shutdown %.3f s: %s\n", rank, step, status,
                  queued_status, resubmit_status, s, text.c_str());
      if (rank == 0 && how == "hung") ::kill(static_cast<pid_t>(pids[1]), SIGKILL);
      return 0;
    }
  }
  if (std::strcmp(scenario, "stop") == 0) {
    // Every rank's pid, so that rank 0 can stop rank 1.
    std::vector<int64_t> pids(hvd_size(), 0);
    pids[rank] = ::getpid();
    if (allreducePids(pids) != HVD_SUCCESS) return 3;
    std::thread stopper;
    if (rank == 0) {
      stopper = std::thread([victim = static_cast<pid_t>(pids[1])] {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ::kill(victim, SIGSTOP);
        std::this_thread::sleep_for(std::chrono::seconds(3));
        ::kill(victim, SIGCONT);
      });
    }
    const auto start = std::chrono::steady_clock::now();
    std::vector<float> data((1u << 18) + 1);
    int steps = 0;
    for (;; ++steps) {
      for (size_t i = 0; i + 1 < data.size(); ++i) data[i] = static_cast<float>(rank + (i + steps) % 5);
      // The last element: 1 from rank 0 once it has run 4 s, telling every rank to stop after this step.
      data.back() = rank == 0 && std::chrono::steady_clock::now() - start > std::chrono::seconds(4) ? 1.0f : 0.0f;
      const int h = hvd_allreduce_async("step", data.data(), data.data(), data.size(), HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
      const int status = h < 0 ? h : hvd_wait(h);
      if (status != HVD_SUCCESS) {
        std::printf("rank %d: step %d failed with status %d: %s\n", rank, steps, status, hvd_error_text());
        if (stopper.joinable()) stopper.join();
        return 1;
      }
      for (size_t i = 0; i + 1 < data.size(); ++i) {
        const float want = static_cast<float>(2 * ((i + steps) % 5) + 1);
        if (data[i] != want) {
          std::printf("rank %d: step %d element %zu is %g, want %g\n", rank, steps, i, data[i], want);
          return 1;
        }
      }
      if (data.back() != 0.0f) break;
    }
    if (stopper.joinable()) stopper.join();
    std::printf("rank %d: stop ok after %d steps\n", rank, steps + 1);
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "checksum") == 0) {
    uint64_t hash = 1469598103934665603ull;  // FNV-1a over every result byte
    auto mix = [&](const void* p, size_t bytes) {
      for (size_t i = 0; i < bytes; ++i) hash = (hash ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
    };
    int k = 0;
    for (size_t count : {size_t{1}, size_t{1000}, size_t{300001}, size_t{1} << 20}) {
      std::vector<float> f(count);
      std::vector<double> d(count);
      std::vector<int32_t> x(count);
      for (size_t i = 0; i < count; ++i) {
        f[i] = static_cast<float>((rank * 7 + i) % 11);
        d[i] = static_cast<double>((rank * 5 + i) % 13) * 0.5;
        x[i] = static_cast<int32_t>((rank * 3 + i) % 17) - 8;
      }
      std::vector<float> avg = f;
      const struct {
        void* data;
        hvd_dtype type;
        hvd_reduce_op op;
        size_t bytes;
      } ops[] = {{f.data(), HVD_FLOAT32, HVD_SUM, count * 4},
                 {avg.data(), HVD_FLOAT32, HVD_AVERAGE, count * 4},
                 {d.data(), HVD_FLOAT64, HVD_SUM, count * 8},
                 {x.data(), HVD_INT32, HVD_MAX, count * 4}};
      for (const auto& o : ops) {
        const std::string name = "checksum." + std::to_string(k++);
        const int h = hvd_allreduce_async(name.c_str(), o.data, o.data, count, o.type, o.op, 1.0, 1.0);
        if (h < 0 || hvd_wait(h) != HVD_SUCCESS) {
          std::printf("rank %d: %s failed: %s\n", rank, name.c_str(), hvd_error_text());
          return 1;
        }
        mix(o.data, o.bytes);
      }
    }
    // Allgathers with a different number of rows on every rank (none on rank 1), of several widths.
    for (int64_t width : {int64_t{1}, int64_t{3}, int64_t{40000}}) {
      const int64_t rows = rank == 1 ? 0 : rank + 2;
      std::vector<float> in(static_cast<size_t>(rows * width));
      for (size_t i = 0; i < in.size(); ++i) in[i] = static_cast<float>(rank * 1000 + i % 977);
      const std::string name = "checksum.gather." + std::to_string(width);
      const int h = hvd_allgather_async(name.c_str(), in.data(), static_cast<size_t>(rows),
                                        static_cast<size_t>(width), HVD_FLOAT32);
      const void* out = nullptr;
      size_t out_rows = 0;
      if (h < 0 || hvd_wait(h) != HVD_SUCCESS || hvd_result(h, &out, &out_rows) != HVD_SUCCESS) {
        std::printf("rank %d: %s failed: %s\n", rank, name.c_str(), hvd_error_text());
        return 1;
      }
      mix(out, out_rows * static_cast<size_t>(width) * sizeof(float));
      hvd_release(h);
    }
    std::printf("rank %d checksum %016llx\n", rank, static_cast<unsigned long long>(hash));
    hvd_shutdown();
    return 0;
  }
  if (placement) {
    const pid_t background = threadNamed("hvd-background");
    const bool moves = two.size() == 2 && background != 0;
    if (!moves) {
      std::printf("placement skipped: %s\n",
                  two.size() < 2 ? "fewer than two CPUs" : "no thread named hvd-background");
    }
    // Two allreduces submitted together and waited for: the caller does not run them itself (it would a lone
    // one), the background thread does.
    const auto pair = [&](const char* a, const char* b) {
      int h[2];
      float w[2][256] = {};
      for (int i = 0; i < 2; ++i) {
        h[i] = hvd_allreduce_async(i == 0 ? a : b, w[i], w[i], 256, HVD_FLOAT32, HVD_SUM, 1.0, 1.0);
        if (h[i] < 0) return false;
      }
      return hvd_wait(h[0]) == HVD_SUCCESS && hvd_wait(h[1]) == HVD_SUCCESS;
    };
    // Rank 0's background thread runs a pair on the first CPU, where it records its CPU, while the main
    // thread waits there too (bound to it, so that it cannot move anywhere meanwhile).
    if (moves && rank == 0 && (!hvd::test::setCpus({two[0]}, background) || !hvd::test::pinTo(two[0])))
      return 1;
    if (!pair("placement.warm_a", "placement.warm_b")) return 1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // longer than the moves' pacing
    if (moves && rank == 0 && (!hvd::test::pinTo(two[1]) || !hvd::test::setCpus(two))) return 1;
    // Rank 1 comes late, so that rank 0 surely waits while both of its operations are in flight.
    if (rank == 1) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    if (!pair("placement.a", "placement.b")) return 1;
    if (moves && rank == 0) std::printf("rank 0 placement background %d main %d\n", two[0], ::sched_getcpu());
    std::fflush(stdout);
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "sigpipe") == 0) {
    if (allreduceOnce("sigpipe", v, 16) != HVD_SUCCESS) return 1;
    const std::string self = std::to_string(::getpid());
    int threads = 0, blocked = 0;
    DIR* dir = ::opendir("/proc/self/task");
    while (const dirent* e = ::readdir(dir)) {
      const std::string tid = e->d_name;
      if (tid == "." || tid == ".." || tid == self) continue;
      // A thread that ended between the listing and the read holds no mask: it is not counted.
      const auto blocks = blocksSigpipe(tid);
      if (!blocks) continue;
      ++threads;
      blocked += *blocks ? 1 : 0;
      if (!*blocks) {  // which thread, for the failure message (its status again: name, state, masks)
        std::ifstream status("/proc/self/task/" + tid + "/status");
        std::string line, about;
        while (std::getline(status, line)) {
          if (line.rfind("Name:", 0) == 0 || line.rfind("State:", 0) == 0 || line.rfind("SigBlk:", 0) == 0)
            about += " " + line;
        }
        std::printf("rank %d thread %s does not block SIGPIPE:%s\n", rank, tid.c_str(),
                    about.empty() ? " (it has ended since)" : about.c_str());
      }
    }
    ::closedir(dir);
    struct sigaction action {};
    ::sigaction(SIGPIPE, nullptr, &action);
    std::printf("rank %d sigpipe main %d threads %d blocked %d disposition %s\n", rank,
                blocksSigpipe(self).value_or(false) ? 1 : 0,
                threads, blocked, action.sa_handler == SIG_DFL ? "default" : "changed");
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "forever") == 0) {
    std::vector<float> data(1u << 16, 1.0f);
    std::printf("rank %d: running\n", rank);
    std::fflush(stdout);
    for (;;) {
      if (allreduceOnce("forever", data.data(), data.size()) != HVD_SUCCESS) return 1;
    }
  }
  if (std::strcmp(scenario, "timeline") == 0) {
    for (int step = 0; step < 3; ++step) {
      allreduceOnce("grad_a", v, 16);
      allreduceOnce("grad_b", v, 4);
    }
    hvd_shutdown();
    return 0;
  }
  if (std::strcmp(scenario, "process_sets") == 0) {
    try {
      hvd::ProcessSet evens = hvd::ProcessSet::add({2, 0});
      const std::vector<int> ranks = evens.ranks();
      if (evens.id() != 1 || ranks != std::vector<int>{0, 2} || evens.size() != 2) throw std::runtime_error("set ids");
      if (evens.includes()) {
        float x[3] = {float(rank), float(rank), float(rank)};
        hvd::allreduce<float>(std::span<float>(x, 3), hvd::ReduceOp::kSum, "x", evens);
        int32_t b = rank;
        hvd::broadcast<int32_t>(std::span<int32_t>(&b, 1), 2, "b", evens);
        const int32_t mine[2] = {rank, rank};
        const auto all = hvd::allgather<int32_t>(std::span<const int32_t>(mine, rank == 0 ? 1 : 2), 1, "g", evens);
        if (x[0] != 2.0f || b != 2 || all != std::vector<int32_t>{0, 2, 2} || evens.rank() != rank / 2) {
          throw std::runtime_error("results on the set");
        }
        hvd::barrier(evens);
      } else if (evens.rank() != -1) {
        throw std::runtime_error("non-member has a set rank");
      }
      // A group of three allreduces on the global set, through the C API.
      float g[3][4];
      hvd_request group[3];
      int handles[3];
      const char* names[3] = {"g0", "g1", "g2"};
      for (int i = 0; i < 3; ++i) {
        for (float& v : g[i]) v = float(i);
        group[i] = hvd_request(HVD_REQUEST_INIT);
        group[i].name = names[i];
        group[i].input = group[i].output = g[i];
        group[i].rows = 4;
        group[i].reduce_op = HVD_SUM;
      }
      hvd::check(hvd_enqueue_group(group, 3, handles));
      for (int h : handles) hvd::check(hvd_wait(h));
      for (int i = 0; i < 3; ++i) {
        if (g[i][3] != 3.0f * i) throw std::runtime_error("group results");
      }
      evens.remove();
      int dummy = 0;
      if (hvd_process_set_rank(1, &dummy) != HVD_ERR_INVALID_ARGUMENT) throw std::runtime_error("removed set");
      std::printf("process_sets ok\n");
    } catch (const std::exception& e) {
      std::printf("process_sets failed on rank %d: %s\n", rank, e.what());
    }
    hvd_shutdown();
    return 0;
  }
  std::fprintf(stderr, "unknown scenario '%s'\n", scenario);
  return 2;
}

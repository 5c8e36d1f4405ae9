"""torch.distributed (gloo) allreduce peer for bench/compare, started by torchrun.

Usage: torchrun ... torch_allreduce.py BYTES:ITERS[,...] [FUSION_REPS]
Same method and JSON lines as mpi_allreduce.c: float32 sum in place, per-iteration times,
maximum over ranks, statistics on rank 0, warm-up 10 % (at least 3). FUSION_REPS > 0 adds
100 x 4 KiB one by one, all async_op then wait, and manual fusion (cat, allreduce, copy back).
"""
import json
import sys
import time

import torch
import torch.distributed as dist


def report(op, nbytes, times):
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    if dist.get_rank() != 0:
        return
    s = sorted(t.tolist())
    n = len(s)
    print(json.dumps({"op": op, "bytes": nbytes, "iters": n, "median_us": s[n // 2] * 1e6,
                      "min_us": s[0] * 1e6, "p90_us": s[n * 9 // 10] * 1e6,
                      "mean_us": sum(s) / n * 1e6}), flush=True)


def timed(fn, iters, warm):
    for _ in range(warm):
        fn()
    times = []
    for _ in range(iters):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return times


def main():
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    for tok in sys.argv[1].split(","):
        nbytes, iters = (int(x) for x in tok.split(":"))
        buf = torch.full((nbytes // 4,), float(rank + 1), dtype=torch.float32)
        dist.all_reduce(buf)
        want = size * (size + 1) / 2
        if not torch.all(buf == want):
            sys.exit(f"rank {rank}: allreduce result {buf[0].item()}, want {want}")
        buf.zero_()
        report("allreduce", nbytes, timed(lambda: dist.all_reduce(buf), iters, max(3, iters // 10)))
    reps = int(sys.argv[2]) if len(sys.argv) > 2 else 0
    if reps > 0:
        tensors = [torch.zeros(1024, dtype=torch.float32) for _ in range(100)]

        def one_by_one():
            for x in tensors:
                dist.all_reduce(x)

        def async_then_wait():
            for w in [dist.all_reduce(x, async_op=True) for x in tensors]:
                w.wait()

        def manual_cat():
            flat = torch.cat(tensors)
            dist.all_reduce(flat)
            for x, y in zip(tensors, flat.split(1024)):
                x.copy_(y)

        for op, fn in (("fusion_one_by_one", one_by_one), ("fusion_async", async_then_wait),
                       ("fusion_manual_cat", manual_cat)):
            report(op, 100 * 4096, timed(fn, reps, 3))
    dist.barrier()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

"""Training and small-op latency worker for bench/compare's `train` section (np=2 on one host).

    hvdrun -np 2 -H localhost:2 /usr/bin/python3 train_bench.py --framework hvd --model resnet18
    torchrun_py311.py --nproc_per_node 2 train_bench.py --framework ddp --model mlp
    horovodrun --gloo -np 2 -H localhost:2 /usr/bin/python3 train_bench.py --framework horovod --model mlp
    hvdrun -np 2 -H localhost:2 /usr/bin/python3 train_bench.py --framework hvd --bench latency

Frameworks: `hvd` (hvd.torch's DistributedOptimizer on libhvd), `horovod` (horovod.torch's, real
Horovod: put it on PYTHONPATH) and `ddp` (torch.nn.parallel.DistributedDataParallel over the gloo
backend, started by torchrun). Every rank runs torch.set_num_threads(1).

--bench train: the same model, initial weights (seed 0) and synthetic data (seed 1 + rank, a fixed
set of batches cycled) in every framework; SGD (lr 0.01, momentum 0.9), cross-entropy loss.
  resnet18: torchvision's ResNet-18 (random weights), 10 classes, 3 x S x S images (--image, 64).
  mlp:      --layers Linear(W, W)+ReLU layers (default 4 x 2048), then Linear(W, 10); its 16.8 M
            parameters make the step mostly gradient exchange (67 MB of float32 per step).
After --warmup steps, --steps timed steps. Per step each rank times the whole step (zero_grad,
forward, backward, the exchange, optimizer step); the slower rank's time counts (allreduce MAX).
  samples_per_s  global batch x timed steps / the slower rank's wall time of the timed loop.
  step_ms        median per-step time.
  comm_wait_ms   median per-step time spent waiting on communication, measured per framework:
    hvd, horovod: wall time of optimizer.synchronize(), called explicitly after backward() (then
                  step() inside optimizer.skip_synchronize()). The hooks have already started every
                  allreduce during backward(); synchronize() is the wait for those handles plus
                  writing the results into p.grad.
    ddp:          DDP waits for its buckets inside backward() (the reducer's finalisation), so the
                  wait is the backward time with communication minus the backward time without it:
                  after the timed steps the same batches run again under ddp.no_sync() (the reducer
                  skips the allreduce), and comm_wait_ms is the median over steps of the paired
                  difference backward(sync) - backward(no_sync).
  local_step_ms  (with --local) the same steps on a deep copy of the bare model with a plain SGD:
                 compute alone, no hooks or communication; the ceiling is global batch / this.
params_spread: max - min over ranks of a checksum of the parameters after the timed steps (0: in step).

--bench latency: --count (100) tensors of --elems (1024) float32 (4 KiB each), every one submitted
with allreduce_async_ (named, Sum), then each handle synchronized, in that order; --reps batches
after 5 warm-up batches; per batch the slower rank's time. Also the submit part alone.

--device cuda (train only): the model and batches on the rank's GPU (local rank % device count, so ranks
share a GPU when there are fewer); hvd and horovod stage gradients through host memory, DDP runs its gloo
buckets on the CUDA tensors (device_ids given). The timed loop ends each step with torch.cuda.synchronize(),
so samples_per_s counts finished steps; step_ms and comm_wait_ms are then host-side times.

Each rank 0 prints one JSON line: {"bench", "framework", "model", "device", ...figures}.
"""
import argparse
import copy
import json
import os
import statistics
import sys
import time

import torch
import torch.nn.functional as F

NUM_CLASSES = 10


def parse():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--framework", choices=("hvd", "horovod", "ddp"), required=True)
    ap.add_argument("--bench", choices=("train", "latency"), default="train")
    ap.add_argument("--model", choices=("resnet18", "mlp"), default="resnet18")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--batch", type=int, help="per-rank batch (resnet18 16, mlp 2)")
    ap.add_argument("--image", type=int, default=64, help="resnet18 image side")
    ap.add_argument("--width", type=int, default=2048, help="mlp layer width")
    ap.add_argument("--layers", type=int, default=4, help="mlp hidden layers")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--local", action="store_true", help="also time the steps on a bare copy (compute only)")
    ap.add_argument("--count", type=int, default=100, help="latency: tensors per batch")
    ap.add_argument("--elems", type=int, default=1024, help="latency: float32 elements per tensor")
    ap.add_argument("--reps", type=int, default=50, help="latency: timed batches")
    ap.add_argument("--profile", help="latency: cProfile rank 0's timed batches into this file (pstats)")
    return ap.parse_args()


# ----------------------------------------------------------------------------------------------
# Frameworks: the same few operations over hvd.torch / horovod.torch and torch.distributed.


class HorovodLike:
    """hvd.torch or horovod.torch (the same API)."""

    def __init__(self, name):
        if name == "hvd":
            import hvd.torch as h
        else:
            import horovod.torch as h
        self.h = h
        h.init()
        self.rank, self.size, self.local_rank = h.rank(), h.size(), h.local_rank()
        self.module = os.path.dirname(h.__file__)

    def max_each(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return self.h.allreduce(t, op=self.h.Max, name="bench.max").tolist()

    def min_each(self, values):
        t = torch.tensor(values, dtype=torch.float64)
        return self.h.allreduce(t, op=self.h.Min, name="bench.min").tolist()

    def wrap(self, model, opt):
        self.h.broadcast_parameters(model.state_dict(), root_rank=0)
        return model, self.h.DistributedOptimizer(opt, named_parameters=model.named_parameters())

    def train_step(self, model, opt, x, y):
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        t1 = time.perf_counter()
        opt.synchronize()
        t2 = time.perf_counter()
        with opt.skip_synchronize():
            opt.step()
        t3 = time.perf_counter()
        return loss, t3 - t0, t2 - t1

    def latency_batch(self, tensors, names):
        h = self.h
        t0 = time.perf_counter()
        handles = [h.allreduce_async_(t, name=n, op=h.Sum) for t, n in zip(tensors, names)]
        t1 = time.perf_counter()
        for hd in handles:
            h.synchronize(hd)
        return time.perf_counter() - t0, t1 - t0

    def finish(self):
        self.h.shutdown()


class DDP:
    def __init__(self):
        import torch.distributed as dist
        self.dist = dist
        dist.init_process_group("gloo")
        self.rank, self.size = dist.get_rank(), dist.get_world_size()
        self.local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        self.module = os.path.dirname(dist.__file__)
        self.nosync_backward = []

    def _reduce(self, values, op):
        t = torch.tensor(values, dtype=torch.float64)
        self.dist.all_reduce(t, op=op)
        return t.tolist()

    def max_each(self, values):
        return self._reduce(values, self.dist.ReduceOp.MAX)

    def min_each(self, values):
        return self._reduce(values, self.dist.ReduceOp.MIN)

    def wrap(self, model, opt):
        from torch.nn.parallel import DistributedDataParallel
        on_gpu = next(model.parameters()).is_cuda
        return DistributedDataParallel(model, device_ids=[torch.cuda.current_device()] if on_gpu else None), opt

    def train_step(self, model, opt, x, y, sync=True):
        t0 = time.perf_counter()
        opt.zero_grad()
        if sync:
            loss = F.cross_entropy(model(x), y)
            tb = time.perf_counter()
            loss.backward()
        else:
            with model.no_sync():
                loss = F.cross_entropy(model(x), y)
                tb = time.perf_counter()
                loss.backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        return loss, t2 - t0, t1 - tb

    def finish(self):
        self.dist.barrier()
        self.dist.destroy_process_group()


# ----------------------------------------------------------------------------------------------
# Models and data


def make_model(args):
    torch.manual_seed(0)
    if args.model == "resnet18":
        from torchvision.models import resnet18
        return resnet18(num_classes=NUM_CLASSES)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.width, args.width), torch.nn.ReLU()]
    layers.append(torch.nn.Linear(args.width, NUM_CLASSES))
    return torch.nn.Sequential(*layers)


def make_batches(args, rank, n=4):
    g = torch.Generator().manual_seed(1 + rank)
    shape = (args.batch, 3, args.image, args.image) if args.model == "resnet18" else (args.batch, args.width)
    return [(torch.randn(shape, generator=g).to(args.dev),
             torch.randint(0, NUM_CLASSES, (args.batch,), generator=g).to(args.dev)) for _ in range(n)]


def finish_step(args):
    """Waits for the GPU's queued work, so that a timed step is a finished one."""
    if args.dev.type == "cuda":
        torch.cuda.synchronize()


def checksum(model):
    with torch.no_grad():
        return float(sum(p.double().sum() for p in model.parameters()))


# ----------------------------------------------------------------------------------------------


def bench_train(fw, args):
    model = make_model(args).to(args.dev)
    bare = copy.deepcopy(model) if args.local else None
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    model, opt = fw.wrap(model, opt)
    batches = make_batches(args, fw.rank)
    model.train()

    for i in range(args.warmup):
        x, y = batches[i % len(batches)]
        fw.train_step(model, opt, x, y)
    finish_step(args)
    step_t, wait_t = [], []
    fw.max_each([0.0])  # both ranks start the timed loop together
    start = time.perf_counter()
    for i in range(args.steps):
        x, y = batches[i % len(batches)]
        loss, step_s, wait_s = fw.train_step(model, opt, x, y)
        finish_step(args)
        step_t.append(step_s)
        wait_t.append(wait_s)
    elapsed = time.perf_counter() - start
    last_loss = float(loss)

    out = {"steps": args.steps, "warmup": args.warmup, "batch_per_rank": args.batch, "ranks": fw.size}
    c = checksum(model.module if isinstance(fw, DDP) else model)
    out["params_spread"] = fw.max_each([c])[0] - fw.min_each([c])[0]  # 0: every rank has the same parameters
    if isinstance(fw, DDP):
        # The same batches again without the allreduce: backward(sync) - backward(no_sync), paired by step.
        local_b = []
        for i in range(args.steps):
            x, y = batches[i % len(batches)]
            local_b.append(fw.train_step(model, opt, x, y, sync=False)[2])
        bwd = fw.max_each(wait_t)
        nosync = fw.max_each(local_b)
        wait_ms = statistics.median((a - b) * 1e3 for a, b in zip(bwd, nosync))
        out.update(backward_ms=statistics.median(bwd) * 1e3, backward_nosync_ms=statistics.median(nosync) * 1e3)
    else:
        wait_ms = statistics.median(fw.max_each(wait_t)) * 1e3
    steps = fw.max_each(step_t)
    elapsed = fw.max_each([elapsed])[0]
    out.update(samples_per_s=args.batch * fw.size * args.steps / elapsed, step_ms=statistics.median(steps) * 1e3,
               step_min_ms=min(steps) * 1e3, comm_wait_ms=wait_ms, loss=last_loss)

    if bare is not None:
        bopt = torch.optim.SGD(bare.parameters(), lr=0.01, momentum=0.9)
        local_t = []
        for i in range(args.warmup + args.steps):
            x, y = batches[i % len(batches)]
            t0 = time.perf_counter()
            bopt.zero_grad()
            F.cross_entropy(bare(x), y).backward()
            bopt.step()
            finish_step(args)
            if i >= args.warmup:
                local_t.append(time.perf_counter() - t0)
        out["local_step_ms"] = statistics.median(fw.max_each(local_t)) * 1e3

    return out


def bench_latency(fw, args):
    if isinstance(fw, DDP):
        sys.exit("--bench latency is for hvd and horovod (torch.distributed's figure is in the allreduce section)")
    tensors = [torch.full((args.elems,), float(fw.rank + 1)) for _ in range(args.count)]
    names = [f"lat.{i}" for i in range(args.count)]
    fw.latency_batch(tensors, names)
    want = float(fw.size * (fw.size + 1) // 2)
    if not all(bool((t == want).all()) for t in tensors):
        sys.exit(f"rank {fw.rank}: allreduce result {tensors[0][0].item()}, want {want}")
    for t in tensors:
        t.zero_()  # zeros stay zero while timing
    for _ in range(5):
        fw.latency_batch(tensors, names)
    prof = None
    if args.profile and fw.rank == 0:
        import cProfile
        prof = cProfile.Profile()
    total, submit = [], []
    for _ in range(args.reps):
        if prof:
            prof.enable()
        t, s = fw.latency_batch(tensors, names)
        if prof:
            prof.disable()
        total.append(t)
        submit.append(s)
    if prof:
        prof.dump_stats(args.profile)
    total, submit = fw.max_each(total), fw.max_each(submit)
    s = sorted(total)
    n = len(s)
    return {"count": args.count, "bytes": args.elems * 4, "reps": n, "median_us": s[n // 2] * 1e6,
            "min_us": s[0] * 1e6, "p90_us": s[n * 9 // 10] * 1e6, "mean_us": sum(s) / n * 1e6,
            "submit_median_us": statistics.median(submit) * 1e6}


def main():
    args = parse()
    torch.set_num_threads(1)
    if args.batch is None:
        args.batch = 16 if args.model == "resnet18" else 2
    fw = DDP() if args.framework == "ddp" else HorovodLike(args.framework)
    args.dev = torch.device("cpu")
    if args.device == "cuda":
        if args.bench != "train":
            sys.exit("--device cuda is for --bench train")
        if not torch.cuda.is_available():
            sys.exit("--device cuda: torch sees no CUDA device")
        args.dev = torch.device("cuda", fw.local_rank % torch.cuda.device_count())
        torch.cuda.set_device(args.dev)
    if args.bench == "train":
        out = bench_train(fw, args)
        head = {"bench": "train", "framework": args.framework, "model": args.model, "device": args.device}
    else:
        out = bench_latency(fw, args)
        head = {"bench": "latency", "framework": args.framework}
    if fw.rank == 0:
        head["module"] = fw.module
        print(json.dumps({**head, **out}), flush=True)
    fw.finish()


if __name__ == "__main__":
    main()

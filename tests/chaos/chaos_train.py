r"""The chaos soak's training job: elastic PyTorch training (hvd.torch, TorchState, hvd.elastic.run) whose
result does not depend on how many ranks take part, so that a run with faults can be compared bit for bit
with a replay without them.

    hvdrun -np 4 --min-np 2 --max-np 4 -H h1:2,h2:1,h3:1 /usr/bin/python3 chaos_train.py --steps 200 \
        --out params.bin --gate DIR

Why the result is independent of the membership: step s trains on the global batch of samples
s*B .. s*B+B-1 (modulo the data set). Rank r of n computes the gradient of each sample j with j % n == r on
its own (one sample at a time: the same operations on the same values on any rank), the ranks allgather
those per-sample gradients (a copy, exact), and every rank adds them in sample order, divides by B and takes
an SGD step with momentum. Each step therefore computes the same floating-point operations in the same order
whatever n is, and a step redone after a rollback computes what it computed the first time. Allreduce would
sum in an order that depends on n.

The state (model, optimizer, step) is committed every --commit-every steps. With --stop-file the job stops at
the first commit after that file appears (rank 0 looks and tells the others), or after --steps. After the last
step the job waits, committing every 0.2 s (a commit takes in processes that wait on standby), until it has
--size ranks again, up to --full-timeout seconds, so that it ends with the membership it started with.

Output (rank 0, flushed at once; t is time.time()):
  rendezvous ADDR PORT                          once, at the start (the hvdrun rendezvous server)
  start: step S size N round R t T              each time the training function is entered (after sync)
  step S size N round R t T                     after each completed step (S counts from 1)
  gate: step S size N t T                       at the end, at full size, when every rank waits at the gate
  final: steps S sha256 H                       the parameters' hash (float32 bytes in model order)
With --gate DIR every rank writes DIR/rank<R> at the end and waits for DIR/go (up to --gate-timeout s) before
it returns, so that a test can look at hvdrun and the hosts while the whole job is still up. With --out
PATH rank 0 writes the parameters' bytes there.
"""

import argparse
import hashlib
import os
import sys
import time

import torch

import hvd.torch as hvd
from hvd.common.elastic import elastic_round


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=100, help="train this many steps at most")
    p.add_argument("--stop-file", default=None, help="stop at the first commit after this file appears")
    p.add_argument("--batch", type=int, default=8, help="global batch (samples per step, whatever the size)")
    p.add_argument("--samples", type=int, default=512)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--commit-every", type=int, default=4)
    p.add_argument("--step-seconds", type=float, default=0.0, help="sleep after each step")
    p.add_argument("--size", type=int, default=0, help="end at this many ranks (0: no wait)")
    p.add_argument("--full-timeout", type=float, default=120.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--out", default=None)
    p.add_argument("--gate", default=None)
    p.add_argument("--gate-timeout", type=float, default=120.0)
    return p.parse_args()


def say(*words):
    if hvd.rank() == 0:
        print(*words, flush=True)


def main():
    args = parse_args()
    torch.set_num_threads(1)
    gen = torch.Generator().manual_seed(args.seed)
    x = torch.randn(args.samples, args.features, generator=gen)
    w_true = torch.randn(args.features, 1, generator=gen)
    y = torch.tanh(x @ w_true)
    model = torch.nn.Sequential(torch.nn.Linear(args.features, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
    with torch.no_grad():  # the same start on every rank, without a broadcast
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    params = list(model.parameters())
    optimizer = torch.optim.SGD(params, lr=0.05, momentum=0.9)

    hvd.init()
    say("rendezvous", os.environ.get("HOROVOD_GLOO_RENDEZVOUS_ADDR", "-"),
        os.environ.get("HOROVOD_GLOO_RENDEZVOUS_PORT", "-"))
    state = hvd.elastic.TorchState(model, optimizer, step=0)

    def stop_requested():
        # Rank 0 decides for everyone, so that every rank leaves the loop at the same commit.
        flag = torch.tensor([int(hvd.rank() == 0 and os.path.exists(args.stop_file))])
        return bool(hvd.broadcast(flag, 0, name="chaos.stop").item())

    def sample_gradient(j):
        model.zero_grad(set_to_none=False)
        torch.nn.functional.mse_loss(model(x[j:j + 1]), y[j:j + 1]).backward()
        return torch.cat([p.grad.reshape(-1) for p in params])

    @hvd.elastic.run
    def train(state):
        n, r = hvd.size(), hvd.rank()
        say(f"start: step {state.step} size {n} round {elastic_round()} t {time.time():.6f}")
        while state.step < args.steps:
            base = state.step * args.batch
            mine = [j for j in range(args.batch) if j % n == r]
            local = torch.stack([sample_gradient((base + j) % args.samples) for j in mine]) if mine else \
                torch.zeros(0, sum(p.numel() for p in params))
            rows = hvd.allgather(local, name="chaos.grads")
            # Row k of rank q's block is sample q + k*n: put them back in sample order and add in that order.
            order, start = {}, 0
            for q in range(n):
                count = len(range(q, args.batch, n))
                for k in range(count):
                    order[q + k * n] = start + k
                start += count
            total = torch.zeros(rows.shape[1])
            for j in range(args.batch):
                total += rows[order[j]]
            total /= args.batch
            offset = 0
            for p in params:
                p.grad.copy_(total[offset:offset + p.numel()].view_as(p))
                offset += p.numel()
            optimizer.step()
            state.step += 1
            say(f"step {state.step} size {n} round {elastic_round()} t {time.time():.6f}")
            if args.step_seconds:
                time.sleep(args.step_seconds)
            if state.step % args.commit_every == 0:
                state.commit()
                if args.stop_file and stop_requested():
                    break
        state.commit()
        deadline = time.monotonic() + args.full_timeout
        while hvd.size() < args.size:
            if time.monotonic() > deadline:
                raise SystemExit(f"chaos_train: the job did not get back to {args.size} ranks within "
                                 f"{args.full_timeout} s after its last step (it has {hvd.size()})")
            time.sleep(0.2)
            state.commit()  # raises HostsUpdatedInterrupt when a standby process is to be taken in

    train(state)
    flat = torch.cat([p.detach().reshape(-1) for p in params]).numpy().tobytes()
    digest = hashlib.sha256(flat).hexdigest()
    if args.gate:
        with open(os.path.join(args.gate, f"rank{hvd.rank()}"), "w") as f:
            f.write(digest)
        hvd.barrier()
        say(f"gate: step {state.step} size {hvd.size()} t {time.time():.6f}")
        go = os.path.join(args.gate, "go")
        deadline = time.monotonic() + args.gate_timeout
        while not os.path.exists(go):
            if time.monotonic() > deadline:
                raise SystemExit(f"chaos_train: {go} did not appear within {args.gate_timeout} s")
            time.sleep(0.05)
    if hvd.rank() == 0 and args.out:
        with open(args.out, "wb") as f:
            f.write(flat)
    say(f"final: steps {state.step} sha256 {digest}")
    hvd.shutdown()


if __name__ == "__main__":
    sys.exit(main())

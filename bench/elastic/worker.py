"""An elastic training loop on Horovod's API (import horovod.torch), for bench/elastic/recovery.py: the same
script runs under real Horovod (horovodrun) and under hvdrun (--horovod-compat makes `horovod` hvd's).

Every rank prints one JSON line per event: {"event": "step"|"reset", "t": time.time(), "step", "size",
"rank", "pid", "host"}. A step is a forward/backward/optimizer step of a small model, an allreduce of its
gradients, and a commit; --step-seconds sleeps after each step.
"""

import argparse
import json
import os
import time

import torch

import horovod.torch as hvd


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=100000)
    parser.add_argument("--step-seconds", type=float, default=0.02)
    args = parser.parse_args()
    hvd.init()
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 16)
    optimizer = hvd.DistributedOptimizer(torch.optim.SGD(model.parameters(), lr=0.01),
                                         named_parameters=model.named_parameters())
    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, step=0)

    def event(name, **extra):
        print(json.dumps({"event": name, "t": time.time(), "size": hvd.size(), "rank": hvd.rank(),
                          "pid": os.getpid(), "host": os.environ.get("HOROVOD_HOSTNAME", ""), **extra}), flush=True)

    state.register_reset_callbacks([lambda: event("reset")])
    x = torch.randn(64, 256)

    @hvd.elastic.run
    def train(state):
        while state.step < args.steps:
            optimizer.zero_grad()
            model(x).pow(2).mean().backward()
            optimizer.step()
            state.step += 1
            event("step", step=state.step)
            state.commit()
            if args.step_seconds > 0:
                time.sleep(args.step_seconds)

    train(state)


if __name__ == "__main__":
    main()

r"""Elastic data-parallel training with hvd.torch (Horovod's elastic API) on generated data.

    hvdrun -np 2 --min-np 1 --max-np 4 --host-discovery-script ./hosts.sh \
        /usr/bin/python3 examples/python/elastic_torch_train.py [--epochs 4]
    hvdrun -np 2 -H localhost:2 /usr/bin/python3 examples/python/elastic_torch_train.py   # a static job

A small MLP learns a synthetic regression (the same data set on every rank). The training function runs
under hvd.elastic.run with a TorchState holding the model, the DistributedOptimizer, an ElasticSampler
and the epoch and batch counters; it commits every --batches-per-commit batches and at the end of each
epoch. When a worker fails, the others go back to the last commit and continue with the ranks left;
when hosts are added or removed, every worker re-forms the job at its next commit. The learning rate is
scaled by the number of ranks, again after every reset.

Output: one line per event, parseable with the regular expressions below. hvdrun prefixes each line with
"[<N>]<stdout>:", where N is the rank in a static job and the worker's number in an elastic one (the
first workers are numbered by their first rank, later ones count on); a worker's rank may change at
each reset, so every line names the rank it was printed at. Floats are printed with repr(), exactly.

  start: rank 0 size N round R epoch E batch B
      rank 0, each time the training function is entered (after the state was synchronized): at the
      start, and after every reset. R is the job's rendezvous round (-1 in a static job).
  reset: rank K size N round R
      every rank, after each re-initialization (from the reset callback, before the state is synchronized).
  epoch E: loss L size N
      rank 0, at the end of each epoch (E counts from 1): the mean training loss over all ranks.
  final: size N round R epochs E loss L checksum C params P1,P2,...
      rank 0, once at the end: the final parameters in model order (every parameter flattened, float32
      values printed as repr() of Python floats, comma-separated), their sum C, and the last epoch's loss.
  rank K of N: parameters bit-identical to rank 0's       (or "... DIFFERENT from rank 0's")
      every rank, after the final line. The script exits 0 on every rank when every rank's parameters
      equal rank 0's bit for bit, else 1.

  START = r"start: rank 0 size (\d+) round (-?\d+) epoch (\d+) batch (\d+)"
  RESET = r"reset: rank (\d+) size (\d+) round (-?\d+)"
  EPOCH = r"epoch (\d+): loss (\S+) size (\d+)"
  FINAL = r"final: size (\d+) round (-?\d+) epochs (\d+) loss (\S+) checksum (\S+) params (\S+)"
  VERDICT = r"rank (\d+) of (\d+): parameters (bit-identical to|DIFFERENT from) rank 0's"

Failure injection, for tests: --crash-at RANK:EPOCH:BATCH makes the worker that has rank RANK exit with
status 13 (os._exit, no clean-up) right after the optimizer step of batch BATCH (counted from 0 within
the epoch) of epoch EPOCH (from 0). With --crash-marker PATH, the crash happens only if PATH does not
exist yet (the worker creates it first), so a job crashes once even when a restored state or a
replacement worker passes the same point again. --step-seconds S sleeps S seconds after each step, to
give a driver time to add or remove hosts while the job trains.

Checkpoints, for comparing an elastic run with an uninterrupted one: --save-commits DIR makes rank 0 write
the committed state (model, optimizer, sampler, epoch, batch, loss) to DIR/commit-e<EPOCH>-b<BATCH>.pt at
every commit; --resume FILE starts from such a file instead of from scratch (the learning rate is scaled
to this job's size, as after a reset).
"""

import math
import os
import sys
import time

import torch
from torch.utils.data import DataLoader

import hvd.torch as hvd
from hvd.common.elastic import elastic_round
from synthetic import compare_with_rank0, flat_parameters, make_data, train_step, training_parser

CRASH_STATUS = 13


def parse_args():
    parser = training_parser(__doc__.splitlines()[0], epochs=4, samples=1024, features=8, batch_size=16)
    parser.add_argument("--batches-per-commit", type=int, default=4)
    parser.add_argument("--step-seconds", type=float, default=0.0, help="sleep after each step")
    parser.add_argument("--crash-at", default=None, metavar="RANK:EPOCH:BATCH")
    parser.add_argument("--crash-marker", default=None, metavar="PATH")
    parser.add_argument("--save-commits", default=None, metavar="DIR")
    parser.add_argument("--resume", default=None, metavar="FILE")
    args = parser.parse_args()
    if args.epochs < 1 or args.samples < 1 or args.batch_size < 1 or args.batches_per_commit < 1:
        parser.error("--epochs, --samples, --batch-size and --batches-per-commit must be >= 1")
    if args.crash_at is not None:
        try:
            point = tuple(int(v) for v in args.crash_at.split(":"))
        except ValueError:
            point = ()
        if len(point) != 3:
            parser.error(f"--crash-at expects RANK:EPOCH:BATCH (three integers), got {args.crash_at!r}")
        args.crash_at = point
    return args


def maybe_crash(args, epoch, batch):
    if args.crash_at != (hvd.rank(), epoch, batch):
        return
    if args.crash_marker is not None:
        try:
            os.close(os.open(args.crash_marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return  # crashed once already
    print(f"crash: rank {hvd.rank()} epoch {epoch} batch {batch}", flush=True)
    os._exit(CRASH_STATUS)


def main():
    args = parse_args()
    hvd.init()
    torch.set_num_threads(1)  # one core per rank: the ranks of a host share its cores

    data = make_data(args.samples, args.features, args.seed)
    # Different random parameters on every rank: the first sync makes them rank 0's.
    torch.manual_seed(args.seed + hvd.rank())
    model = torch.nn.Sequential(torch.nn.Linear(args.features, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr * hvd.size(), momentum=0.9)
    optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters())
    sampler = hvd.elastic.ElasticSampler(data, shuffle=True, seed=args.seed)
    start = {"epoch": 0, "batch": 0, "loss": math.nan}
    if args.resume is not None:
        saved = torch.load(args.resume)
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        sampler.load_state_dict(saved["sampler"])
        start = {key: saved[key] for key in start}

    state = hvd.elastic.TorchState(model=model, optimizer=optimizer, sampler=sampler, **start)

    def commit():
        """state.commit(), with rank 0 writing the committed state to --save-commits first."""
        state.save()
        if args.save_commits is not None and hvd.rank() == 0:
            saved = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                     "sampler": sampler.state_dict(), "epoch": state.epoch, "batch": state.batch, "loss": state.loss}
            path = os.path.join(args.save_commits, f"commit-e{state.epoch}-b{state.batch}.pt")
            torch.save(saved, path + ".tmp")
            os.replace(path + ".tmp", path)
        state.check_host_updates()

    def on_reset():
        for group in optimizer.param_groups:
            group["lr"] = args.lr * hvd.size()
        print(f"reset: rank {hvd.rank()} size {hvd.size()} round {elastic_round()}", flush=True)

    state.register_reset_callbacks([on_reset])

    @hvd.elastic.run
    def train(state):
        if hvd.rank() == 0:
            print(f"start: rank 0 size {hvd.size()} round {elastic_round()} epoch {state.epoch} "
                  f"batch {state.batch}", flush=True)
        while state.epoch < args.epochs:
            # The sampler holds this rank's share of what is left of the epoch; the batches already done
            # (state.batch of them, committed) are not in it.
            loader = DataLoader(data, batch_size=args.batch_size, sampler=state.sampler)
            offset = state.batch
            total, count = 0.0, 0
            for idx, (x, y) in enumerate(loader):
                batch = offset + idx
                total += train_step(model, optimizer, x, y)
                count += 1
                maybe_crash(args, state.epoch, batch)
                if args.step_seconds > 0:
                    time.sleep(args.step_seconds)
                state.sampler.record_batch(idx, args.batch_size)
                state.batch = batch + 1  # batches done in this epoch
                if state.batch % args.batches_per_commit == 0:
                    commit()
            # The loss of the batches this call trained in this epoch (all of them unless a reset came
            # mid-epoch), averaged over the ranks.
            mean = total / count if count else 0.0
            state.loss = hvd.allreduce(torch.tensor(mean), name="epoch_loss").item()
            state.epoch += 1
            state.batch = 0
            state.sampler.set_epoch(state.epoch)
            if hvd.rank() == 0:
                print(f"epoch {state.epoch}: loss {state.loss!r} size {hvd.size()}", flush=True)
            commit()

    train(state)

    mine = flat_parameters(model)
    if hvd.rank() == 0:
        values = ",".join(repr(v) for v in mine.tolist())
        print(f"final: size {hvd.size()} round {elastic_round()} epochs {state.epoch} loss {state.loss!r} "
              f"checksum {mine.double().sum().item()!r} params {values}", flush=True)
    # Bit-identical parameters: compare the bits (as int32) with rank 0's, and count the ranks that differ.
    differs, differing = compare_with_rank0(mine)
    verdict = "bit-identical to" if not differs else "DIFFERENT from"
    print(f"rank {hvd.rank()} of {hvd.size()}: parameters {verdict} rank 0's", flush=True)
    return 0 if differing == 0 else 1


if __name__ == "__main__":
    sys.exit(main())

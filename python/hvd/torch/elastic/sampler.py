"""ElasticSampler: partitions a data set over the ranks and re-partitions what is left of the epoch when
the job re-forms (Horovod's horovod.torch.elastic.sampler)."""

import math
import operator
import random

import torch.utils.data

from hvd.torch.mpi_ops import rank, size


def _check_int(what, value, minimum=None):
    """value as an int (anything with __index__: int, NumPy and torch integers), not a bool, >= minimum."""
    try:
        number = None if isinstance(value, bool) else operator.index(value)
    except TypeError:
        number = None
    if number is None or (minimum is not None and number < minimum):
        bound = "" if minimum is None else f" >= {minimum}"
        raise ValueError(f"{what} must be an int{bound}, got {value!r}")
    return number


class ElasticSampler(torch.utils.data.Sampler):
    """Gives each rank its share of the samples of an epoch not processed yet, like DistributedSampler,
    and re-partitions them among the new ranks after a reset.

    Use it so:
      1. put it in the TorchState (it is then saved, restored, synchronized and re-partitioned with it);
      2. call record_batch(batch_idx, batch_size) after each batch;
      3. call set_epoch(epoch + 1) at the end of each epoch (not at its start: a partly processed epoch
         would then be processed again from its beginning).

    The order of an epoch is the same on every rank: range(len(dataset)), shuffled with
    random.Random(seed + epoch) when shuffle is True. Samples already processed in the epoch
    (processed_num, the first ones in that order) are dropped, the rest is padded by repeating it from its
    start to a multiple of the number of ranks, and rank r takes every size()-th sample from position r.
    After k batches of b samples on every one of n ranks, the samples processed are exactly the first
    k*b*n of the order, which is what record_batch counts; a re-partition therefore neither repeats nor
    skips a sample (only the padding of the epoch's last batch repeats some).

    dataset: anything with len() (assumed constant). seed: the same on every rank.
    """

    def __init__(self, dataset, shuffle=True, seed=0):
        try:
            len(dataset)
        except TypeError:
            raise ValueError(f"ElasticSampler: the dataset must have a length (len()), got a "
                             f"{type(dataset).__name__}") from None
        if not isinstance(shuffle, bool):
            raise ValueError(f"ElasticSampler: shuffle must be a bool, got {shuffle!r}")
        self.dataset = dataset
        self.shuffle = shuffle
        self.seed = _check_int("ElasticSampler: seed", seed)

        self.epoch = 0
        # Horovod's attribute, kept for scripts that read it; the state is processed_num.
        self.processed_indices = set()

        self.num_replicas = 0
        self.rank = 0
        self.remaining_indices = []
        self.num_samples = 0
        self.total_size = 0
        self.processed_num = 0

        self.reset()

    def set_epoch(self, epoch):
        """Starts epoch `epoch` (its own shuffle) with no sample processed. Call it at the end of an epoch."""
        self.epoch = _check_int("ElasticSampler.set_epoch(epoch)", epoch)
        self.processed_num = 0
        self.reset()

    def record_batch(self, batch_idx, batch_size):
        """Records that every rank processed one more batch of batch_size samples (batch_idx is not used:
        Horovod's signature). The count is what a re-partition skips."""
        batch_size = _check_int("ElasticSampler.record_batch(batch_size)", batch_size, minimum=0)
        self.processed_num += batch_size * self.num_replicas

    def load_state_dict(self, state_dict):
        """Sets the epoch and the count of processed samples, and re-partitions."""
        if not isinstance(state_dict, dict):
            raise ValueError(f"ElasticSampler.load_state_dict expects a dict with 'epoch' and 'processed_num', "
                             f"got {state_dict!r}")
        missing = [k for k in ("epoch", "processed_num") if k not in state_dict]
        if missing:
            raise ValueError(f"ElasticSampler.load_state_dict: {state_dict!r} lacks {', '.join(map(repr, missing))}")
        epoch = _check_int("ElasticSampler state 'epoch'", state_dict["epoch"])
        processed = _check_int("ElasticSampler state 'processed_num'", state_dict["processed_num"], minimum=0)
        self.epoch = epoch
        self.processed_num = processed
        self.reset()

    def state_dict(self):
        return dict(epoch=self.epoch, processed_num=self.processed_num)

    def reset(self):
        """Re-partitions the samples not processed yet in this epoch among the job's current ranks
        (reads hvd.size() and hvd.rank())."""
        self.num_replicas = size()
        self.rank = rank()

        order = list(range(len(self.dataset)))
        if self.shuffle:
            random.Random(self.seed + self.epoch).shuffle(order)
        self.remaining_indices = order[self.processed_num:]

        self.num_samples = int(math.ceil(len(self.remaining_indices) / self.num_replicas))
        self.total_size = self.num_samples * self.num_replicas

    def __iter__(self):
        indices = list(self.remaining_indices)
        # Pad to a multiple of the ranks by repeating from the start (several times over when fewer
        # samples are left than there are ranks).
        while indices and len(indices) < self.total_size:
            indices += indices[:self.total_size - len(indices)]
        self.indices = indices[self.rank:self.total_size:self.num_replicas]
        return iter(self.indices)

    def __len__(self):
        return self.num_samples

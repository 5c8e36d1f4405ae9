"""hvd.Executor, stateless: one function on every worker, results in rank order (RayExecutor's first pattern).

    PYTHONPATH=build/python /usr/bin/python3 examples/python/executor_run.py [--num-workers 4]

The executor starts its workers once (an hvdrun job on this machine); every run() reuses them. Each call here
initializes hvd (a no-op after the first) and sums the ranks with an allreduce.
"""

import argparse

import numpy as np

from hvd.executor import Executor


def simple_fn():
    import hvd.numpy as hvd

    hvd.init()
    total = hvd.allreduce(np.array([hvd.rank()]), op=hvd.Sum)
    print("hvd rank", hvd.rank(), "of", hvd.size(), flush=True)
    return hvd.rank(), int(total[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--num-workers", type=int, default=4)
    n = parser.parse_args().num_workers

    settings = Executor.create_settings(timeout_s=30)
    executor = Executor(settings, num_workers=n)
    executor.start()
    try:
        for _ in range(2):
            result = executor.run(simple_fn)
            assert [rank for rank, _ in result] == list(range(n)), result
            assert all(total == n * (n - 1) // 2 for _, total in result), result
    finally:
        executor.shutdown()
    print(f"{n} workers answered in rank order: {result}")


if __name__ == "__main__":
    main()

"""The `horovod` compatibility package (hvd/compat): Horovod scripts run unmodified on hvd.

HVD_HOROVOD_EXAMPLES, when set, names a directory holding Horovod's examples (a checkout's examples/ or
examples/pytorch/); Horovod's own pytorch_synthetic_benchmark.py then runs unmodified at np 2.
"""

import os
import subprocess
import textwrap
from pathlib import Path

import pytest
from conftest import HVDRUN, PACKAGE_DIR, PYTHON, Job, assert_ok

COMPAT_DIR = PACKAGE_DIR / "hvd" / "compat"
COMPAT_PATH = f"{COMPAT_DIR}{os.pathsep}{PACKAGE_DIR}"

# A Horovod-style training script: the imports and API calls of Horovod's PyTorch synthetic benchmark
# (DistributedOptimizer with named parameters and fp16 compression, both broadcast helpers, timeit steps),
# plus the module paths Horovod scripts import from.
HOROVOD_SCRIPT = """
import timeit

import numpy as np
import torch
import torch.backends.cudnn as cudnn
import torch.nn.functional as F
import torch.optim as optim
import torch.utils.data.distributed

import horovod
import horovod.torch as hvd
from horovod.common.exceptions import HorovodInternalError, HostsUpdatedInterrupt
from horovod.common.process_sets import ProcessSet, global_process_set
from horovod.torch.compression import Compression
from horovod.torch.mpi_ops import is_homogeneous
from horovod.torch.optimizer import DistributedOptimizer
from horovod.torch.functions import broadcast_object
from horovod.torch.sync_batch_norm import SyncBatchNorm
import hvd.torch as native

hvd.init()
torch.set_num_threads(1)
cudnn.benchmark = True

assert horovod.__version__ == "0.28.1" and callable(horovod.run)
assert hvd.allreduce is native.allreduce
assert hvd.DistributedOptimizer is DistributedOptimizer is native.DistributedOptimizer
assert global_process_set is native.global_process_set and ProcessSet is native.ProcessSet
assert issubclass(HorovodInternalError, RuntimeError) and issubclass(HostsUpdatedInterrupt, RuntimeError)
assert not hasattr(hvd, "is_homogeneous") and is_homogeneous() is True
assert hvd.gloo_enabled() and not hvd.mpi_enabled() and hvd.nccl_built() == 0
assert (hvd.Average, hvd.Sum, hvd.Adasum, hvd.Min, hvd.Max, hvd.Product) == (0, 1, 2, 3, 4, 5)
assert hvd.SyncBatchNorm is SyncBatchNorm and broadcast_object(hvd.rank(), root_rank=1) == 1
import horovod.torch.elastic
from horovod.common.elastic import ObjectState, State, run_fn
from horovod.torch.elastic.state import get_handler_registry
assert hvd.elastic is horovod.torch.elastic and hvd.elastic.__all__ == ["TorchState", "ElasticSampler", "run"]
assert hvd.elastic.run is native.elastic.run and hvd.elastic.TorchState is native.elastic.TorchState
assert issubclass(hvd.elastic.TorchState, ObjectState) and issubclass(ObjectState, State) and callable(run_fn)
assert get_handler_registry() is native.elastic.state.get_handler_registry()

model = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                            torch.nn.Flatten(), torch.nn.Linear(4, 10))
lr_scaler = hvd.size()
if hvd.nccl_built():
    lr_scaler = hvd.local_size()
optimizer = optim.SGD(model.parameters(), lr=0.01 * lr_scaler, momentum=0.9)
optimizer = hvd.DistributedOptimizer(optimizer, named_parameters=model.named_parameters(),
                                     compression=hvd.Compression.fp16, op=hvd.Average)
assert isinstance(optimizer, optim.SGD)
hvd.broadcast_parameters(model.state_dict(), root_rank=0)
hvd.broadcast_optimizer_state(optimizer, root_rank=0)

data = torch.randn(4, 3, 16, 16)  # different on every rank, as in the benchmark
target = torch.LongTensor(4).random_() % 10


def benchmark_step():
    optimizer.zero_grad()
    output = model(data)
    loss = F.cross_entropy(output, target)
    loss.backward()
    optimizer.step()


timeit.timeit(benchmark_step, number=1)
img_secs = [4 * 2 / timeit.timeit(benchmark_step, number=2) for _ in range(2)]
if hvd.rank() == 0:
    print("Img/sec per CPU: %.1f +-%.1f" % (np.mean(img_secs), 1.96 * np.std(img_secs)))

flat = torch.cat([p.detach().reshape(1, -1) for p in model.parameters()], dim=1)
gathered = hvd.allgather(flat, name="final")
assert all(torch.equal(gathered[0], row) for row in gathered), "parameters differ between ranks"
print("OK")
"""


def test_horovod_script_runs_unmodified(hvdrun):
    job = hvdrun(2, HOROVOD_SCRIPT, env={"PYTHONPATH": COMPAT_PATH}, timeout=180)
    assert_ok(job, 2)
    assert any(line.startswith("Img/sec per CPU: ") for line in job.rank_output(0)), job
    assert "hvd: `import horovod`" not in job.stderr, job  # no other Horovod here: no warning


def _horovod_examples():
    root = os.environ.get("HVD_HOROVOD_EXAMPLES")
    if not root:
        pytest.skip("HVD_HOROVOD_EXAMPLES is not set (a directory with Horovod's examples, e.g. a checkout's "
                    "examples/): Horovod's own scripts are not part of this repository")
    for candidate in (Path(root) / "pytorch", Path(root)):
        if (candidate / "pytorch_synthetic_benchmark.py").is_file():
            return candidate
    pytest.fail(f"HVD_HOROVOD_EXAMPLES={root}: no pytorch_synthetic_benchmark.py in it or in its pytorch/")


def test_horovod_synthetic_benchmark(tmp_path):
    examples = _horovod_examples()
    pytest.importorskip("torchvision", reason="Horovod's synthetic benchmark takes its models from torchvision")
    cmd = [str(HVDRUN), "-np", "2", "-H", "localhost:2", PYTHON, str(examples / "pytorch_synthetic_benchmark.py"),
           "--no-cuda", "--model", "resnet18", "--batch-size", "8", "--num-iters", "2",
           "--num-batches-per-iter", "2", "--num-warmup-batches", "1"]
    completed = subprocess.run(cmd, env=dict(os.environ, PYTHONPATH=COMPAT_PATH), capture_output=True, text=True,
                               timeout=300, cwd=tmp_path)
    job = Job(completed)
    assert job.returncode == 0, job
    out = job.rank_output(0)
    assert "Model: resnet18" in out and "Number of CPUs: 2" in out, job
    assert any(line.startswith("Total img/sec on 2 CPU(s): ") for line in out), job


def _python(code, pythonpath, cwd, env=None):
    full = dict(os.environ, PYTHONPATH=pythonpath)
    full.pop("HVD_HOROVOD_COMPAT", None)
    full.update(env or {})
    return subprocess.run([PYTHON, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True,
                          timeout=120, cwd=cwd)


def test_warns_once_when_a_real_horovod_is_on_the_path(tmp_path):
    installed = tmp_path / "site" / "horovod"
    installed.mkdir(parents=True)
    (installed / "__init__.py").write_text("raise SystemExit('the real horovod was imported')\n")
    code = "import horovod, horovod.common.exceptions; print(horovod.__version__)"

    shadowed = _python(code, f"{COMPAT_PATH}{os.pathsep}{installed.parent}", tmp_path)
    assert shadowed.returncode == 0 and shadowed.stdout == "0.28.1\n", shadowed
    ours = COMPAT_DIR / "horovod"
    assert shadowed.stderr == (f"hvd: `import horovod` uses hvd's compatibility layer ({ours}); the Horovod "
                               f"installed at {installed} is not used\n"), shadowed.stderr

    alone = _python(code, COMPAT_PATH, tmp_path)
    assert alone.returncode == 0 and alone.stdout == "0.28.1\n" and alone.stderr == "", alone

    # A bare directory named horovod (no __init__.py) is not an installation.
    bare = tmp_path / "data" / "horovod"
    bare.mkdir(parents=True)
    quiet = _python(code, f"{COMPAT_PATH}{os.pathsep}{bare.parent}", tmp_path)
    assert quiet.returncode == 0 and quiet.stderr == "", quiet

    # The real Horovod first on the path wins, as Python's import order says.
    real_first = _python(code, f"{installed.parent}{os.pathsep}{COMPAT_PATH}", tmp_path)
    assert real_first.returncode == 1 and "the real horovod was imported" in real_first.stderr, real_first


RUN_DRIVER = """
import sys
sys.path.insert(0, {compat!r})  # compat only in this process: the workers get it from horovod.run
import horovod

def work(tag):
    import horovod.common.process_sets as ps
    import hvd.numpy as hvdnp
    hvdnp.init()
    return tag, hvdnp.rank(), horovod.__version__, ps.global_process_set.ranks

print(horovod.run(work, args=("x",), np=2, use_gloo=False, use_mpi=False))
"""


def test_horovod_run_gives_workers_the_compat_layer(tmp_path):
    driver = _python(RUN_DRIVER.format(compat=str(COMPAT_DIR)), str(PACKAGE_DIR), tmp_path)
    assert driver.returncode == 0, driver
    assert driver.stdout.splitlines()[-1] == "[('x', 0, '0.28.1', [0, 1]), ('x', 1, '0.28.1', [0, 1])]", driver


HVD_RUN_DRIVER = """
import hvd

def work():
    import horovod
    return horovod.__version__

try:
    print(hvd.run(work, num_proc=2))
except RuntimeError as e:
    print(str(e).splitlines()[0])
"""


def test_hvd_horovod_compat_variable(tmp_path):
    on = _python(HVD_RUN_DRIVER, str(PACKAGE_DIR), tmp_path, env={"HVD_HOROVOD_COMPAT": "1"})
    assert on.returncode == 0 and on.stdout.splitlines()[-1] == "['0.28.1', '0.28.1']", on
    off = _python(HVD_RUN_DRIVER, str(PACKAGE_DIR), tmp_path)
    assert off.returncode == 0, off
    assert off.stdout.splitlines()[-1].endswith("failed with ModuleNotFoundError: No module named 'horovod'"), off


def test_elastic_modules(tmp_path):
    code = """
    import horovod.common.elastic
    import horovod.torch.elastic as elastic
    from horovod.torch.elastic import ElasticSampler, TorchState, run
    from horovod.torch.elastic.sampler import ElasticSampler as S
    import hvd.common.elastic
    import hvd.torch.elastic
    assert ElasticSampler is S is hvd.torch.elastic.ElasticSampler and run is hvd.torch.elastic.run
    assert horovod.common.elastic.State is hvd.common.elastic.State
    print(sorted(elastic.__all__))
    """
    done = _python(code, COMPAT_PATH, tmp_path)
    assert done.returncode == 0, done
    assert done.stdout == "['ElasticSampler', 'TorchState', 'run']\n", done


"""The training function of test_tune's population-based training case, in a module of its own so that its ranks
import only numpy and hvd (a restarted trial's job starts in a fraction of a second, as a real step's minutes
would dwarf)."""

import glob
import json
import math
import os
import tempfile
import time

import numpy as np

import hvd.numpy as hn
import hvd.train as train
import hvd.tune as tune


def drifting_optimum(config):
    """A training run whose best learning rate falls as it progresses (a schedule matters): "skill" grows fastest
    when log10(lr) is near the optimum, which slides from 0.03 at skill 0 to 0.0003 at skill 100, so a fixed lr
    helps only for a stretch. Deterministic; the state (skill, step) is checkpointed at every step and resumed
    from get_checkpoint(); the ranks average the gain, as data-parallel workers would."""
    hn.init()
    checkpoint = tune.get_checkpoint()
    skill, step = 0.0, 0
    if checkpoint is not None:
        with open(os.path.join(checkpoint.path, "state.json")) as f:
            skill, step = json.load(f)
    else:
        # The population starts together: trials whose jobs started a second apart would be compared at steps
        # far apart (real steps take minutes, not a tenth of a second).
        hn.barrier()
        open(os.path.join(config["dir"], f"start.{os.getpid()}"), "w").close()
        deadline = time.monotonic() + 60
        while len(glob.glob(os.path.join(config["dir"], "start.*"))) < 2 * config["population"]:
            assert time.monotonic() < deadline, "the other trials did not start within 60 s"
            time.sleep(0.01)
    while step < config["steps"]:
        optimum = math.log10(0.03) - 2.0 * min(skill, 100.0) / 100.0
        distance = math.log10(config["lr"]) - optimum
        gain = 0.1 + 4.0 * math.exp(-distance * distance / (2 * 0.3 ** 2))
        skill += float(hn.allreduce(np.array([gain]), op=hn.Average)[0])
        step += 1
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "state.json"), "w") as f:
                json.dump([skill, step], f)
            tune.report({"skill": skill, "step": step}, checkpoint=train.Checkpoint.from_directory(d))
        time.sleep(config["step_s"])

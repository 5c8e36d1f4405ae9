"""The chaos soak as a test: 20 faults of five kinds (a worker SIGKILLed, a worker SIGSTOPped for 5 s, a host cut
from the network for 3 s, a host's hvd-proxy SIGKILLed, a flood of garbage and silent connections at the
rendezvous port) injected at seeded random steps of an elastic PyTorch job, np=4 over three ssh hosts in network
namespaces. The job must finish with the parameters of a replay without faults, bit for bit, and leave nothing
behind (chaos_soak.py says how each is checked)."""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import chaos_soak  # noqa: E402

WHY = chaos_soak.unavailable()


@pytest.mark.skipif(WHY is not None, reason=f"the ssh lab cannot run here: {WHY}")
def test_twenty_faults_then_the_replays_parameters_and_nothing_left():
    args = chaos_soak.parse_args(["--faults", "20", "--seed", "1", "--verbose"])
    report = chaos_soak.soak(args)
    print(chaos_soak.format_report(report))
    failed = [name for name, good in report["checks"].items() if not good]
    assert not failed, f"chaos soak checks failed: {failed}; hvdrun's output: {report['log']}"
    # Every kind was injected, and each fault was followed by training at full size again.
    assert sorted(report["kinds"]) == sorted(chaos_soak.KINDS)
    assert all(f["full"] >= f["recovery"] >= 0 for f in report["faults"])

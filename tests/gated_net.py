"""A model for the SLURM requeue tests (tests/test_cluster.py): an MLP whose forward waits at a gate.

    lrtransfer sweep model=custom model.target=tests/gated_net.py:build ...

With LRT_TEST_GATE=<path> in its environment, a job's forward waits (polling) until
that file exists, so the job cannot finish, however fast the machine, before the
test has done what it is testing and opened the gate. It also stops waiting once a
stop has been requested in the process (the requeue signal: `lrtransfer.sweeps.requeue`),
so a signalled job reaches its next check, saves its checkpoint and is requeued.
The first time it waits it writes `<gate>.waiting` (the SLURM job id, the pid, the
time): the test then knows the job is training, its signal handlers installed. Without LRT_TEST_GATE (the in-process
reference run) it never waits. Waiting changes no number: the forward computes the
same thing, later.

A gate nobody opens fails the job after LRT_TEST_GATE_S seconds (default 600), so a
broken test cannot hang forever.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from torch import nn

POLL_S = 0.05


def wait_at_gate() -> None:
    gate = os.environ.get("LRT_TEST_GATE")
    if not gate or Path(gate).exists():
        return
    from lrtransfer.training import stop

    if stop.requested():  # signalled: on to the checkpoint
        return
    waiting = Path(gate + ".waiting")
    if not waiting.exists():  # written whole (then renamed): the test never reads half of it
        tmp = Path(f"{waiting}.{os.getpid()}.tmp")
        tmp.write_text(f"{os.environ.get('SLURM_JOB_ID') or '-'} {os.getpid()} {time.time():.3f}\n")
        os.replace(tmp, waiting)
    deadline = time.monotonic() + float(os.environ.get("LRT_TEST_GATE_S", "600"))
    while not Path(gate).exists() and not stop.requested():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the test never opened the gate {gate}")
        time.sleep(POLL_S)


# The network is the example model file's MLP (examples/mynets.py), loaded as model.target loads it.
MLP = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"


class GatedMLP(nn.Module):
    def __init__(self, width, depth, input_shape, output_dim):
        super().__init__()
        from lrtransfer.options.model.loading import load

        self.net = load(f"{MLP}:build")(width, depth, input_shape, output_dim)

    def forward(self, x):
        if x.device.type != "meta":  # sizing and shape checks run on the meta device: never wait there
            wait_at_gate()
        return self.net(x)


def build(width, depth, input_shape, output_dim):
    return GatedMLP(width, depth, input_shape, output_dim)

"""The engine's pieces as calls a bench can time: an ensemble of a config's first runs, a call of
its steps, its forward and backward alone, its optimizer pass alone. Shared by `bench_engine.py`
and `bench_tune.py`; import it after the repository is on the path (`tests.conftest.typed`
composes the configs).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from tests.conftest import typed

from bench_timing import repeated
from lrtransfer.sweeps.job import runs_of
from lrtransfer.training import build, memory
from lrtransfer.training.ensemble import Ensemble, _batch
from lrtransfer.training.precision import autocast, matmul_precision


def ensemble(over: list[str], K: int | None = None) -> tuple[object, Ensemble]:
    """(config, the ensemble of the first K runs of the default grid; K None: as the engine chunks it)."""
    cfg = typed(*over, "train.steps=100000", "engine.progress=false")
    built = build.job(cfg)
    runs = runs_of(cfg)
    K = memory.chunk_size(built, len(runs)) if K is None else K
    return cfg, Ensemble(built, runs[:K])


def stepper(ens: Ensemble, seconds: float = 0.25) -> Callable[[], None]:
    """A call of about `seconds` of steps of `ens` (the count fixed by one timed step); `.steps` says how many.
    Runs that diverge are frozen at the checks, as in a job (`engine.train`), not left computing NaNs."""
    def step() -> None:
        ens.step()
        if ens.at_check():
            ens.check()

    return repeated(step, ens.device, seconds)


def gradients(ens: Ensemble) -> Callable[[], list[torch.Tensor]]:
    """A call of a step's forward and backward alone on one batch, returning the gradients, as the
    engine's step computes them (`Ensemble._compute`, without its skips: the built-in models use
    every tensor)."""
    kind = ens.train.dtype.value
    x, y = _batch(ens.task, ens.gens, ens.seed_index, ens.train.batch_size)

    def call() -> list[torch.Tensor]:
        with matmul_precision(kind, ens.device):
            with autocast(kind, ens.device):
                losses = ens.task.losses(ens.model(x), y).to(ens.history.dtype)
            return list(torch.autograd.grad(losses.sum(), ens.operands))

    return call


def optimizer_pass(over: list[str], K: int = 11, seconds: float = 0.1) -> Callable[[], None]:
    """A step's optimizer pass alone, on an ensemble of its own (the first K runs of `over`'s grid):
    applied again and again to one step's gradients it takes the weights where no training goes,
    so no other timing may use them."""
    _, ens = ensemble(over, K=K)
    grads = gradients(ens)()

    def call() -> None:
        with torch.no_grad():
            ens._update(grads, 1.0, True)

    return repeated(call, ens.device, seconds)

"""A job's runs as the engine takes them: each a log2 learning rate, a seed, and its own values
of the per-run keys (`grid.<key>`); how a checkpoint names a run, and the seed of its batches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor


@dataclass(frozen=True)
class Run:
    log2_lr: float
    seed: int
    # The run's own value of each per-run key (`grid.<key>`), e.g. (("optim.weight_decay", 0.01),).
    grid: tuple[tuple[str, float], ...] = ()


def data_seed(seed: int) -> int:
    """The batch stream of a seed, kept apart from its initialisation stream."""
    return (seed * 1_000_003 + 7_919) % (2**63)


def run_key(run: Run) -> tuple:
    """A run as a checkpoint names it: (log2 LR, seed, each per-run key and value)."""
    return (run.log2_lr, run.seed, *(x for kv in run.grid for x in kv))


def per_run_values(runs: Sequence[Run], device: torch.device) -> dict[str, Tensor]:
    """{key: (K,) float64 tensor} of the runs' own values (`Run.grid`); {} when they have none.

    Float64 so that code computing with a value rounds it to the training dtype once,
    where a scalar would be: a run equals the job with that key set to its value.
    """
    keys = list(dict.fromkeys(k for r in runs for k, _ in r.grid))
    table = [dict(r.grid) for r in runs]
    if any(set(t) != set(keys) for t in table):
        raise ValueError("every run of an ensemble must set the same per-run keys")
    return {k: torch.tensor([t[k] for t in table], device=device, dtype=torch.float64) for k in keys}

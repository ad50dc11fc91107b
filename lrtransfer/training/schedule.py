"""Learning-rate schedules: a factor in [0, 1] multiplying every run's LR at a step."""

from __future__ import annotations

import math


def lr_factor(kind: str, step: int, steps: int, warmup: int = 0) -> float:
    """Factor at 0-based `step` of `steps`: linear warmup over `warmup` steps, then
    constant, linear decay to 0, or cosine decay to 0 over the remaining steps."""
    if step < warmup:
        return (step + 1) / warmup
    if kind == "constant":
        return 1.0
    progress = (step - warmup) / max(1, steps - warmup)
    if kind == "linear":
        return 1.0 - progress
    if kind == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"unknown schedule {kind!r}; choose constant, linear or cosine")

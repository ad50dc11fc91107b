"""What a run's record says, made from its ensemble's losses at the end of training: the
final loss (the mean over the last window), the held-out loss and accuracy, whether and
when it diverged, and its loss curve thinned to `train.history_points`.
"""

from __future__ import annotations

import math
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import torch
from torch import Tensor

from lrtransfer.training.precision import precision

if TYPE_CHECKING:
    from lrtransfer.options.data import Task


@dataclass
class RunResult:
    log2_lr: float
    lr: float  # 2**log2_lr
    seed: int
    initial_loss: float | None
    final_loss: float | None  # mean training loss over the final window; None if diverged
    diverged: bool
    diverged_step: int | None
    eval_loss: float | None = None
    eval_acc: float | None = None
    history_step: list[int] = field(default_factory=list)
    history_loss: list[float | None] = field(default_factory=list)
    grid: dict[str, float] = field(default_factory=dict)  # the run's per-run values (`Run.grid`)


@torch.no_grad()
def results_of(train, runs, task: Task, model, history: Tensor, alive: Tensor, diverged_step) -> list[RunResult]:
    K, steps = history.shape
    hist = history.cpu().double()
    window = max(1, math.ceil(train.final_window * steps))
    final = hist[:, steps - window :].mean(1)
    eval_loss = eval_acc = None
    ev = task.eval_set()
    if ev is not None:
        with precision(train.dtype.value, history.device), _eval_mode(model):
            eval_loss, eval_acc = _evaluate(model, task, *ev)
    keep = sorted(set(torch.linspace(0, steps - 1, min(steps, train.history_points)).round().long().tolist()))

    out = []
    for k, run in enumerate(runs):
        ok = bool(alive[k])
        stop = steps if ok else diverged_step[k] + 1
        idx = [i for i in keep if i < stop]
        if not ok and (not idx or idx[-1] != stop - 1):
            idx.append(stop - 1)  # always keep the step where it diverged
        losses = [_finite(hist[k, i]) for i in idx]
        out.append(
            RunResult(
                log2_lr=round(run.log2_lr, 10),
                lr=2.0**run.log2_lr,
                seed=run.seed,
                initial_loss=_finite(hist[k, 0]),
                final_loss=float(final[k]) if ok else None,
                diverged=not ok,
                diverged_step=None if ok else diverged_step[k],
                eval_loss=float(eval_loss[k]) if ok and eval_loss is not None else None,
                eval_acc=float(eval_acc[k]) if ok and eval_acc is not None else None,
                history_step=idx,
                history_loss=losses,
                grid=dict(run.grid),
            )
        )
    return out


@contextmanager
def _eval_mode(model):
    """The model in eval mode while held out data is scored, as a plain loop scores it (nanoGPT's
    estimate_loss, transformers' Trainer): no dropout, BatchNorm's running statistics, neither
    updated; the built-in models compute alike in both modes."""
    was = model.training
    model.eval()
    try:
        yield
    finally:
        model.train(was)


def _evaluate(model, task: Task, x: Tensor, y: Tensor, predictions: int = 1024) -> tuple[Tensor, Tensor]:
    """Held-out mean loss and accuracy of each run, (K,) each, on the host.

    Every example holds the same number of predictions (1, or T for tokens); chunks
    of about `predictions` of them bound the memory of the logits.
    """
    chunk = max(1, predictions // y[0].numel())
    loss_sum = correct = 0
    for i in range(0, len(y), chunk):
        logits = model(x[i : i + chunk])  # (K, n, C) or (K, n, T, V)
        n = len(y[i : i + chunk])
        loss_sum = loss_sum + task.losses(logits, y[i : i + chunk]).double() * n
        correct = correct + task.correct(logits, y[i : i + chunk])
    return (loss_sum / len(y)).cpu(), (correct.double() / y.numel()).cpu()


def _finite(v: Tensor) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None

"""What a command run's record says, from the losses its script reported: the same fields, by the
same rules, as an engine run's (`training/results.py`).

- `final_loss`: the mean of the losses over the last `train.final_window` of the steps the run
  reported (the last point at least): over steps 0..S-1 logged every step, exactly the engine's
  window of ceil(final_window x S) steps.
- diverged: a loss that is NaN/inf or above `train.diverge_factor` x the first one, or a line
  matching `trainer.diverged_pattern`; the run then has no final loss, its `diverged_step` is
  the step of that loss (the last step reported, for a pattern), and its curve ends there.
- the curve: at most `train.history_points` of the points reported, evenly spaced by index,
  the first and last kept (and the point where it diverged).
"""

from __future__ import annotations

import math


def first_bad(losses: list[float], factor: float) -> int | None:
    """The index of the first loss that is not finite or exceeds `factor` x the first, or None."""
    if not losses:
        return None
    first = losses[0]
    for i, v in enumerate(losses):
        if not math.isfinite(v) or (math.isfinite(first) and v > factor * first):
            return i
    return None


def by_step(points: list[tuple[int, float]]) -> list[tuple[int, float]]:
    """Each step once (the last loss reported for it), in order of step."""
    seen: dict[int, float] = {}
    for step, loss in points:
        seen[step] = loss
    return sorted(seen.items())


def run_result(points: list[tuple[int, float]], eval_loss: float | None, *, log2_lr: float, seed: int,
               grid: dict, final_window: float, history_points: int, diverge_factor: float,
               marked_diverged: bool = False) -> dict:
    """The run as its record writes it (`RunResult`'s fields, in order); `points` must not be empty
    unless `marked_diverged`."""
    points = by_step(points)
    losses = [v for _, v in points]
    bad = first_bad(losses, diverge_factor)
    if bad is None and marked_diverged:
        bad = len(points) - 1 if points else None
    diverged = bad is not None or marked_diverged
    kept = points[: bad + 1] if bad is not None else points
    final = None
    if not diverged:
        first, last = points[0][0], points[-1][0]
        window = max(1, math.ceil(final_window * (last - first + 1)))
        tail = [v for s, v in points if s > last - window] or [losses[-1]]
        final = sum(tail) / len(tail)
    idx = thinned(len(kept), history_points)
    if diverged and kept and idx[-1] != len(kept) - 1:
        idx.append(len(kept) - 1)
    out = {
        "log2_lr": round(log2_lr, 10),
        "lr": 2.0**log2_lr,
        "seed": seed,
        "initial_loss": finite(losses[0]) if losses else None,
        "final_loss": final,
        "diverged": diverged,
        "diverged_step": (kept[-1][0] if kept else 0) if diverged else None,
        "eval_loss": finite(eval_loss) if not diverged and eval_loss is not None else None,
        "eval_acc": None,
        "history_step": [kept[i][0] for i in idx],
        "history_loss": [finite(kept[i][1]) for i in idx],
    }
    if grid:
        out["grid"] = dict(grid)
    return out


def thinned(n: int, points: int) -> list[int]:
    """At most `points` indices of 0..n-1, evenly spaced, first and last included (the engine's rule)."""
    if n == 0:
        return []
    k = min(n, points)
    if k == 1:
        return [0]
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def finite(v: float | None) -> float | None:
    return v if v is not None and math.isfinite(v) else None

"""The joint optimum of a group with a second inner axis (`grid.<key>=[...]`): LR and one more value.

Each job of such a group trained every (log2 LR, value) cell of its grid. Per scale:

- every cell's mean over seeds (a cell where any seed diverged is diverged and never wins,
  as for the LR alone, `statistics.curves`);
- the best value is the one holding the best cell; the value stays on its grid (a handful
  of values, often with a 0 among them, give no basin to interpolate in);
- along the LR, at that value, the optimum is located below the grid spacing exactly as
  without a second axis (the parabola of `statistics.subgrid_optima`), and the whole LR
  analysis (drift of the LR coordinate with its 95% interval, verdict, transfer cost) is
  the usual one run on those curves (`group.analyse`). Its interval holds the chosen
  values fixed: the choice of value is not resampled.
- the drift of the value coordinate is the least-squares slope of the best value against
  log2 scale: of log2(value), in octaves per doubling, when every value of the grid is > 0;
  of the value itself, in its own units per doubling, when the grid holds 0 (or a negative
  value), since log2 0 is not a number. Its interval is the least-squares one from the
  scatter about the line (three scales or more); a best value on the edge of the grid
  bounds it and is warned of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lrtransfer.analysis.grouping import scale_value
from lrtransfer.analysis.records import maximizes, plain
from lrtransfer.analysis.statistics import EDGE_HIGH, EDGE_LOW, NONE, curves, drift_fit, scale_optima
from lrtransfer.analysis.statistics import INTERIOR as INSIDE


@dataclass
class Joint:
    """A grid group's second axis: each scale's best value and the cells behind it; lists in scale order."""

    key: str  # e.g. optim.weight_decay
    values: list[float]  # the grid's values, ascending
    best_value: list[float | None]  # per scale: the value of the best cell
    best_value_where: list[str]  # per scale: INSIDE, EDGE_LOW, EDGE_HIGH or NONE
    best_loss_by_value: list[list[float | None]]  # per scale, per value: its best cell's mean
    best_log2_lr_by_value: list[list[float | None]]  # per scale, per value: the sub-grid LR optimum
    value_coordinate: str  # "log2" (every value > 0) or "linear"
    value_drift: float | None  # slope of the value coordinate per doubling of the scale
    value_drift_ci: list[float] | None
    cells: pd.DataFrame = field(repr=False)  # scale, value, log2_lr, mean, n, n_diverged: the heatmap


def best_values(sub: pd.DataFrame, axis: str, metric: str) -> tuple[Joint, pd.DataFrame]:
    """Each scale's best value of the group's grid key, and the runs at it (one value per scale)."""
    key = str(sub["grid_key"].dropna().iloc[0])
    values = sorted(float(v) for v in sub["grid_value"].unique())
    maximize = maximizes(metric)
    cells = pd.concat(
        [curves(sub[sub["grid_value"] == v], axis, metric).assign(value=v) for v in values], ignore_index=True
    )
    scales = sorted(scale_value(s) for s in cells["scale"].unique())
    per_value = [scale_optima(cells[cells["value"] == v], scales, maximize) for v in values]
    best, where, loss_by, lr_by = [], [], [], []
    for k in range(len(scales)):
        losses = [o.grid_value[k] for o in per_value]
        lrs = [o.best[k] for o in per_value]
        found = [j for j, x in enumerate(losses) if x is not None]
        if not found:
            best.append(None)
            where.append(NONE)
        else:
            j = (max if maximize else min)(found, key=lambda j: losses[j])
            best.append(values[j])
            where.append(EDGE_LOW if j == 0 and len(values) > 1 else EDGE_HIGH if j == len(values) - 1 and len(values) > 1 else INSIDE)
        loss_by.append(losses)
        lr_by.append(lrs)

    coordinate = "log2" if all(v > 0 for v in values) else "linear"
    pts = [(math.log2(s), math.log2(b) if coordinate == "log2" else b) for s, b in zip(scales, best) if b is not None]
    fit = drift_fit(np.array([p[0] for p in pts]), np.array([p[1] for p in pts]), None, None, 1.0) if pts else None
    joint = Joint(
        key=key, values=values, best_value=best, best_value_where=where, best_loss_by_value=loss_by,
        best_log2_lr_by_value=lr_by, value_coordinate=coordinate,
        value_drift=None if fit is None else fit.slope,
        value_drift_ci=None if fit is None or fit.ci is None else [float(c) for c in fit.ci],
        cells=cells,
    )
    # a scale where every cell diverged keeps the runs of one value: the LR analysis says "all diverged"
    at_best = pd.concat([sub[(sub[axis] == s) & (sub["grid_value"] == (values[0] if b is None else b))]
                         for s, b in zip(scales, best)])
    return joint, at_best


def warnings_of(joint: Joint, axis: str, scales: list[int]) -> list[str]:
    """What the value grid does not show: a best value on its edge, a scale with no finite cell."""
    out = []
    for s, w, b in zip(scales, joint.best_value_where, joint.best_value):
        if w == EDGE_LOW and b == 0:
            out.append(f"{axis} {s}: best {joint.key} is 0, the lowest of its grid; a value between 0 and "
                       f"{joint.values[1]:g} may do better")
        elif w == EDGE_LOW:
            out.append(f"{axis} {s}: best {joint.key} is the lowest of its grid ({b:g}); the optimum may lie below")
        elif w == EDGE_HIGH:
            out.append(f"{axis} {s}: best {joint.key} is the highest of its grid ({b:g}); the optimum may lie above")
        elif w == NONE:
            out.append(f"{axis} {s}: every cell diverged; no joint optimum")
    return out


def joint_dict(joint: Joint | None) -> dict | None:
    """JSON-ready: everything but the cells (the figure's)."""
    if joint is None:
        return None
    return {k: plain(getattr(joint, k)) for k in joint.__dataclass_fields__ if k != "cells"}

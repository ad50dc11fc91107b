"""A transfer check's records (`sweep --transfer-from`) -> per tuned key: does its tuned value hold?

Each scale's job scanned every tuned key (the global LR among them) by 2^f around the tuned point,
the other keys held there, and the LR-only setting's LR by 2^f. Read per key, a scan is an LR
curve in all but name: f plays the log2 LR, so the LR analysis reads it as it is (`group.analyse`):
each scale's optimal f (a parabola's vertex, with its interval), the drift of that optimum per
doubling of the scale with its 95% interval, the verdict (transfers, drifts, inconclusive). The
cost of not retuning is measured at the tuned value itself (f = 0): each scale's loss there over
its best measured one. The headline compares, at the largest scale, the tuned point with the
LR-only setting (its LR transferred, and retuned there), paired by seed.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lrtransfer.analysis.group import Group, analyse, group_dict
from lrtransfer.analysis.grouping import axis_candidates, config_columns, scale_value, varying
from lrtransfer.analysis.resampling import seed_tables
from lrtransfer.analysis.statistics import CONFIDENCE, N_RESAMPLES, transfer_cost
from lrtransfer.analysis.tuning import estimate, loss_column

SCAN = "scan"
NAMED = ("model.name", "model.class", "data.name", "optim.name", "param.name")  # what a check's figures say it is
LR = "lr"
BETAS = ("beta1", "beta2")


def coordinate(key: str, value: float) -> float:
    """The value a scan multiplies: 1 - beta for a beta, the value itself otherwise."""
    return 1.0 - value if key.rpartition(".")[2] in BETAS else value


@dataclass
class Check:
    """One transfer check: its scale axis, each key's analysed scan, and the headline."""

    study: str
    axis: str
    scales: list
    metric: str
    keys: list[str]  # "lr" first, then the tuned keys
    centre: dict  # the tuned point: log2_lr and each key's value
    reference: dict  # the LR-only setting: log2_lr and each key's (own) value
    per_key: dict[str, Group] = field(default_factory=dict)
    # at the largest scale: the LR-only setting's loss minus the tuned point's (positive: tuned is better),
    # with its LR transferred as tuned at the base, and retuned there (its best LR of the scan)
    headline: dict = field(default_factory=dict)
    curves: pd.DataFrame | None = field(default=None, repr=False)  # key, scale, factor, mean, sem, n, n_diverged

    def dict(self) -> dict:
        per = {}
        for k, g in self.per_key.items():
            d = group_dict(g)
            per[k] = {"best_log2_factor": d["best_log2_lr"], "best_log2_factor_ci": d["best_log2_lr_ci"],
                      "where": d["optimum"], "best_loss": d["best_loss"], "drift": d["drift"], "drift_ci": d["drift_ci"],
                      "verdict": d["verdict"], "loss_at_tuned": d["transfer_loss"], "cost_of_not_retuning": d["transfer_cost"],
                      "cost_se": d["transfer_cost_se"], "seeds": d["n_seeds"], "warnings": d["warnings"]}
        return {"study": self.study, "axis": self.axis, "scales": self.scales, "metric": self.metric,
                "centre": self.centre, "reference": self.reference, "confidence": CONFIDENCE, "keys": per,
                "headline": self.headline}


def checks(points: pd.DataFrame, metric: str = "train_loss") -> list[Check]:
    """Every study of `points` (`Scan.points`) that holds a transfer check, in name order."""
    if points.empty or "points.kind" not in points:
        return []
    return [read(str(study), df, metric) for study, df in points.groupby("study", sort=True)
            if (df["points.kind"] == SCAN).any()]


def _point(text, keys: list[str]) -> dict:
    values = json.loads(text) if isinstance(text, str) else list(text)
    return {"log2_lr": float(values[0]), **{k: float(v) for k, v in zip(keys, values[1:])}}


def _keys(df: pd.DataFrame) -> list[str]:
    """The tuned keys: the per-run keys of the scans' rows (`points.keys`)."""
    return list(json.loads(df["points.keys"].iloc[0]))


def scan_axis(df: pd.DataFrame, keys: list[str]) -> str:
    """The key the check's jobs differ in (width, depth, train.steps, ...)."""
    runs = {"log2_lr", "job_wall_time_s", *keys}
    jobs = df.drop_duplicates("job_id")
    cols = [c for c in config_columns(jobs) if c not in runs and not c.startswith(("points.", "search."))]
    found = axis_candidates(jobs, varying(jobs, cols))
    if not found:
        raise ValueError("the check's jobs differ in no scale: give larger scales (width=128,256)")
    return found[0]


def read(study: str, df: pd.DataFrame, metric: str = "train_loss") -> Check:
    df = df[df["points.kind"] == SCAN]
    keys = _keys(df)
    centre, reference = _point(df["points.centre"].iloc[0], keys), _point(df["points.reference"].iloc[0], keys)
    axis = scan_axis(df, keys)
    df = df.assign(**{axis: pd.to_numeric(df[axis])})
    scales = sorted(scale_value(s) for s in df[axis].unique())
    col = loss_column(metric)
    check = Check(study, axis, scales, metric, [LR, *keys], centre, reference)
    first = df.iloc[0]
    named = {"study": study, **{k: first[k] for k in NAMED if k in df and isinstance(first[k], str)}}
    curves = []
    for k in check.keys:
        sub = scan_of(df, k, keys, centre)
        if sub[axis].nunique() < 1 or sub["log2_lr"].nunique() < 2:
            continue
        g = analyse(sub, axis, {**named, "key": k}, col, np.random.default_rng(0), N_RESAMPLES)
        _seeds, tables = seed_tables(sub, axis, col, g.scales)
        g.transfer_log2_lr = 0.0
        g.transfer_loss, g.transfer_cost, g.transfer_cost_se = transfer_cost(
            g.curves, tables, g.scales, g.grid_best_log2_lr, g.best_loss, 0.0)
        g.warnings = [w.replace("best LR", f"best {k}").replace("log2 LR", f"log2 factor of {k}") for w in g.warnings]
        check.per_key[k] = g
        curves.append(g.curves.assign(key=k))
    check.curves = pd.concat(curves, ignore_index=True).rename(columns={"log2_lr": "factor"}) if curves else None
    check.headline = headline(df, axis, keys, centre, reference, col)
    return check


def _at(df: pd.DataFrame, keys: list[str], point: dict) -> pd.Series:
    """The rows whose every tuned key is at `point`'s value."""
    mask = pd.Series(True, index=df.index)
    for k in keys:
        mask &= np.isclose(df[k].astype(float), point[k], rtol=1e-9, atol=0)
    return mask


def scan_of(df: pd.DataFrame, key: str, keys: list[str], centre: dict) -> pd.DataFrame:
    """The runs of one key's scan, its log2 factor in `log2_lr` (where the LR analysis reads it)."""
    lr_at = np.isclose(df["log2_lr"].astype(float), centre["log2_lr"], rtol=0, atol=1e-6)
    if key == LR:
        sub = df[_at(df, keys, centre)]
        f = sub["log2_lr"].astype(float) - centre["log2_lr"]
    else:
        sub = df[lr_at & _at(df, [k for k in keys if k != key], centre)]
        f = [math.log2(coordinate(key, v) / coordinate(key, centre[key])) if coordinate(key, v) > 0 else math.nan
             for v in sub[key].astype(float)]
    sub = sub.assign(log2_lr=np.round(np.asarray(f, dtype=float), 6))
    return sub[np.isfinite(sub["log2_lr"])]


def headline(df: pd.DataFrame, axis: str, keys: list[str], centre: dict, reference: dict, col: str) -> dict:
    """At the largest scale: the LR-only setting's loss minus the tuned point's, paired by seed, with
    its LR as tuned at the base (transferred) and at its best LR there (retuned)."""
    top = df[df[axis] == df[axis].max()]
    loss = pd.to_numeric(top[col], errors="coerce").where(~top["diverged"].astype(bool))
    top = top.assign(loss=loss)
    tuned = top[_at(top, keys, centre) & np.isclose(top["log2_lr"].astype(float), centre["log2_lr"], atol=1e-6)]
    ref = top[_at(top, keys, reference)]
    if tuned.empty or ref.empty:
        return {}
    t = tuned.set_index("run_seed")["loss"]
    by_lr = ref.groupby("log2_lr")["loss"].mean()
    lrs = {"transferred": float(ref["log2_lr"].astype(float).iloc[(ref["log2_lr"].astype(float) - reference["log2_lr"])
                                                                  .abs().argmin()]),
           "retuned": float(by_lr.idxmin()) if by_lr.notna().any() else None}
    out = {"scale": scale_value(df[axis].max()), "tuned": estimate(t.tolist()).dict()}
    for name, lr in lrs.items():
        if lr is None:
            continue
        r = ref[np.isclose(ref["log2_lr"].astype(float), lr, atol=1e-6)].set_index("run_seed")["loss"]
        seeds = sorted(set(t.index) & set(r.index))
        out[name] = {"log2_lr": lr, "loss": estimate(r.tolist()).dict(),
                     "gain": estimate([r[s] - t[s] for s in seeds]).dict()}
    return out


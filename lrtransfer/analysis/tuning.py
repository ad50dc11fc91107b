"""A search's records (`lrtransfer tune`) -> what it found: the best vector, its loss with an
interval, and its gain over the best LR-only setting of the same budget.

The search's rounds (`points.kind` search) and their LR-only twins (baseline) each ran at one
seed; the best point of each is the one with the lowest loss there. That loss is optimistic (the
best of many draws), so the search trained both best points again at fresh seeds (confirm): their
losses there, and the gain (the baseline's loss minus the search's, paired by seed), are what this
module reports, each a mean with a Student-t 95% interval over the seeds.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lrtransfer.analysis.statistics import CONFIDENCE, t_quantile

SEARCH, BASELINE, CONFIRM = "search", "baseline", "confirm"


@dataclass
class Estimate:
    """A mean over seeds with its 95% interval (None with one seed)."""

    mean: float | None
    ci: list[float] | None
    n: int

    def dict(self) -> dict:
        return {"mean": self.mean, "ci": self.ci, "n": self.n}


def estimate(values) -> Estimate:
    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    if not len(v):
        return Estimate(None, None, 0)
    mean = float(v.mean())
    if len(v) < 2:
        return Estimate(mean, None, 1)
    half = float(t_quantile(0.5 + CONFIDENCE / 2, len(v) - 1) * v.std(ddof=1) / math.sqrt(len(v)))
    return Estimate(mean, [mean - half, mean + half], len(v))


@dataclass
class Search:
    """One tune study, read from its records."""

    study: str
    metric: str
    keys: list[str]  # the searched keys beside the LR
    best: dict  # {"log2_lr": ..., key: value, ...}: the search's best point
    best_loss: float | None  # its loss in the search (seed `seed`)
    baseline_log2_lr: float | None  # the LR-only twin's best LR
    baseline_loss: float | None
    defaults: dict  # each key's value in the baseline (the job's own)
    ranges: dict = field(default_factory=dict)  # each searched key's [lo, hi], as given
    tuned: Estimate | None = None  # the best point at fresh seeds
    global_lr: Estimate | None = None  # the baseline's best at the same seeds
    gain: Estimate | None = None  # global_lr - tuned, paired by seed (positive: the search's point is better)
    rounds: list[dict] = field(default_factory=list)  # per round: run-steps so far, best so far of each arm
    run_steps: dict = field(default_factory=dict)  # search, baseline, confirm
    wall_time_s: dict = field(default_factory=dict)
    points: pd.DataFrame | None = field(default=None, repr=False)  # the search's and the baseline's runs

    def dict(self) -> dict:
        return {"study": self.study, "metric": self.metric, "keys": self.keys, "best": self.best,
                "best_loss_in_search": self.best_loss, "baseline_log2_lr": self.baseline_log2_lr,
                "baseline_loss_in_search": self.baseline_loss, "defaults": self.defaults,
                "tuned": None if self.tuned is None else self.tuned.dict(),
                "global_lr": None if self.global_lr is None else self.global_lr.dict(),
                "gain": None if self.gain is None else self.gain.dict(), "confidence": CONFIDENCE,
                "ranges": self.ranges, "rounds": self.rounds, "run_steps": self.run_steps,
                "wall_time_s": self.wall_time_s}


def loss_column(metric: str) -> str:
    return "train_loss" if metric == "train_loss" else metric


def _loss(df: pd.DataFrame, metric: str) -> pd.Series:
    """Each run's loss, inf where it diverged (never a best)."""
    v = pd.to_numeric(df[loss_column(metric)], errors="coerce").astype(float)
    return v.where(~df["diverged"].astype(bool) & np.isfinite(v), math.inf)


def searches(points: pd.DataFrame) -> list[Search]:
    """Every study of `points` (`Scan.points`) that holds a search, in name order."""
    if points.empty or "points.kind" not in points:
        return []
    out = []
    for study, df in points.groupby("study", sort=True):
        if (df["points.kind"] == SEARCH).any():
            out.append(read(str(study), df))
    return out


def keys_of(df: pd.DataFrame) -> list[str]:
    """The searched keys beside the LR: the per-run keys of the search's rows (`points.keys`)."""
    return list(json.loads(df.loc[df["points.kind"] == SEARCH, "points.keys"].iloc[0]))


def read(study: str, df: pd.DataFrame) -> Search:
    metric = str(df["search.metric"].dropna().iloc[0]) if "search.metric" in df and df["search.metric"].notna().any() \
        else "train_loss"
    keys = keys_of(df)
    kind = df["points.kind"]
    found, base = df[kind == SEARCH].copy(), df[kind == BASELINE].copy()
    found["loss"], base["loss"] = _loss(found, metric), _loss(base, metric)
    best_row = found.loc[found["loss"].idxmin()] if np.isfinite(found["loss"]).any() else None
    base_row = base.loc[base["loss"].idxmin()] if len(base) and np.isfinite(base["loss"]).any() else None
    best = {} if best_row is None else {"log2_lr": float(best_row["log2_lr"]), **{k: float(best_row[k]) for k in keys}}
    out = Search(study, metric, keys, best, None if best_row is None else float(best_row["loss"]),
                 None if base_row is None else float(base_row["log2_lr"]),
                 None if base_row is None else float(base_row["loss"]), {})
    out.rounds = _rounds(found, base, df)
    for k in keys:
        given = df[f"search.{k}"].dropna() if f"search.{k}" in df else []
        if len(given):
            out.ranges[k] = json.loads(given.iloc[0]) if isinstance(given.iloc[0], str) else list(given.iloc[0])
    out.points = pd.concat([found.assign(arm=SEARCH), base.assign(arm=BASELINE)], ignore_index=True)
    confirm = df[kind == CONFIRM]
    for arm, part in (("search", found), ("baseline", base), ("confirm", confirm)):
        out.run_steps[arm] = int(pd.to_numeric(part["train.steps"]).sum()) if len(part) else 0
        jobs = part.drop_duplicates("job_id")
        out.wall_time_s[arm] = float(pd.to_numeric(jobs["job_wall_time_s"], errors="coerce").sum()) if len(part) else 0.0
    if len(confirm) and best:
        _confirmed(out, confirm, metric)
    return out


def _rounds(found: pd.DataFrame, base: pd.DataFrame, df: pd.DataFrame) -> list[dict]:
    """Per round: the run-steps the search arm had spent by its end, and each arm's best so far."""
    out, spent, best, best_b = [], 0, math.inf, math.inf
    for r in sorted(set(pd.to_numeric(found["points.round"]).astype(int))):
        mine = found[pd.to_numeric(found["points.round"]) == r]
        theirs = base[pd.to_numeric(base["points.round"]) == r]
        spent += int(pd.to_numeric(mine["train.steps"]).sum())
        best = min(best, float(mine["loss"].min()))
        best_b = min(best_b, float(theirs["loss"].min())) if len(theirs) else best_b
        out.append({"round": r, "run_steps": spent, "best": best if math.isfinite(best) else None,
                    "baseline_best": best_b if math.isfinite(best_b) else None})
    return out


def _confirmed(out: Search, confirm: pd.DataFrame, metric: str) -> None:
    """The confirming job's two rows at each seed: the search's best, the LR-only best."""
    conf = confirm.assign(loss=_loss(confirm, metric))
    mine = np.isclose(conf["log2_lr"].astype(float), out.best["log2_lr"])
    for k in out.keys:
        mine &= np.isclose(conf[k].astype(float), out.best[k])
    tuned = conf[mine].set_index("run_seed")["loss"]
    other = conf[~mine]
    out.defaults = {k: float(other[k].iloc[0]) for k in out.keys} if len(other) else {}
    base = other.set_index("run_seed")["loss"] if len(other) else tuned  # one row: the two points are one
    out.tuned, out.global_lr = estimate(tuned.tolist()), estimate(base.tolist())
    seeds = sorted(set(tuned.index) & set(base.index))
    out.gain = estimate([base[s] - tuned[s] for s in seeds])

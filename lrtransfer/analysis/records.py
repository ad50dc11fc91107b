"""Loading: every record below a results folder as one flat table of runs.

A record is a job (one config at every LR of its grid); a run is one LR and one
seed of it. Each run becomes a row: the job's config as dotted columns
(`param.name`, `train.steps`, ...) and the run's own numbers (`RUN_COLUMNS`). Two
columns are read off the config: `study` (its `name`) and, for `model=custom`,
`model.class` (the name `model.target` ends in: `GPT2LMHeadModel`, nanoGPT's `GPT`).
A job with a second inner axis (`grid.<key>`) adds the key's name (`grid_key`) and
each run's value (`grid_value`). A config key that a job's option lacks (`param.base_width` of an SP job) is a
missing value (NaN) in that job's rows, told apart from a key set to null (None).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from lrtransfer.config import inner_grid
from lrtransfer.errors import UserError
from lrtransfer.store import iter_records

SCALE_AXES = ("width", "depth")
METRICS = ("train_loss", "eval_loss", "eval_acc")


def check_metric(metric: str) -> None:
    if metric not in METRICS:
        raise UserError(f"unknown metric '{metric}'; valid: {', '.join(METRICS)}")


# Per-run columns of `load_runs` (everything else is the job's config, dotted).
RUN_COLUMNS = (
    "run_seed",
    "lr",
    "log2_lr",
    "initial_loss",
    "train_loss",
    "eval_loss",
    "eval_acc",
    "diverged",
    "diverged_step",
    "grid_value",  # the run's own value of the job's `grid.<key>` (named by the config column `grid_key`)
)
HISTORY_COLUMNS = ("history_step", "history_loss")


class NoRecordsError(UserError, ValueError):
    """No finished record under a directory."""


class SkippedRecordWarning(UserWarning):
    """A record file was not used; the message names it and says why."""


def maximizes(metric: str) -> bool:
    """Accuracy is better higher; every loss is better lower."""
    return metric == "eval_acc"


def metric_noun(metric: str) -> str:
    """What a metric measures, for "best ..." in tables and titles."""
    return "accuracy" if maximizes(metric) else "loss"


@dataclass
class Scan:
    """Everything found below a results folder."""

    runs: pd.DataFrame  # one row per run of every complete record (may be empty)
    failed: list[dict]  # failed jobs: study, job_id, path, error
    skipped: list[str]  # unreadable or malformed record files, with the reason


def scan(root: str | Path) -> Scan:
    """Read every record below `root`; a bad file is skipped with a `SkippedRecordWarning`."""
    root = Path(root)
    if not root.exists():
        raise NoRecordsError(f"'{root}' does not exist; give the results folder of a sweep (e.g. results/)")
    rows, failed, skipped = [], [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path, rec in iter_records(root):
            study = rec["config"].get("name", "default") if isinstance(rec["config"], dict) else "default"
            if rec.get("status") != "complete":
                failed.append({"study": study, "job_id": rec.get("job_id"), "path": str(path), "error": rec.get("error")})
                continue
            try:
                rows.extend(_rows(rec))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                skipped.append(f"skipped {path}: malformed record ({e.__class__.__name__}: {e})")
    skipped = [str(w.message) for w in caught] + skipped
    for message in skipped:
        warnings.warn(message, SkippedRecordWarning, stacklevel=2)
    return Scan(_frame(rows), failed, skipped)


def table(records: Iterable[dict]) -> pd.DataFrame:
    """The runs of the given complete records as one table, as `scan` makes it (an adaptive
    sweep analyses exactly the jobs it planned, not whatever else its folder holds)."""
    return _frame([row for rec in records for row in _rows(rec)])


def _frame(rows: list[dict]) -> pd.DataFrame:
    # object columns keep each config value as the record wrote it: an integer key
    # that some parameterizations lack stays an integer, not a float beside NaNs
    df = pd.DataFrame(rows, dtype=object)
    if not df.empty:
        for m in ("run_seed", "lr", "log2_lr", "initial_loss", "grid_value", *METRICS, *SCALE_AXES):
            if m in df.columns:
                df[m] = pd.to_numeric(df[m], errors="coerce")
        df["diverged"] = df["diverged"].astype(bool)
    return df


def _rows(rec: dict) -> list[dict]:
    """A complete record's runs as flat rows; raises on a malformed record."""
    flat = pd.json_normalize(rec["config"], sep=".").iloc[0].to_dict()
    flat["study"] = flat.pop("name", "default")
    target = flat.get("model.target")
    if isinstance(target, str) and ":" in target:  # model=custom: its class (or factory) names it, GPT2LMHeadModel
        flat["model.class"] = target.rpartition(":")[2]
    for axis in SCALE_AXES:  # the scales every table and figure is built on
        v = flat.get(axis)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"config.{axis}={v!r} is not a positive number")
    # A second inner axis (`grid.<key>`): its key is a config column (`grid_key`, so that such
    # a job never joins the groups of plain ones), each run's value a run column
    # (`grid_value`), and the key's own column is empty (NaN): no one value holds for the job.
    for k in [k for k in flat if k == "grid" or k.startswith("grid.")]:
        del flat[k]
    found = inner_grid(rec["config"])
    if found is not None:
        flat["grid_key"], flat[found[0]] = found[0], math.nan
    out = []
    for run in rec["runs"]:
        extra = {} if found is None else {"grid_value": float(run["grid"][found[0]])}
        out.append(
            {
                **flat,
                **extra,
                "job_id": rec.get("job_id"),
                "run_seed": run["seed"],
                "lr": run["lr"],
                "log2_lr": float(run["log2_lr"]),
                "initial_loss": run.get("initial_loss"),
                "train_loss": run["final_loss"],
                "eval_loss": run.get("eval_loss"),
                "eval_acc": run.get("eval_acc"),
                "diverged": bool(run["diverged"]),
                "diverged_step": run.get("diverged_step"),
                "history_step": list(run.get("history_step") or []),
                "history_loss": list(run.get("history_loss") or []),
            }
        )
    return out


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per run of every complete record below `root`: config columns (dotted) + run columns."""
    df = scan(root).runs
    if df.empty:
        raise NoRecordsError(f"no finished records under '{root}'; run `lrtransfer sweep` first")
    return df


def export_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The runs as a flat table (no per-step history): identity, config columns, then run columns."""
    run = [c for c in RUN_COLUMNS if c in df.columns]
    first = [c for c in ("study", "job_id", *SCALE_AXES) if c in df.columns]
    config = sorted(c for c in df.columns if c not in (*first, *run, *HISTORY_COLUMNS))
    out = df[first + config + run].copy()
    out["diverged_step"] = pd.array(out["diverged_step"], dtype="Int64")
    return out.reset_index(drop=True)


def plain(v):
    """JSON-ready: numpy scalars to Python, NaN to None, recursively."""
    if isinstance(v, dict):
        return {k: plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v

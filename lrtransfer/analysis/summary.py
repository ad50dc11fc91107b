"""The summary: groups as plain data, for `summary --json` and the CLI's tables.

The CLI renders what these functions return; it never groups runs itself.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lrtransfer.analysis.group import Group, groups
from lrtransfer.analysis.grouping import partition, scale_value, telling_keys
from lrtransfer.analysis.joint import joint_dict
from lrtransfer.analysis.records import load_runs, plain
from lrtransfer.analysis.statistics import CONFIDENCE, TOLERANCE

_NOT_JSON = ("curves", "fit", "runs")  # frames and the fitted band: for figures, not for the document


def group_dict(g: Group) -> dict:
    """A group's numbers as JSON-ready values, in the field order of `Group`; `joint` only
    for a group with a second inner axis (its LR fields are then at each scale's best value)."""
    out = {k: plain(getattr(g, k)) for k in g.__dataclass_fields__ if k not in (*_NOT_JSON, "joint")}
    if g.joint is not None:
        out["joint"] = joint_dict(g.joint)
    return out


def summary_doc(gs: list[Group], metric: str) -> dict:
    return {"metric": metric, "tolerance": TOLERANCE, "confidence": CONFIDENCE, "groups": [group_dict(g) for g in gs]}


def summarize(root: str | Path, metric: str = "train_loss") -> dict:
    """The `lrtransfer summary --json` document."""
    return summary_doc(groups(load_runs(root), metric), metric)


def overview(runs: pd.DataFrame) -> tuple[list[dict], dict]:
    """The rows of `lrtransfer list` (one per group, by study) and the values every group shares.

    A row: study, group (what tells it apart from the other groups listed), axis,
    scales, and its counts of jobs, runs and diverged runs. No statistics: a
    listing is cheap.
    """
    if runs.empty:
        return [], {}
    parts = partition(runs)
    fixeds = [f for _, f, _ in parts]
    varying = [k for k in telling_keys(fixeds) if k != "study"]
    shared = {k: v for k, v in fixeds[0].items() if k != "study" and all(str(f.get(k)) == str(v) for f in fixeds)}
    rows = []
    for axis, fixed, sub in parts:
        rows.append({
            "study": str(fixed.get("study")),
            "group": "  ".join(f"{k}={fixed[k]}" for k in varying if k in fixed) or "-",
            "axis": axis,
            "scales": [scale_value(s) for s in sorted(sub[axis].unique())],
            "jobs": int(sub["job_id"].nunique()),
            "runs": int(len(sub)),
            "diverged": int(sub["diverged"].sum()),
        })
    return rows, shared

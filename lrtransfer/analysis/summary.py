"""The summary: groups as plain data, for `summary --json` and the CLI's tables.

The CLI renders what these functions return; it never groups runs itself.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from lrtransfer.analysis.group import Group, group_dict, scanned_groups
from lrtransfer.analysis.grouping import partition, scale_value, telling_keys
from lrtransfer.analysis.records import Scan, plain, scan_runs
from lrtransfer.analysis.statistics import CONFIDENCE
from lrtransfer.analysis.verdicts import TOLERANCE

def incomplete_words(records: int, runs: int) -> str:
    """What follows the verdict of a study some of whose records were skipped ('' when none were)."""
    return f" (incomplete: {records} record(s) of {runs} runs skipped)" if records else ""


def skipped_lines(skipped: list[dict], aside: list[str]) -> list[str]:
    """How many records (and runs) were left out and why (`summary_doc`'s `skipped`), and how many
    copies were set aside."""
    lines = []
    if skipped:
        lines.append(f"{len(skipped)} record(s) skipped ({sum(s['runs'] for s in skipped)} runs), left out of every "
                     "number above; a re-run of the sweep recomputes them:")
        lines += [f"  {s['path']}: {s['why']}" for s in skipped]
    if aside:
        lines.append(f"{len(aside)} further copy(ies) of jobs already read set aside (each job is read once)")
    return lines


def summary_doc(gs: list[Group], metric: str, found: Scan | None = None) -> dict:
    """`skipped`: each record left out (path, study, runs, why); `set_aside`: each further copy of
    a job already read; `searches` and `transfer_checks`, where the folder holds them (`lrtransfer
    tune`, `sweep --transfer-from`)."""
    from lrtransfer.analysis.transfer import checks
    from lrtransfer.analysis.tuning import searches

    doc = {"metric": metric, "tolerance": TOLERANCE, "confidence": CONFIDENCE, "groups": [group_dict(g) for g in gs],
           "skipped": [] if found is None else [vars(s) for s in found.skipped],
           "set_aside": [] if found is None else found.set_aside}
    if found is not None and not found.points.empty:
        doc["searches"] = [plain(s.dict()) for s in searches(found.points)]
        doc["transfer_checks"] = [plain(c.dict()) for c in checks(found.points, metric)]
    return doc


def summarize(root: str | Path, metric: str = "train_loss", all_versions: bool = False) -> dict:
    """The `lrtransfer summary --json` document (`all_versions`: each version of a group's inputs a group)."""
    found = scan_runs(root)
    return summary_doc(scanned_groups(found, metric, all_versions), metric, found)


def overview(runs: pd.DataFrame, all_versions: bool = False) -> tuple[list[dict], dict]:
    """The rows of `lrtransfer list` (one per group, by study) and the values every group shares.

    A row: study, group (what tells it apart from the other groups listed), axis,
    scales, and its counts of jobs, runs and diverged runs. No statistics: a
    listing is cheap.
    """
    if runs.empty:
        return [], {}
    parts = partition(runs, all_versions)
    fixeds = [p.fixed for p in parts]
    varying = [k for k in telling_keys(fixeds) if k != "study"]
    shared = {k: v for k, v in fixeds[0].items() if k != "study" and all(str(f.get(k)) == str(v) for f in fixeds)}
    rows = []
    for axis, fixed, sub, old in parts:
        rows.append({
            "study": str(fixed.get("study")),
            "group": "  ".join(f"{k}={fixed[k]}" for k in varying if k in fixed) or "-",
            "axis": axis,
            "scales": [scale_value(s) for s in sorted(sub[axis].unique())],
            "jobs": int(sub["job_id"].nunique()),
            "runs": int(len(sub)),
            "diverged": int(sub["diverged"].sum()),
            "superseded": 0 if old is None else len(old.jobs),  # jobs of older inputs, left out of the counts
        })
    return rows, shared

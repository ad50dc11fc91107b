"""Loading: every record below a results folder as one flat table of runs.

A record is a job (one config at every LR of its grid); a run is one LR and one
seed of it. Each run becomes a row: the job's config as dotted columns
(`param.name`, `train.steps`, ...) and the run's own numbers (`RUN_COLUMNS`). Two
columns are read off the config: `study` (its `name`) and, for `model=custom`,
`model.class` (the name `model.target` ends in: `GPT2LMHeadModel`, nanoGPT's `GPT`).
A job with a second inner axis (`grid.<key>`) adds the key's name (`grid_key`) and
each run's value (`grid_value`). A job imported from a table (`lrtransfer import`) adds where its
runs came from (`source`), and may lack a width or depth. A config key that a job's option lacks (`param.base_width` of an SP job) is a
missing value (NaN) in that job's rows, told apart from a key set to null (None).
"""

from __future__ import annotations

import json
import math
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lrtransfer.config import added_values, inner_grid
from lrtransfer.errors import UserError
from lrtransfer.store import IMPORTED, RECORD_NAME, RecordError, read_record

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
# What a job whose runs are rows (`points`) keeps of them as its config's columns: the rest are its runs
POINTS_KEPT = ("points.kind", "points.round", "points.keys", "points.centre", "points.reference")
# Per-job columns that are no config: the job, when it started (ISO time, UTC) and its number in its
# sweep (Hydra's job number; readers list groups in that order).
JOB_COLUMNS = ("job_id", "created", "sweep_index")
# What a job was built from (its record's `inputs`: each data file by content, model.source), as
# `inputs.<key>` columns: two versions of one group's files are told apart by them (`versions`).
INPUTS = "inputs."


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
class Skipped:
    """A record file left out of the analysis, and why."""

    path: str
    study: str  # its config's name, else the folder it lies in
    runs: int  # the runs it held (0 where that cannot be told)
    why: str

    def __str__(self) -> str:
        return f"skipped {self.path}: {self.why}"


@dataclass
class Scan:
    """Everything found below a results folder."""

    runs: pd.DataFrame  # one row per run of every complete record (may be empty)
    failed: list[dict]  # failed jobs: study, job_id, path, error
    skipped: list[Skipped]  # unreadable or malformed record files, with the reason
    set_aside: list[str] = field(default_factory=list)  # further copies of a job already read (a copied study folder)
    # the runs of jobs whose runs are rows (`points`: searches and transfer checks), which the LR
    # curves' analysis does not read (`analysis/tuning.py`, `analysis/transfer.py` do)
    points: pd.DataFrame = field(default_factory=pd.DataFrame)

    def skipped_in(self, study: str) -> tuple[int, int]:
        """(records, runs) of `study` that were skipped: its verdicts leave them out."""
        mine = [s for s in self.skipped if s.study == study]
        return len(mine), sum(s.runs for s in mine)


def scan(root: str | Path) -> Scan:
    """Read every record below `root`, each job once; a bad file is skipped, and every skip and
    every copy set aside is said with a `SkippedRecordWarning`."""
    root = Path(root)
    if not root.exists():
        raise NoRecordsError(f"'{root}' does not exist; give the results folder of a sweep (e.g. results/)")
    if not root.is_dir():
        raise NoRecordsError(f"'{root}' is a file, not a folder; give the results folder of a sweep (e.g. results/)")
    rows, failed, skipped = [], [], []
    found = []
    for path in sorted(root.rglob(RECORD_NAME)):
        try:
            found.append((path, read_record(path), None))
        except RecordError as e:
            found.append((path, e.record, str(e).removeprefix(f"{path}: ")))
    kept, set_aside = once_per_job(found)
    for path, rec, why in kept:
        study = _study(path, rec)
        if why is not None:
            skipped.append(Skipped(str(path), study, _run_count(rec), why))
        elif rec["status"] != "complete":
            failed.append({"study": study, "job_id": rec.get("job_id"), "path": str(path), "error": rec.get("error")})
        else:
            try:
                rows.extend(_rows(rec))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                skipped.append(Skipped(str(path), study, len(rec["runs"]), f"malformed record ({e.__class__.__name__}: {e})"))
    for message in [*map(str, skipped), *set_aside]:
        warnings.warn(message, SkippedRecordWarning, stacklevel=2)
    points = [r for r in rows if r.get("points.kind") is not None]
    plain = [r for r in rows if r.get("points.kind") is None]
    return Scan(_frame(plain), failed, sorted(skipped, key=lambda x: x.path), set_aside, _frame(points))


Found = tuple[Path, Any, "str | None"]  # a record file, what was read of it, why it cannot be used (None: it can)


def once_per_job(found: list[Found]) -> tuple[list[Found], list[str]]:
    """Each job of each study once, however many copies of its record the folder holds (a study
    folder copied or renamed beside the original). The copy read is the first of: a usable one,
    a complete one, the one in its own folder (`<study>/<job_id>/`), the first by path. Returns the
    records kept, in path order, and a line for each copy set aside."""
    copies: dict[tuple, list[Found]] = {}
    for path, rec, why in found:
        job = rec.get("job_id") if isinstance(rec, dict) else None
        key = (_study(path, rec), job) if isinstance(job, str) else (None, str(path))  # no id: its own job
        copies.setdefault(key, []).append((path, rec, why))
    kept, aside = [], []
    for (study, job), versions in copies.items():
        best = min(versions, key=lambda f: (f[2] is not None, f[2] is None and f[1]["status"] != "complete",
                                            (f[0].parent.parent.name, f[0].parent.name) != (study, job), str(f[0])))
        kept.append(best)
        aside += [f"set aside {path}: another copy of job {job} of study {study}"
                  + ("" if why is None else f" ({why})") + f"; read once, from {best[0]}"
                  for path, _, why in versions if path != best[0]]
    return sorted(kept, key=lambda f: str(f[0])), aside


def _study(path: Path, record) -> str:
    """The study a record belongs to: its config's name, else the name of the folder above its job's."""
    config = record.get("config") if isinstance(record, dict) else None
    name = config.get("name") if isinstance(config, dict) else None
    return name if isinstance(name, str) else path.parent.parent.name


def _run_count(record) -> int:
    runs = record.get("runs") if isinstance(record, dict) else None
    return len(runs) if isinstance(runs, list) else 0


def table(records: Iterable[dict]) -> pd.DataFrame:
    """The runs of the given complete records as one table, as `scan` makes it (an adaptive
    sweep analyses exactly the jobs it planned, not whatever else its folder holds)."""
    return _frame([row for rec in records for row in _rows(rec)])


def _frame(rows: list[dict]) -> pd.DataFrame:
    # object columns keep each config value as the record wrote it: an integer key
    # that some parameterizations lack stays an integer, not a float beside NaNs
    df = _legacy_defaults(_legacy_inputs(pd.DataFrame(rows, dtype=object)))
    if not df.empty:
        for m in ("run_seed", "lr", "log2_lr", "initial_loss", "grid_value", *METRICS, *SCALE_AXES):
            if m in df.columns:
                df[m] = pd.to_numeric(df[m], errors="coerce")
        df["diverged"] = df["diverged"].astype(bool)
    return df


def _legacy_inputs(df: pd.DataFrame) -> pd.DataFrame:
    """A config key whose value is itself an input (model.source, which `_rows` moves to its `inputs.`
    column) is one in a record written before records kept `inputs` too: its config value fills
    that column, and the config column goes (else such a record would form a group of its own).
    Where no record has `inputs`, nothing changes: the key tells groups apart, as it did."""
    for col in [c for c in df.columns if c.startswith(INPUTS)]:
        key = col.removeprefix(INPUTS)
        if key in df.columns and not (df[col].notna() & df[key].notna()).any():  # a data path is kept beside its content
            df[col] = df[col].where(df[col].notna(), df[key])
            df = df.drop(columns=key)
    return df


def _legacy_defaults(df: pd.DataFrame) -> pd.DataFrame:
    """A key added to an option after some of a study's jobs ran (`param.sde_rule`) is missing from
    their records and set in the newer ones: where it is at the value the older jobs computed with
    (`config.added_values`), the two are one group, as their ids say, not two. Only an option whose
    records partly lack a key of its own is looked up (the lookup imports the options, and torch)."""
    from lrtransfer.options import GROUPS

    def missing(v) -> bool:  # a key the record lacks (NaN), told apart from one set to null (None)
        return isinstance(v, float) and math.isnan(v)

    for col in [c for c in df.columns if c.partition(".")[0] in GROUPS and not c.endswith(".name")]:
        group, _, key = col.partition(".")
        owner = f"{group}.name"
        if owner not in df.columns or "." in key:
            continue
        if not df[col].isna().any():  # the common case, vectorised: no row lacks it (NaN) or holds null
            continue
        lacks = df[col].map(missing)
        if not lacks.any() or lacks.all():
            continue
        for name in set(df.loc[lacks, owner]) & set(df.loc[~lacks, owner]):
            values = added_values(group, name)
            if key in values:
                df.loc[lacks & (df[owner] == name), col] = values[key]
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
        if axis not in flat and imported(rec):  # a table's runs may have no such scale (a horizon study's)
            continue
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"config.{axis}={v!r} is not a positive number")
    # A second inner axis (`grid.<key>`): its key is a config column (`grid_key`, so that such
    # a job never joins the groups of plain ones), each run's value a run column
    # (`grid_value`), and the key's own column is empty (NaN): no one value holds for the job.
    for k in [k for k in flat if k == "grid" or k.startswith("grid.")]:
        del flat[k]
    if not isinstance(flat["study"], str):
        raise ValueError(f"config.name={flat['study']!r} is not a study name")
    for k, v in flat.items():  # a list (model.width_key's channel multiples) as its JSON text: a value to group by
        if isinstance(v, list):
            flat[k] = json.dumps(v)
    if imported(rec):
        flat["source"] = source_words(rec["source"])
    found = inner_grid(rec["config"])
    if found is not None:
        flat["grid_key"], flat[found[0]] = found[0], math.nan
    # A job whose runs are rows (`points`: a search's round, a transfer check's scans): each run's own
    # values are its config's (the key's column holds the run's value); the rows themselves are the runs
    rows = rec["config"].get("points")
    rows = rows if isinstance(rows, dict) and rows.get("log2_lr") else None
    keys = list(rows["keys"]) if rows else []
    for k in [k for k in flat if k.startswith("points.") and not (rows and k in POINTS_KEPT)]:
        del flat[k]
    if rows:
        flat["job_wall_time_s"] = rec.get("wall_time_s")
    for k, v in (rec.get("inputs") or {}).items():
        flat[INPUTS + k] = v
        if flat.get(k) == v:  # model.source: its value is the input, no key that tells groups apart
            del flat[k]
    created, index = rec.get("created"), rec.get("sweep_index")  # a record that does not say has no such column
    if isinstance(created, str):
        flat["created"] = created
    if isinstance(index, int) and not isinstance(index, bool):
        flat["sweep_index"] = index
    out = []
    for run in rec["runs"]:
        extra = {} if found is None else {"grid_value": float(run["grid"][found[0]])}
        extra.update({k: float(run["grid"][k]) for k in keys})
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


def imported(rec: dict) -> bool:
    """A job whose runs came from a table (`lrtransfer import`): its record says where from."""
    source = rec.get("source")
    return isinstance(source, dict) and source.get("kind") == IMPORTED


def source_words(source: dict) -> str:
    """Where an imported job's runs came from, in words: the `source` column of its runs."""
    table, sha = source.get("table"), source.get("sha256")
    return f"imported from {table if isinstance(table, str) else '?'} (sha256 {sha[:12] if isinstance(sha, str) else '?'})"


def scan_runs(root: str | Path) -> Scan:
    """`scan`, refusing a folder without one finished run to analyse."""
    found = scan(root)
    if found.runs.empty and found.points.empty:
        raise NoRecordsError(f"no finished records under '{root}'; run `lrtransfer sweep` first")
    return found


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per run of every complete record below `root`: config columns (dotted) + run columns."""
    return scan_runs(root).runs


def export_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The runs as a flat table (no per-step history): identity, config columns, then run columns."""
    run = [c for c in RUN_COLUMNS if c in df.columns]
    first = [c for c in ("study", *JOB_COLUMNS, *SCALE_AXES) if c in df.columns]
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

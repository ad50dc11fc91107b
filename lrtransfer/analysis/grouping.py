"""Grouping: which runs form one family of LR curves, and which keys name it.

A *group* is a family of LR curves equal in everything but the scale axis and
the seed. Its `fixed` values name it: the usual identity keys (`SHOWN`) and
whatever varies between groups.

The scale axis is one mechanism for every key: the first candidate (`width`,
`depth`, then every other positive numeric config key by name) that takes more
than one value among runs equal in every other key. So width and depth keep
their precedence, and a study whose curves differ only in `train.steps`,
`train.batch_size` or `data.train_size` is read along that key. A key other than
width or depth may bring another along (`tied`): at a fixed number of examples,
train.steps halves as train.batch_size doubles, and the batch is the axis.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real
from typing import NamedTuple

import numpy as np
import pandas as pd

import lrtransfer.analysis.versions as versions
from lrtransfer.analysis.records import (
    HISTORY_COLUMNS,
    INPUTS,
    JOB_COLUMNS,
    RUN_COLUMNS,
    SCALE_AXES,
    SkippedRecordWarning,
    plain,
)
from lrtransfer.analysis.versions import Superseded
from lrtransfer.config import RUN_SETTINGS

# Columns that never define a group: replicates, the LR grid, how a job ran and where
# its results also went (RUN_SETTINGS: engine, tracker; a command's folder and runs at a time), the
# table imported runs came from.
_NOT_GROUPING = ("seed", "n_seeds", "results_dir", "source", "trainer.cwd", "trainer.parallel", *JOB_COLUMNS)
# ... nor what a job was built from (`inputs.`): two versions of a group's files are one group's (`versions`)
_NOT_GROUPING_PREFIX = ("lr.", "hydra.", INPUTS, *(f"{s}." for s in RUN_SETTINGS))
# Config values worth naming in a group's `fixed` (besides whatever varies).
SHOWN = ("study", "model.name", "model.class", "trainer.label", "param.name", "optim.name", "data.name", "train.steps",
         "train.batch_size")


def config_columns(df: pd.DataFrame) -> list[str]:
    """The columns that can tell groups apart: config keys, less replicates, the LR grid, the engine and tracker."""
    metrics = {*RUN_COLUMNS, *HISTORY_COLUMNS}
    return [
        c
        for c in df.columns
        if c not in metrics and c not in _NOT_GROUPING and not c.startswith(_NOT_GROUPING_PREFIX)
    ]


def scale_axis(df: pd.DataFrame) -> str:
    """The key that varies within groups: the first of `axis_candidates` that takes more than one
    value among runs equal in every other config key (but those `tied` to it). When none does (one
    scale per group): width, or where the runs have none (imported from a table) the first candidate
    they have."""
    columns = config_columns(df)
    for axis in axis_candidates(df, varying(df, columns)):
        keys = [c for c in columns if c != axis and c not in tied(df, axis, columns)]
        if not keys or (df.groupby(keys, dropna=False)[axis].nunique() > 1).any():
            return axis
    return next(iter(axis_candidates(df, columns)), SCALE_AXES[0])


def tied(df: pd.DataFrame, axis: str, columns: list[str]) -> list[str]:
    """The keys that change with `axis` and only with it, one value for each of its values and back,
    among runs equal in every other key: a fixed-examples study's train.steps beside its
    train.batch_size (study=batch_examples). They go with the axis, not into a group's name. Width
    and depth tie nothing, nor are tied: a width study stays one whatever moves with it."""
    if axis in SCALE_AXES:
        return []
    out = []
    for c in axis_candidates(df, varying(df, [k for k in columns if k != axis])):
        rest = [k for k in columns if k not in (axis, c)]
        parts = [sub for _, sub in df.groupby(rest, dropna=False)] if rest else [df]
        if c not in SCALE_AXES and all(sub.groupby(axis)[c].nunique().max() <= 1 and sub.groupby(c)[axis].nunique().max() <= 1
                                       for sub in parts):
            out.append(c)
    return out


def axis_candidates(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """The keys of `keys` that can be a scale axis, in precedence order: `SCALE_AXES` first, then
    the others by name. A candidate's every value is a positive finite number (its drift is per
    doubling, on log2 of the key, and a key set to inf, `train.diverge_factor`, has none), where the
    key is set."""
    def positive_numbers(c: str) -> bool:
        v = df[c].dropna()
        return bool(len(v)) and all(isinstance(x, Real) and not isinstance(x, (bool, np.bool_)) and 0 < x < math.inf
                                    for x in v)

    ok = [c for c in keys if positive_numbers(c)]
    return [a for a in SCALE_AXES if a in ok] + sorted(c for c in ok if c not in SCALE_AXES)


def scale_value(v) -> int | float:
    """A scale as a plain number: an integer when it is one (width 64, train.steps 300), else a float."""
    v = float(v)
    return int(v) if v.is_integer() else v


class Part(NamedTuple):
    """One group as `partition` finds it: its scale axis, defining values, runs, and the jobs left
    out as built from older versions of its inputs (`versions.Superseded`; None: none were)."""

    axis: str
    fixed: dict
    runs: pd.DataFrame
    superseded: Superseded | None = None


def partition(df: pd.DataFrame, all_versions: bool = False) -> list[Part]:
    """Each group's scale axis, defining values (`fixed`) and runs; studies in name order, and a
    study's groups in the order its sweeps gave them (`first_job`).

    Each study is grouped on its own, so that what a study's groups are called
    never depends on the other studies in the folder. A group whose jobs were built from
    several versions of its inputs (`versions`) is its newest version's runs, or with
    `all_versions` a group per version.
    """
    return [part for _, rows in df.groupby("study", sort=True) for part in _study_groups(rows, all_versions)]


def versioned(df: pd.DataFrame, all_versions: bool = False) -> pd.DataFrame:
    """The runs table as the other readers see it (`lrtransfer export`): without the runs of jobs
    built from older versions of a group's inputs, which one warning per group names; with
    `all_versions`, every run, and where a group has several versions its version's label
    (`inputs`)."""
    if not any(c.startswith(INPUTS) for c in df.columns):
        return df
    with warnings.catch_warnings():  # its runs held twice are each exported: no word about counting them once
        warnings.simplefilter("ignore", SkippedRecordWarning)
        parts = partition(df, all_versions)
    if all_versions:
        label = {j: p.fixed[versions.VERSION] for p in parts if versions.VERSION in p.fixed for j in p.runs["job_id"]}
        return df.assign(**{versions.VERSION: df["job_id"].map(label)}) if label else df
    old = {j for p in parts if p.superseded for j in p.superseded.jobs}
    for p in parts:
        if p.superseded:
            where = "  ".join(f"{k}={v}" for k, v in p.fixed.items())
            warnings.warn(f"{where}: {p.superseded.warning()}", SkippedRecordWarning, stacklevel=2)
    return df[~df["job_id"].isin(old)] if old else df


def first_job(runs: pd.DataFrame) -> tuple:
    """When a group's first job started (its record's `created`, then its number in the sweep, which
    ties within a second): the sweep's order, the command line's (`param=standard,mup` puts
    standard first) or a study config's. Records that do not say (older ones) tie, and keep the
    order of their keys."""
    created = runs["created"].map(lambda c: c if isinstance(c, str) else "") if "created" in runs else None
    index = pd.to_numeric(runs["sweep_index"], errors="coerce").fillna(0) if "sweep_index" in runs else None
    if created is None:
        return ("", 0)
    pairs = list(zip(created, index if index is not None else [0] * len(runs)))
    return min(pairs)


def _study_groups(df: pd.DataFrame, all_versions: bool) -> list[Part]:
    # keys no job of this study has (other studies' options), or all null; a run column stays even
    # when empty (every run diverged: no loss at all), as the curves and counts are read off it
    df = df.drop(columns=[c for c in df.columns if c not in RUN_COLUMNS and df[c].isna().all()])
    axis = scale_axis(df)
    if axis not in SCALE_AXES:  # records hold config values as written: the axis' become numbers to sort and fit
        df = df.assign(**{axis: pd.to_numeric(df[axis])})
    keys = [c for c in config_columns(df) if c != axis and c not in tied(df, axis, config_columns(df))]
    pieces: list[tuple[pd.DataFrame, str, Superseded | None]] = []
    for _, sub in df.groupby(keys, dropna=False, sort=True):
        found = versions.split(sub)
        if all_versions:
            pieces += [(v.runs, v.label, None) for v in found]
        else:
            pieces.append((found[0].runs, found[0].label if len(found) == 1 else None, versions.superseded(found)))
    pieces = _copied_seeds(_once_per_run(pieces, [*keys, axis]), axis)
    pieces.sort(key=lambda p: first_job(p[0]))  # stable: records that do not say keep their keys' order
    kept = pd.concat([p[0] for p in pieces]) if pieces else df
    shown = [k for k in (*SHOWN, *SCALE_AXES) if k != axis]
    shown += [c for c in varying(kept, keys) if c not in shown]
    out = []
    for sub, label, old in pieces:
        # values from the rows themselves: groupby's keys turn integers beside NaN into floats
        fixed_all = sub.iloc[0][keys].to_dict()
        # a key this group's config does not have (another parameterization's) is not shown
        fixed = {k: whole(k, plain(fixed_all[k])) for k in shown if k in fixed_all}
        if "grid_key" in sub and sub["grid_key"].notna().any():  # a second inner axis: part of its name everywhere
            fixed.pop("grid_key", None)  # said once, as grid=
            fixed["grid"] = sub["grid_key"].dropna().iloc[0]
        if label:  # one of several versions of its inputs, all shown
            fixed[versions.VERSION] = label
        out.append(Part(axis, {k: v for k, v in fixed.items() if v is not None}, sub, old))
    return out


def whole(key: str, v):
    """A width or depth as the integer it is: the column turns into floats where some runs have none
    (a table's runs imported beside a sweep's, `import --append`), and `depth=3.0` reads as a new key."""
    return int(v) if key in SCALE_AXES and isinstance(v, float) and v.is_integer() else v


def _once_per_run(pieces: list, keys: list[str]) -> list:
    """Each run once: two jobs of one group can hold the same run (seed=0,1,2, then seed=0 n_seeds=3
    trains seeds 0-2 again in a job of another id), which would count it twice. Jobs of two versions
    of the inputs are never the same run: they are apart already (`versions`)."""
    out, repeated = [], 0
    for sub, label, old in pieces:
        same = [*keys, "run_seed", "log2_lr", *(["grid_value"] if "grid_value" in sub else [])]
        twice = sub.duplicated(subset=same, keep="first")
        repeated += int(twice.sum())
        out.append((sub[~twice], label, old))
    if repeated:
        study = pieces[0][0]["study"].iloc[0]
        warnings.warn(f"study {study}: {repeated} run(s) are held by two jobs (the same seed and LR, as "
                      "seed=0,1,2 and then seed=0 n_seeds=3 train); each is counted once", SkippedRecordWarning,
                      stacklevel=3)
    return out


def _copied_seeds(pieces: list, axis: str) -> list:
    """One run counted once, however many seeds it was recorded under. A script that ignores its
    `{seed}` (or a table whose seed column is not what seeded the run) gives every seed of a scale
    the same losses at every LR; resampled as independent seeds they would give that scale's optimum
    an interval of zero width. Where two or more seeds of a scale ran at an LR (and value of the
    second axis), and at every such LR their losses are equal to the last digit recorded, that
    scale's runs are one seed's: each LR's first, under the lowest seed, with a warning."""
    out, copied = [], {}
    for sub, label, old in pieces:
        cols = ["log2_lr", *(["grid_value"] if "grid_value" in sub else [])]
        losses = [c for c in ("train_loss", "eval_loss") if c in sub]
        parts = []
        for scale, s in sub.groupby(axis, sort=True):
            shared = s[s.duplicated(subset=cols, keep=False)]  # points two or more seeds ran
            if s["run_seed"].nunique() < 2 or shared.empty or shared[losses].isna().all(axis=None):
                parts.append(s)
                continue
            same = shared.groupby(cols, dropna=False)[losses].nunique(dropna=False).le(1).all(axis=None)
            if not same:
                parts.append(s)
                continue
            seeds = sorted(s["run_seed"].unique())
            copied.setdefault(f"{seeds[0]:g}..{seeds[-1]:g}" if len(seeds) > 2 else f"{seeds[0]:g}, {seeds[1]:g}",
                              []).append(scale)
            one = s.sort_values("run_seed", kind="stable").drop_duplicates(subset=cols, keep="first")
            parts.append(one.assign(run_seed=seeds[0]))
        changed = len(parts) and sum(map(len, parts)) < len(sub)
        out.append((pd.concat(parts) if changed else sub, label, old))
    for seeds, scales in copied.items():
        study = pieces[0][0]["study"].iloc[0]
        warnings.warn(f"study {study}: at {axis} {', '.join(f'{whole(axis, v)}' for v in scales)}, seeds {seeds} gave "
                      "the same losses at every LR they share (a script that ignores its {seed}?); counted as one "
                      "seed there, its interval from the curve's noise", SkippedRecordWarning, stacklevel=3)
    return out


def varying(df: pd.DataFrame, keys: list[str]) -> list[str]:
    """The keys that take more than one value among the runs that have them.

    A key that some runs lack (an option's own key, such as muP's `param.base_width`
    beside SP) does not vary for that: only two values of it do. A key set to null
    is a value (`data.train_size` None against 1000 varies).
    """
    def values(c: str) -> pd.Series:
        text = df[c].astype(str)  # a missing key reads "nan", a null one "None"
        return text[text != "nan"]

    return [c for c in keys if values(c).nunique() > 1]


def telling_keys(fixeds: list[dict]) -> list[str]:
    """The keys whose values tell these groups apart, in order.

    An option's own key (`param.gain`) counts only where it tells apart groups of
    the same option (`param.name`): a study of param=mup and param=equalized is told
    apart by `param.name`, and `param.gain` matters only between equalized groups.
    """

    def owner(k: str) -> str | None:
        group, _, leaf = k.rpartition(".")
        return f"{group}.name" if group and leaf != "name" else None

    def telling(k: str) -> bool:
        peers: dict[str, set[str]] = {}
        for f in fixeds:
            if k in f:
                peers.setdefault(str(f.get(owner(k))) if owner(k) else "", set()).add(str(f[k]))
        differs = any(len(v) > 1 for v in peers.values())
        return differs or (owner(k) is None and len({str(f.get(k)) for f in fixeds}) > 1)

    return [k for k in dict.fromkeys(k for f in fixeds for k in f) if telling(k)]

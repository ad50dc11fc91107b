"""Grouping: which runs form one family of LR curves, and which keys name it.

A *group* is a family of LR curves equal in everything but the scale axis and
the seed. Its `fixed` values name it: the usual identity keys (`SHOWN`) and
whatever varies between groups.

The scale axis is one mechanism for every key: the first candidate (`width`,
`depth`, then every other positive numeric config key by name) that takes more
than one value among runs equal in every other key. So width and depth keep
their precedence, and a study whose curves differ only in `train.steps`,
`train.batch_size` or `data.train_size` is read along that key.
"""

from __future__ import annotations

import math
import warnings
from numbers import Real

import numpy as np
import pandas as pd

from lrtransfer.analysis.records import HISTORY_COLUMNS, RUN_COLUMNS, SCALE_AXES, SkippedRecordWarning, plain
from lrtransfer.config import RUN_SETTINGS

# Columns that never define a group: replicates, the LR grid, how a job ran and where
# its results also went (RUN_SETTINGS: engine, tracker; a command's folder and runs at a time).
_NOT_GROUPING = ("seed", "n_seeds", "results_dir", "job_id", "trainer.cwd", "trainer.parallel")
_NOT_GROUPING_PREFIX = ("lr.", "hydra.", *(f"{s}." for s in RUN_SETTINGS))
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
    value among runs equal in every other config key; width when none does (one scale per group)."""
    columns = config_columns(df)
    for axis in axis_candidates(df, varying(df, columns)):
        keys = [c for c in columns if c != axis]
        if not keys or (df.groupby(keys, dropna=False)[axis].nunique() > 1).any():
            return axis
    return SCALE_AXES[0]


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


def partition(df: pd.DataFrame) -> list[tuple[str, dict, pd.DataFrame]]:
    """Each group's scale axis, defining values (`fixed`) and runs; studies in name order.

    Each study is grouped on its own, so that what a study's groups are called
    never depends on the other studies in the folder.
    """
    return [part for _, rows in df.groupby("study", sort=True) for part in _study_groups(rows)]


def _study_groups(df: pd.DataFrame) -> list[tuple[str, dict, pd.DataFrame]]:
    # keys no job of this study has (other studies' options), or all null; a run column stays even
    # when empty (every run diverged: no loss at all), as the curves and counts are read off it
    df = df.drop(columns=[c for c in df.columns if c not in RUN_COLUMNS and df[c].isna().all()])
    axis = scale_axis(df)
    if axis not in SCALE_AXES:  # records hold config values as written: the axis' become numbers to sort and fit
        df = df.assign(**{axis: pd.to_numeric(df[axis])})
    keys = [c for c in config_columns(df) if c != axis]
    df = _once_per_run(df, [*keys, axis])
    shown = [k for k in (*SHOWN, *SCALE_AXES) if k != axis]
    shown += [c for c in varying(df, keys) if c not in shown]
    out = []
    for _, sub in df.groupby(keys, dropna=False, sort=True):
        # values from the rows themselves: groupby's keys turn integers beside NaN into floats
        fixed_all = sub.iloc[0][keys].to_dict()
        # a key this group's config does not have (another parameterization's) is not shown
        fixed = {k: plain(fixed_all[k]) for k in shown if k in fixed_all}
        if "grid_key" in sub and sub["grid_key"].notna().any():  # a second inner axis: part of its name everywhere
            fixed.pop("grid_key", None)  # said once, as grid=
            fixed["grid"] = sub["grid_key"].dropna().iloc[0]
        out.append((axis, {k: v for k, v in fixed.items() if v is not None}, sub))
    return out


def _once_per_run(df: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """Each run once: two jobs of one study can hold the same run (seed=0,1,2, then seed=0 n_seeds=3
    trains seeds 0-2 again in a job of another id), which would count it twice."""
    same = [*keys, "run_seed", "log2_lr", *(["grid_value"] if "grid_value" in df else [])]
    repeated = df.duplicated(subset=same, keep="first")
    if repeated.any():
        study = df["study"].iloc[0]
        warnings.warn(f"study {study}: {int(repeated.sum())} run(s) are held by two jobs (the same seed and LR, as "
                      "seed=0,1,2 and then seed=0 n_seeds=3 train); each is counted once", SkippedRecordWarning,
                      stacklevel=2)
        df = df[~repeated]
    return df


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

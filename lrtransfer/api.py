"""The Python API, for notebooks and scripts: what the CLI does, as functions that return data.

Each function validates its input as the CLI does and raises `UserError` with the
CLI's one-line message (the bad value, the valid choices) instead of printing it
and exiting. A sweep leaves the caller's process as it found it.
"""

# (For the reader of the code; the API page shows the docstrings.) Hydra's error switch and
# the logging it configures per job are restored after a sweep (`sweeps/launch.py`);
# `lrtransfer/__init__.py` exposes these functions lazily, so `import lrtransfer` stays light.

from __future__ import annotations

import math
import numbers
import os
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from lrtransfer.errors import UserError

if TYPE_CHECKING:
    import pandas as pd

    from lrtransfer.sweeps.plan import Plan


@contextmanager
def user_errors() -> Iterator[None]:
    """Known input errors (Hydra's, OmegaConf's, ours) become one `UserError`; bugs pass through."""
    from lrtransfer.sweeps.messages import describe

    try:
        yield
    except UserError:
        raise
    except Exception as e:
        message = describe(e)
        if message is None:
            raise
        raise UserError(message) from None


def _got(value: object) -> str:
    """`value` as the error shows it: its repr on one line (cut at 60 characters) and its type."""
    text = " ".join(repr(value).split())
    return f"{text[:57]}... ({type(value).__name__})" if len(text) > 60 else f"{text} ({type(value).__name__})"


# What a CLI flag in the overrides would do, and the API's way to it; Hydra would print and exit.
_PLAN = "lrtransfer.plan(overrides) lists a sweep's jobs"
_HELP = f"help(lrtransfer.sweep) documents the API, {_PLAN}"
_SWEEPS = "the API always runs a sweep; leave it out"
FLAGS = {"-h": _HELP, "--help": _HELP, "--cfg": _PLAN, "-c": _PLAN, "--info": _PLAN, "-i": _PLAN, "--plan": _PLAN,
         "-m": _SWEEPS, "--multirun": _SWEEPS, "--rerun": "pass rerun=True", "--until-decided": "pass until_decided=True",
         "--budget": "pass budget=..."}


def _argv(overrides: str | Sequence[str]) -> list[str]:
    """The overrides as the CLI's words: a list or tuple of str, or one str split at whitespace;
    a CLI flag (-h, --cfg, -m, ...) is refused, naming the API argument that does its work."""
    if isinstance(overrides, str):
        argv = overrides.split()
    elif isinstance(overrides, (list, tuple)):
        argv = list(overrides)
    else:
        raise UserError(f"overrides must be a list of str such as ['width=64,256', 'optim=sgd'] "
                        f"(or one space-separated str), got {_got(overrides)}")
    for i, word in enumerate(argv):
        if not isinstance(word, str):
            raise UserError(f"overrides[{i}] must be a str such as 'width=64', got {_got(word)}")
        if word.startswith("-"):
            flag = word.split("=", 1)[0]
            how = FLAGS.get(flag, "the API takes key=value overrides only")
            raise UserError(f"overrides[{i}] {word!r} is a CLI flag, not an override; {how}")
    return argv


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise UserError(f"{name} must be True or False, got {_got(value)}")
    return value


def _text(value: object, name: str, example: str) -> str:
    if not isinstance(value, str):
        raise UserError(f"{name} must be a str such as {example!r}, got {_got(value)}")
    return value


def _directory(directory: object) -> str | os.PathLike:
    """A results folder as a str or an os.PathLike of str (pathlib.Path); bytes and other types are refused."""
    try:
        path = os.fspath(directory)
    except TypeError:
        path = None
    if not isinstance(path, str):
        raise UserError(f"directory must be a path (a str or pathlib.Path), got {_got(directory)}")
    if not path:
        raise UserError("directory must be a path (a str or pathlib.Path), got '' (give '.' for this folder)")
    return directory


def _scale(at: object) -> float:
    """`predict`'s `at`: a real number (not a bool), finite, positive and within the sane range of a scale (the CLI's too)."""
    from lrtransfer.analysis.prediction import BEYOND_RANGE, SCALE_RANGE

    if isinstance(at, bool) or not isinstance(at, numbers.Real):
        raise UserError(f"at must be a positive number (the scale, e.g. 4096), got {_got(at)}")
    try:
        value = float(at)
    except OverflowError:
        value = math.inf
    if not value > 0 or not math.isfinite(value):
        raise UserError(f"at must be a finite positive number (the scale, e.g. 4096), got {_got(at)}")
    if not SCALE_RANGE[0] <= value <= SCALE_RANGE[1]:  # 2.0 ** log2(scale) x drift overflows past it
        raise UserError(f"at={value:g} is {BEYOND_RANGE}")
    return value


def sweep(overrides: str | Sequence[str] = (), *, rerun: bool = False, metric: str = "train_loss",
          until_decided: bool = False, budget: int | str | None = None) -> dict:
    """Run a sweep as `lrtransfer sweep OVERRIDES` does (finished jobs are skipped) and summarise it.

    Returns {"groups": [...] (as `summarize`), "study_dirs": [...], "ran": N, "skipped": N,
    "failed": [{"overrides", "job_id", "error"}, ...], "adaptive": {...} or None}. A failed
    job does not raise: the others' results are worth having; look at "failed".
    `until_decided=True` runs it in rounds until each verdict is decided (`--until-decided`),
    within `budget` run-steps (20000) or wall time ("90m"); "adaptive" then says how each
    group ended (its rounds, run-steps, seeds and LRs per scale, and what would decide it).
    """
    from lrtransfer.sweeps.outcome import outcome_dict, until_decided_overrides
    from lrtransfer.sweeps.launch import SweepReport, launch

    from lrtransfer.analysis import check_metric

    argv = _argv(overrides)
    _flag(rerun, "rerun")
    _flag(until_decided, "until_decided")
    check_metric(_text(metric, "metric", "train_loss"))  # before any training, not after the sweep
    if isinstance(budget, bool):
        raise UserError(f"budget must be run-steps (20000) or a time ('90m'), got {_got(budget)}")
    with user_errors():
        argv += until_decided_overrides(until_decided, budget)
    if rerun:
        argv.append("hydra.sweeper.rerun=true")
    with user_errors():
        report = launch(argv)
    if not isinstance(report, SweepReport):
        raise UserError("nothing was run (a Hydra flag such as --cfg, --info or -h?); "
                        "lrtransfer.plan(overrides) lists a sweep's jobs")
    groups = []
    for d in report.study_dirs:
        if any(Path(d).rglob("record.json")):
            groups += summarize(d, metric)
    busy = sum(r.get("status") == "busy" for r in report.returns)
    return {
        "groups": groups,
        "study_dirs": [str(d) for d in report.study_dirs],
        "ran": len(report.returns) - busy,
        "skipped": report.skipped,
        "failed": [{k: r.get(k) for k in ("overrides", "job_id", "error")} for r in report.failed],
        "adaptive": None if report.adaptive is None else outcome_dict(report.adaptive),
    }


def plan(overrides: str | Sequence[str] = ()) -> Plan:
    """The jobs `sweep(overrides)` would run, each with its status and work (`lrtransfer sweep --plan`),
    and the time they take (`estimate_s`, in seconds): each job priced by its own model's finished jobs,
    else by a few of its steps timed here when first asked (`rates` says which)."""
    from lrtransfer.sweeps.launch import launch

    argv = _argv(overrides)
    with user_errors():
        found = launch(argv, action="plan")
    if found is None:  # as `sweep`: a Hydra flag would have printed instead (refused by _argv)
        raise UserError("nothing was planned; lrtransfer.plan(overrides) takes key=value overrides")
    return found


def load(directory: str | Path = "results") -> pd.DataFrame:
    """Every run under DIRECTORY (a results folder or one study) as one row: config columns and metrics."""
    from lrtransfer import analysis

    _directory(directory)
    with user_errors():
        return analysis.load_runs(directory)


def summarize(directory: str | Path = "results", metric: str = "train_loss", all_versions: bool = False) -> list[dict]:
    """The groups of `lrtransfer summary --json`: per scale the best log2 LR and its interval, the drift, a verdict
    (`all_versions`: each version of a group's data or model files a group, as `--all-versions`)."""
    from lrtransfer import analysis

    _directory(directory)
    analysis.check_metric(_text(metric, "metric", "train_loss"))
    if not isinstance(all_versions, bool):
        raise UserError(f"all_versions must be True or False, got {all_versions!r}")
    with user_errors():
        return analysis.summarize(directory, metric, all_versions)["groups"]


def predict(directory: str | Path, at: float, axis: str | None = None, metric: str = "train_loss") -> list[dict]:
    """`lrtransfer predict DIRECTORY --at AT [--axis AXIS] --json`'s predictions: per group on `axis`
    (every group when None), the optimum its optima predict at `at` with a 95% prediction interval,
    and the penalty of the smallest scale's best LR there. Groups with an undetermined verdict are
    left out (UserError when none is left)."""
    from lrtransfer.analysis import check_metric, scan_runs, scanned_groups
    from lrtransfer.analysis.prediction import prediction_dict, predict_groups

    _directory(directory)
    at = _scale(at)
    if axis is not None:
        _text(axis, "axis", "width")
    check_metric(_text(metric, "metric", "train_loss"))
    # as the CLI's predict: each group says what of its study was left out (skipped records, failed jobs)
    preds, _ = predict_groups(scanned_groups(scan_runs(directory), metric), at, axis, name="at", where=f"'{directory}'")
    return [prediction_dict(p) for p in preds]

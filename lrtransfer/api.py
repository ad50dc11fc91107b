"""The Python API, for notebooks and scripts: what the CLI does, as functions that return data.

Each function validates its input as the CLI does and raises `UserError` with the
CLI's one-line message (the bad value, the valid choices) instead of printing it
and exiting. A sweep leaves the caller's process as it found it.
"""

# (For the reader of the code; the API page shows the docstrings.) Hydra's error switch and
# the logging it configures per job are restored after a sweep (`sweeps/launch.py`);
# `lrtransfer/__init__.py` exposes these functions lazily, so `import lrtransfer` stays light.

from __future__ import annotations

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


def _argv(overrides: str | Sequence[str]) -> list[str]:
    return overrides.split() if isinstance(overrides, str) else [str(o) for o in overrides]


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

    argv = _argv(overrides)
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

    with user_errors():
        return launch(_argv(overrides), action="plan")


def load(directory: str | Path = "results") -> pd.DataFrame:
    """Every run under DIRECTORY (a results folder or one study) as one row: config columns and metrics."""
    from lrtransfer import analysis

    with user_errors():
        return analysis.load_runs(directory)


def summarize(directory: str | Path = "results", metric: str = "train_loss") -> list[dict]:
    """The groups of `lrtransfer summary --json`: per scale the best log2 LR and its interval, the drift, a verdict."""
    from lrtransfer import analysis

    analysis.check_metric(metric)
    with user_errors():
        return analysis.summarize(directory, metric)["groups"]


def predict(directory: str | Path, at: float, axis: str | None = None, metric: str = "train_loss") -> list[dict]:
    """`lrtransfer predict DIRECTORY --at AT [--axis AXIS] --json`'s predictions: per group on `axis`
    (every group when None), the optimum its optima predict at `at` with a 95% prediction interval,
    and the penalty of the smallest scale's best LR there. Groups with an undetermined verdict are
    left out (UserError when none is left)."""
    from lrtransfer.analysis import check_metric, groups, load_runs
    from lrtransfer.analysis.prediction import prediction_dict, predict_groups

    check_metric(metric)
    preds, _ = predict_groups(groups(load_runs(directory), metric), at, axis, name="at", where=f"'{directory}'")
    return [prediction_dict(p) for p in preds]

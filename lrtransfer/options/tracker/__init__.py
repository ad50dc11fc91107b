"""Experiment trackers: where a finished job's runs also go (`tracker=tensorboard|wandb|mlflow`).

The record (`record.json`) stays the result; a tracker is a second home for it, so a
researcher can browse the runs in the tool they already use. `tracker=none` (the
default) logs nothing. Each option is a module here with its typed options (`OPTIONS`)
and a `log(options, job)` that writes one tracker run per LR run of the job: its
loss curve and final numbers, tagged by the job (study, job id, title, overrides)
and by the run (log2_lr, lr, seed). Every tracker writes local files by default
(TensorBoard event files, W&B offline runs, an MLflow file store) under the study's
folder, so nothing needs a network or an account.

The job calls `log` after its record is written (`lrtransfer.sweeps.job`), from the record's
runs: the engine never knows about trackers, a tracker's failure never loses a
result, and a tracker's config is no part of a job's identity (`config.RUN_SETTINGS`).
A job the sweep skips because its record is complete is not logged again; `--rerun`
logs it again.

A tracker's library is imported only inside `log`: composing a config, `--plan` and
`lrtransfer --help` never import it. Its options' `check` (run by `config.validate`
before any job trains) only looks the library up, and refuses a missing one naming
the extra to install.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field
from pathlib import Path

from lrtransfer.options.schema import ConfigError

# The final numbers of a run that every tracker logs (RunResult's fields); None when
# the run has none (a diverged run's final_loss, a task without accuracy).
FINAL = ("final_loss", "eval_loss", "eval_acc", "initial_loss", "diverged", "diverged_step")


@dataclass
class Job:
    """What a tracker logs of a finished job: who it is and its runs (the record's)."""

    study: str  # the study's name (`name`)
    job_id: str
    title: str  # the job in words ("mlp mup adam w=128 d=3 s=0")
    overrides: str  # the sweep's overrides that made this job ("width=128 param=mup"), "" outside a sweep
    study_dir: Path  # <results_dir>/<name>: where trackers write by default
    config: dict = field(default_factory=dict)  # the job's semantic config, dotted keys -> scalars
    runs: list[dict] = field(default_factory=list)  # RunResult fields, as in the record

    def tags(self) -> dict[str, str]:
        """The job's tags, shared by every run of it."""
        return {"study": self.study, "job_id": self.job_id, "title": self.title, "overrides": self.overrides}


def run_name(run: dict) -> str:
    """A run within its job: `log2_lr=-6 seed=0`, and its value of a second inner axis
    (`grid.<key>`) when the job has one: `log2_lr=-6 seed=0 optim.weight_decay=0.001`."""
    return " ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in run_tags(run).items()
                    if k != "lr")


def run_tags(run: dict) -> dict:
    """The run's own tags: its learning rate (log2 and plain), seed and grid value, if any."""
    keys = {"log2_lr": float(run["log2_lr"]), "lr": float(run["lr"]), "seed": int(run["seed"])}
    return {**keys, **{k: float(v) for k, v in (run.get("grid") or {}).items()}}


def curve(run: dict) -> list[tuple[int, float]]:
    """The run's thinned loss curve as (step, loss); the steps after a divergence (None) are left out."""
    return [(int(s), float(v)) for s, v in zip(run.get("history_step") or [], run.get("history_loss") or []) if v is not None]


def last_step(run: dict) -> int:
    steps = run.get("history_step") or [0]
    return int(steps[-1])


def require(option: str, package: str) -> None:
    """Refuse `tracker=OPTION` before any job trains when its library is not installed."""
    if importlib.util.find_spec(package) is None:
        raise ConfigError(f"tracker={option} needs the {package} package, which is not installed here: "
                          f"pip install 'lrtransfer[{option}]' (or tracker=none)")


def folder(configured: str | None, job: Job, default: str) -> Path:
    """The tracker's local folder: the one configured, else `<results_dir>/<name>/<default>`."""
    return Path(configured).expanduser() if configured else job.study_dir / default

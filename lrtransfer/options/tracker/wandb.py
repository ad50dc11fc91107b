"""tracker=wandb: Weights & Biases runs, offline by default.

One W&B run per LR run, grouped by job (`group=<job_id>`) in a project named after
the study: its config is the job's config with the job's and run's tags (log2_lr,
lr, seed), its history the `train_loss` curve at the record's steps, its summary the
final numbers. Offline (the default), runs are written under `<dir>/wandb/` (`dir`:
`<results_dir>/<name>` unless set) and uploaded later with `wandb sync`;
`mode=online` sends them as they are logged (after `wandb login`). The process is
left as found: W&B's service is stopped after each job and its hooks removed.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from enum import Enum
from typing import Optional

from lrtransfer.options import tracker


class Mode(str, Enum):
    offline = "offline"  # local files only; upload later with `wandb sync`
    online = "online"  # needs `wandb login` and a network


@dataclass
class WandbOptions:
    name: str = "wandb"
    mode: Mode = Mode.offline
    dir: Optional[str] = None  # None: <results_dir>/<name> (W&B adds wandb/)
    project: Optional[str] = None  # None: the study's name
    entity: Optional[str] = None  # the W&B user or team (online); None: W&B's default

    def check(self) -> None:
        tracker.require(self.name, "wandb")


OPTIONS = WandbOptions


def log(options: WandbOptions, job: tracker.Job) -> None:
    import wandb

    root = tracker.folder(options.dir, job, "")
    root.mkdir(parents=True, exist_ok=True)
    # A record of numbers, not of the machine: no console capture, system metrics, code,
    # git state or package list (each run would read every installed package's metadata).
    settings = wandb.Settings(console="off", silent=True, save_code=False, disable_git=True,
                              x_disable_stats=True, x_disable_meta=True, x_save_requirements=False,
                              disable_job_creation=True)
    hooks = sys.exit, sys.excepthook
    ours = "WANDB_SERVICE" not in os.environ  # else the caller's own W&B service, left running
    try:
        _log_runs(wandb, options, job, root, settings)
    finally:
        if ours:
            wandb.teardown()  # stops the service process, and drops WANDB_SERVICE from the environment
        sys.exit, sys.excepthook = hooks  # wandb.init wraps both for the rest of the process's life


def _log_runs(wandb, options: WandbOptions, job: tracker.Job, root, settings) -> None:
    for run in job.runs:
        with wandb.init(
            mode=options.mode.value,
            dir=str(root),
            project=options.project or job.study,
            entity=options.entity,
            group=job.job_id,
            job_type=job.title[:64],
            name=f"{job.title} {tracker.run_name(run)}",
            tags=[job.job_id, tracker.run_name(run)],
            config={**job.config, **job.tags(), **tracker.run_tags(run)},
            settings=settings,
            reinit="create_new",
        ) as logged:
            for step, loss in tracker.curve(run):
                logged.log({"train_loss": loss}, step=step)
            logged.summary.update({k: run[k] for k in tracker.FINAL if run.get(k) is not None})

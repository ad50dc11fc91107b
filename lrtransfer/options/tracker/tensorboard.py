"""tracker=tensorboard: TensorBoard event files, one run folder per LR run.

Layout: `<dir>/<job_id>/log2_lr=<x>,seed=<s>[,<grid key>=<v>]/events.out.tfevents.*`, where `dir` is
`<results_dir>/<name>/tensorboard` unless set. Each run folder holds the scalar
`train_loss` at the record's (thinned) history steps, the final numbers as scalars
`final/<key>` at the last step, and the job's and run's tags as HParams (so the
HParams dashboard lists every run of a study by log2_lr, seed, width, ...), written
with PyTorch's own `SummaryWriter` (which needs the `tensorboard` package).

A re-logged run (`--rerun`) replaces its event files rather than adding a second set,
which TensorBoard would draw over the first.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lrtransfer.options import tracker


@dataclass
class TensorBoardOptions:
    name: str = "tensorboard"
    dir: Optional[str] = None  # None: <results_dir>/<name>/tensorboard

    def check(self) -> None:
        tracker.require(self.name, "tensorboard")


OPTIONS = TensorBoardOptions


def run_folder(root: Path, job: tracker.Job, run: dict) -> Path:
    return root / job.job_id / tracker.run_name(run).replace(" ", ",")


def log(options: TensorBoardOptions, job: tracker.Job) -> None:
    from torch.utils.tensorboard import SummaryWriter
    from torch.utils.tensorboard.summary import hparams

    root = tracker.folder(options.dir, job, "tensorboard")
    for run in job.runs:
        folder = run_folder(root, job, run)
        for old in folder.glob("events.out.tfevents.*"):
            old.unlink()
        finals = {f"final/{k}": float(run[k]) for k in tracker.FINAL if run.get(k) is not None}
        params = {**job.config, **job.tags(), **tracker.run_tags(run)}
        params = {k: v for k, v in params.items() if isinstance(v, (bool, int, float, str))}
        with SummaryWriter(log_dir=str(folder)) as writer:
            for step, loss in tracker.curve(run):
                writer.add_scalar("train_loss", loss, step)
            for key, value in finals.items():
                writer.add_scalar(key, value, tracker.last_step(run))
            for summary in hparams(params, finals):
                writer.file_writer.add_summary(summary)
            writer.add_text("job", f"{job.title} · {job.overrides or 'no overrides'} · job {job.job_id}")

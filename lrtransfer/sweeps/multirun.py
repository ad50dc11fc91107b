"""One multirun: a list of jobs validated, the finished ones skipped, the rest launched.

A fixed sweep is one multirun; an adaptive sweep one per round. `plan` composes and
validates every job (and checks its data, memory and results folder) before any
trains; `run_jobs` hands the rest to Hydra's configured launcher in batches and
collects each job's return in a `SweepReport`, stopping at a consistent point after
Ctrl-C or SIGTERM with every finished record kept.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from lrtransfer.config import ConfigError, validate
from lrtransfer.errors import Fault
from lrtransfer.store import is_complete, job_dir, write_text_atomic
from lrtransfer.sweeps.plan import run_steps
from lrtransfer.training import stop


@dataclass
class PlannedJob:
    overrides: list[str]
    job_id: str
    folder: Path
    run_steps: int = 0  # its work: LR runs x seeds x steps


@dataclass
class SweepReport:
    study_dirs: list[Path] = field(default_factory=list)
    total: int = 0
    skipped: int = 0
    returns: list[dict] = field(default_factory=list)
    adaptive: object = None  # an adaptive sweep's outcome (`adaptive.Outcome`): rounds, spend, verdicts

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.returns if r.get("status") not in ("complete", "busy", "done", "interrupted")]

    def count(self, *statuses: str) -> int:
        return sum(r.get("status") in statuses for r in self.returns)


def plan(sweeper, job_overrides: list[list[str]], *, rerun: bool,
         folders: list[Path] | None = None) -> tuple[list[PlannedJob], int, list[Path]]:
    """Compose and validate every job; return the jobs to run, how many were already done, and the study folders.
    `folders`, when given, gets every job's folder, in order (done or not)."""
    loader = sweeper.hydra_context.config_loader
    todo: list[PlannedJob] = []
    seen: set[str] = set()
    skipped = 0
    studies: dict[Path, None] = {}
    checked_data: set[str] = set()
    tasks: dict[tuple, object] = {}  # the data of the jobs, built once, to size their runs
    cuda_wanted = False
    common = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    for overrides in job_overrides:
        cfg = loader.load_sweep_config(sweeper.config, list(overrides))
        try:
            typed = validate(cfg)
        except ConfigError as e:
            varying = [o for o in overrides if o not in common]
            where = f" (job {' '.join(varying)})" if varying else ""
            raise ConfigError(f"{e}{where}") from None
        cuda_wanted |= typed.engine.device.startswith("cuda")
        folder = job_dir(cfg)
        if folders is not None:
            folders.append(folder)
        studies[folder.parent] = None
        if folder.name in seen:
            continue
        seen.add(folder.name)
        if not rerun and is_complete(folder):
            skipped += 1
            continue
        if repr(typed.data) not in checked_data:  # finished jobs need no data
            from lrtransfer.options.data import ensure_files

            ensure_files(typed.data)
            checked_data.add(repr(typed.data))
        _check_memory(typed, tasks)
        todo.append(PlannedJob(list(overrides), folder.name, folder, run_steps(typed)))
    if cuda_wanted:
        from lrtransfer.training.build import select_device

        for job in todo:
            select_device(loader.load_sweep_config(sweeper.config, job.overrides).engine.device)
    for d in studies:
        check_writable(d)
    return todo, skipped, list(studies)


def _check_memory(typed, tasks: dict) -> None:
    """Refuse a job whose single run cannot fit in memory (see `memory.check_fits`), or whose
    optimizer refuses its model (`build.check`), before any trains."""
    import torch

    from lrtransfer.training import build
    from lrtransfer.training.memory import check_fits

    device = build.select_device(typed.engine.device)
    dtype = build.DTYPES[typed.train.dtype.value]
    key = (repr(typed.data), dtype)
    if key not in tasks:
        tasks[key] = build.task(typed, torch.device("cpu"), dtype)
    built = build.job(typed, device, data=tasks[key])
    check_fits(built, f"width={typed.width} depth={typed.depth} train.batch_size={typed.train.batch_size}")
    build.check(built)


def check_writable(folder: Path) -> None:
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as e:
        raise ConfigError(f"results folder '{folder}' is not writable ({e.strerror}); set results_dir=PATH") from None


def run_jobs(sweeper, todo: list[PlannedJob], report: SweepReport, first_index: int = 0) -> None:
    """Launch `todo` through the configured launcher (in batches of `max_batch_size`) and add each
    job's return to `report`; raise `stop.Interrupted` after a stop, every finished record kept.
    An adaptive sweep calls it once per round: each round is one multirun."""
    from lrtransfer.sweeps import launchers, progress

    if not todo:
        return
    launchers.prepare(sweeper.config)
    for d in dict.fromkeys([*report.study_dirs, *(j.folder.parent for j in todo)]):
        try:
            write_text_atomic(d / "multirun.yaml", OmegaConf.to_yaml(sweeper.config))
        except OSError as e:
            raise _fault(e, todo, d / "multirun.yaml") from None
    batch_size = sweeper.max_batch_size or len(todo)
    with progress.sweep_display({j.folder: j.run_steps for j in todo}, enabled=_progress_enabled(sweeper.config)), \
            launchers.finished(sweeper.config):
        for i in range(0, len(todo), batch_size):
            batch = todo[i : i + batch_size]
            try:
                results = sweeper.launcher.launch([j.overrides for j in batch], initial_job_idx=first_index + i)
            except OSError as e:  # Hydra writing a job's .hydra/ or job.log, on a full disk
                raise _fault(e, batch) from None
            except Exception:  # a worker killed by its launcher after the stop (submitit's controller does)
                if stop.requested():
                    raise stop.Interrupted(_interrupted_message(report)) from None
                raise
            for job, r in zip(batch, results):
                report.returns.append(_job_return(job, r))
            if stop.requested() or report.count("interrupted"):
                raise stop.Interrupted(_interrupted_message(report))


def _fault(e: OSError, jobs: list[PlannedJob], path: Path | None = None) -> Fault:
    """A write that failed while jobs were being launched (a full disk) as one line; the jobs that
    had not finished leave no half-written folder behind."""
    from lrtransfer.sweeps.job import discard_unfinished

    for job in jobs:
        discard_unfinished(job.folder)
    done = sum(is_complete(job.folder) for job in jobs)
    where = path or e.filename or f"in {jobs[0].folder.parent}"
    return Fault(f"could not write {where} ({e.strerror or e}): the sweep "
                 f"stopped, every finished record kept ({done} of the {len(jobs)} job(s) it was launching finished); "
                 "free some space (or set results_dir=PATH) and re-run the same command to compute the rest")


def _interrupted_message(report: SweepReport) -> str:
    saved = sum(bool(r.get("checkpoint")) for r in report.returns if r.get("status") == "interrupted")
    finished = report.count("complete", "failed")
    line = f"interrupted: {finished} job(s) finished here and every finished record is kept"
    if saved:
        return f"{line}; {saved} running job(s) saved a checkpoint: re-run the same command to resume them"
    return f"{line}; no checkpoint was saved (engine.checkpoint_s=0, or no job was running): re-run to compute the rest"


def _job_return(job: PlannedJob, r) -> dict:
    from hydra.core.utils import JobStatus

    if r.status == JobStatus.COMPLETED and isinstance(r._return_value, dict):
        return {"overrides": job.overrides, **r._return_value}
    error = r._return_value
    return {
        "overrides": job.overrides,
        "job_id": job.job_id,
        "status": "failed",
        "error": f"{error.__class__.__name__}: {error}" if isinstance(error, BaseException) else str(error),
    }


def _progress_enabled(cfg) -> bool:
    return bool(OmegaConf.select(cfg, "engine.progress", default=True))

"""One multirun: a list of jobs validated, the finished ones skipped, the rest launched.

A fixed sweep is one multirun; an adaptive sweep one per round. `plan` composes and
validates every job (and checks its data, memory and results folder) before any
trains; `run_jobs` hands the rest to Hydra's configured launcher in batches and
collects each job's return in a `SweepReport`, stopping at a consistent point after
Ctrl-C or SIGTERM with every finished record kept.
"""

from __future__ import annotations

import re
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lrtransfer.config import Config, ConfigError, run_steps, validate
from lrtransfer.errors import Fault
from lrtransfer.store import is_complete, job_dir, probe_writable, write_text_atomic
from lrtransfer.sweeps.messages import too_large
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
    tuning: Path | None = None  # a search's study folder (`tuning.run`), or a transfer check's

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.returns if r.get("status") not in ("complete", "busy", "done", "interrupted")]

    def count(self, *statuses: str) -> int:
        return sum(r.get("status") in statuses for r in self.returns)


def compose(sweeper, overrides: list[str]) -> DictConfig:
    """A job's config, composed once per sweep: whether the sweep is adaptive, its checks and its
    rounds all read the same one (composing is most of what refusing bad input costs). Never
    modified by its readers."""
    composed = sweeper.__dict__.setdefault("_lrtransfer_composed", {})
    loader = sweeper.hydra_context.config_loader
    if "_lrtransfer_compose" not in loader.__dict__:
        _reuse_for_launcher(loader, sweeper.config, composed)
    key = tuple(overrides)
    if key not in composed:
        composed[key] = loader._lrtransfer_compose(sweeper.config, list(overrides))
    return composed[key]


def _reuse_for_launcher(loader, master: DictConfig, composed: dict) -> None:
    """A launcher composes each job again, as the sweep already did to check it: it gets a copy of
    the sweep's instead (the launcher writes the job's number into its config), a tenth of the cost."""
    import copy

    loader._lrtransfer_compose = loader.load_sweep_config

    def load_sweep_config(master_config, sweep_overrides):
        done = composed.get(tuple(sweep_overrides))
        if done is not None and master_config is master:
            return copy.deepcopy(done)
        return loader._lrtransfer_compose(master_config, sweep_overrides)

    loader.load_sweep_config = load_sweep_config


def shown(override: str) -> str:
    """An override as a job's line says it: a job's rows (`points=...`, hundreds of numbers) by what
    they are (`points: search round 2, 32 rows`)."""
    if not override.startswith("points="):
        return override
    import re

    kind, rnd = re.search(r"kind:(\w+)", override), re.search(r"round:(\d+)", override)
    lrs = re.search(r"log2_lr:\[([^\]]*)\]", override)
    rows = len(lrs.group(1).split(",")) if lrs and lrs.group(1) else 0
    what = (kind.group(1) if kind else "rows") + (f" round {rnd.group(1)}" if rnd and rnd.group(1) != "0" else "")
    return f"points: {what}, {rows} rows"


@dataclass
class CheckedJob:
    """One job of a sweep, composed and validated, and what is on disk for it."""

    overrides: list[str]
    varying: str  # the overrides that tell it from the sweep's other jobs
    cfg: DictConfig
    typed: Config
    folder: Path
    complete: bool  # a complete record is there (and no --rerun): nothing to check or train


def check_jobs(sweeper, job_overrides: list[list[str]], *, rerun: bool, writing: bool = True,
               folders: list[Path] | None = None) -> list[CheckedJob]:
    """Every check a sweep makes before it trains, for `lrtransfer sweep` and `--plan` alike: each
    job composed and validated; for each that will train, its data on disk, its memory, its
    optimizer's view of the model and its device; each study folder writable. Raises the first
    refusal as one ConfigError line. Jobs are returned once each (two sets of overrides can make
    one job), in order; `folders`, when given, gets every job's folder, in order (repeats too).
    `writing=False` (a plan) fetches no data (a job that would download its data is not checked
    for it), makes no token cache (`options.data.build`) and leaves no folder behind."""
    out: list[CheckedJob] = []
    seen: set[str] = set()
    checked_data: set[str] = set()
    tasks: dict[tuple, object] = {}  # the data of the jobs, built once, to size their runs
    common = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    for overrides in job_overrides:
        cfg = compose(sweeper, overrides)
        varying = " ".join(shown(o) for o in overrides if o not in common)
        try:
            typed = validate(cfg)
        except ConfigError as e:  # which job, where there are several
            raise ConfigError(f"{e} (job {varying})" if varying and len(job_overrides) > 1 else str(e)) from None
        folder = job_dir(cfg)
        if folders is not None:
            folders.append(folder)
        if folder.name in seen:
            continue
        seen.add(folder.name)
        job = CheckedJob(list(overrides), varying, cfg, typed, folder, not rerun and is_complete(folder))
        out.append(job)
        if typed.trainer.name != "engine":  # the user's command: no data, memory or device of the engine's
            from lrtransfer.options.trainer.command import refuse_engine_keys

            refuse_engine_keys(overrides)
            continue
        if job.complete:  # finished jobs need no data
            continue
        if repr(typed.data) not in checked_data and (writing or not getattr(typed.data, "download", False)):
            from lrtransfer.options.data import ensure_files

            ensure_files(typed.data, writing=writing)
            checked_data.add(repr(typed.data))
        _check_memory(typed, tasks, writing)
    if any(j.typed.engine.device.startswith("cuda") for j in out if j.typed.trainer.name == "engine"):
        from lrtransfer.training.build import select_device

        for job in out:
            if not job.complete and job.typed.trainer.name == "engine":
                select_device(job.typed.engine.device)
    for d in dict.fromkeys(j.folder.parent for j in out):
        check_writable(d, keep=writing)
    return out


def plan(sweeper, job_overrides: list[list[str]], *, rerun: bool,
         folders: list[Path] | None = None) -> tuple[list[PlannedJob], int, list[Path]]:
    """Check every job (`check_jobs`); return the jobs to run, how many were already done, and the
    study folders. `folders`, when given, gets every job's folder, in order (done or not)."""
    jobs = check_jobs(sweeper, job_overrides, rerun=rerun, folders=folders)
    todo = [PlannedJob(j.overrides, j.folder.name, j.folder, run_steps(j.typed)) for j in jobs if not j.complete]
    return todo, sum(j.complete for j in jobs), list(dict.fromkeys(j.folder.parent for j in jobs))


def _check_memory(typed, tasks: dict, writing: bool = True) -> None:
    """Refuse a job whose single run cannot fit in memory (see `memory.check_fits`), or whose
    optimizer refuses its model (`build.check`), before any trains."""
    import torch

    from lrtransfer.training import build
    from lrtransfer.training.memory import check_fits

    device = build.select_device(typed.engine.device)
    dtype = build.DTYPES[typed.train.dtype.value]
    key = (repr(typed.data), dtype)
    where = f"width={typed.width} depth={typed.depth} train.batch_size={typed.train.batch_size}"
    try:
        if key not in tasks:
            tasks[key] = build.task(typed, torch.device("cpu"), dtype, writing=writing)
        built = build.job(typed, device, data=tasks[key])
        check_fits(built, where)
    except (OverflowError, MemoryError, RuntimeError, TypeError, ValueError) as e:
        if not too_large(e):
            raise
        said = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise ConfigError(f"{where} data={typed.data.name}: too large to build on this machine "
                          f"({said[:200]}); choose smaller sizes") from None
    build.check(built)


def check_writable(folder: Path, keep: bool = True) -> None:
    """Refuse a study folder that cannot be made or written to; `keep=False` removes the folders
    it made to find out."""
    made = [p for p in (folder, *folder.parents) if not p.exists()]  # deepest first
    try:
        probe_writable(folder)
    except OSError as e:
        raise ConfigError(f"results folder '{folder}' is not writable ({e.strerror}); set results_dir=PATH") from None
    finally:
        for p in made if not keep else ():
            with suppress(OSError):
                p.rmdir()


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
            except Exception as e:  # a worker killed by its launcher after the stop (submitit's controller does)
                if stop.requested():
                    raise stop.Interrupted(_interrupted_message(report)) from None
                failed = _worker_write_error(e)
                if failed is not None:
                    raise _fault(failed, batch) from None
                raise
            for job, r in zip(batch, results):
                report.returns.append(_job_return(job, r))
            if stop.requested() or report.count("interrupted"):
                raise stop.Interrupted(_interrupted_message(report))


def _worker_write_error(e: Exception) -> OSError | None:
    """What a submitit worker could not write (Hydra's `.hydra/` or job.log on a full disk, under
    hydra/launcher=processes or slurm), which comes back as submitit's FailedJobError with the
    worker's traceback as its text: the OSError that traceback ends in, else None. (A failure inside
    a job never comes back so: `job.run_job` returns it in the job's record.)"""
    if type(e).__name__ != "FailedJobError":
        return None
    found = re.findall(r"^\w*Error: \[Errno (\d+)\] ([^\n]+?)(?:: '([^']*)')?$", str(e), re.M)
    if not found:
        return None
    number, why, path = found[-1]
    return OSError(int(number), why, path or None)


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

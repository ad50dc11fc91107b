"""One job of a sweep: one configuration trained at every learning rate of its grid.

`run_job` is the task function Hydra's launchers call, in this process or in a
worker. It lives at module level so launchers can pickle it by reference. It
writes exactly one record, atomically, whether the job finished or failed; a job
cut off before that leaves no record, so a re-run recomputes it.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import os
import platform
import re
import resource
import shutil
import sys
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime, timezone
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lrtransfer import __version__
from lrtransfer.errors import new_scope, warn
from lrtransfer.sweeps import progress, requeue
from lrtransfer.training import stop
from lrtransfer.sweeps.checkpoint import NAME as CHECKPOINT
from lrtransfer.sweeps.checkpoint import FileCheckpoint
from lrtransfer.config import inputs, recorded, runs_per_job, validate
from lrtransfer.config import RUN_SETTINGS
from lrtransfer.store import is_complete, job_dir, job_id, write_record
from lrtransfer.sweeps.job_runs import runs_of

log = logging.getLogger(__name__)


def run_record(result) -> dict:
    """A run as its record writes it: a run without per-run values has no `grid` entry."""
    out = vars(result).copy()
    if not out.get("grid"):
        out.pop("grid", None)
    return out


def thread_count(requested: int) -> int:
    """0 means: what a launcher or the user asked for (OMP_NUM_THREADS, SLURM_CPUS_PER_TASK), else
    one. Threads of one step wait for each other, so whenever another process takes a core the
    whole step waits: two threads lose badly on a shared machine and gain little on an idle one
    (docs/performance.md). More threads are for a machine the job has to itself."""
    if requested > 0:
        return requested
    for var in ("OMP_NUM_THREADS", "SLURM_CPUS_PER_TASK"):
        env = os.environ.get(var, "")
        if env.isdigit() and int(env) > 0:
            return int(env)
    return 1


def versions(torch: bool = True) -> dict:
    """What computed a record; a job of the user's command (`torch=False`) does not load torch to say so."""
    if not torch:
        return {"lrtransfer": __version__, "python": platform.python_version()}
    import torch

    return {"lrtransfer": __version__, "torch": torch.__version__, "python": platform.python_version()}


def uses_engine(cfg) -> bool:
    """Whether lrtransfer's engine trains the job (trainer=engine), not the user's command."""
    return cfg.trainer.name == "engine"


def job_title(cfg) -> str:
    if not uses_engine(cfg):
        from lrtransfer.sweeps.command_job import title

        return title(cfg)
    return f"{cfg.model.name} {cfg.param.name} {cfg.optim.name} w={cfg.width} d={cfg.depth} s={cfg.seed}"


@contextmanager
def job_lock(folder: Path) -> Iterator[bool]:
    """An exclusive lock on the job folder; yields False when another process holds it.

    flock is released by the kernel when its holder dies, so a killed job never
    leaves a stale lock behind.
    """
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".lock", "w") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


class JobLog(logging.FileHandler):
    """A job's `job.log` (conf/hydra/job_logging/job_file.yaml). A line that cannot be written (a
    full disk) is lost quietly: the log is a courtesy, and what matters reaches the screen."""

    def handleError(self, record: logging.LogRecord) -> None:
        pass


HALF_WRITTEN = (".hydra", "job.log", progress.PROGRESS_NAME)  # what Hydra and a job write before the record


def discard_unfinished(folder: Path) -> None:
    """Remove what a job that never got far wrote (Hydra's `.hydra/`, its `job.log`, its progress),
    and the folder if nothing else is left: a folder with no record and no checkpoint holds no
    work. A job running in another process (its lock held) is left alone."""
    if not folder.is_dir() or (folder / "record.json").exists() or (folder / CHECKPOINT).exists():
        return
    with suppress(OSError), job_lock(folder) as mine:
        if not mine:
            return
        for name in HALF_WRITTEN:
            path = folder / name
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        for tmp in folder.glob(".*.tmp"):
            tmp.unlink(missing_ok=True)
        (folder / ".lock").unlink(missing_ok=True)
    with suppress(OSError):
        folder.rmdir()  # only if nothing else is left


def run_job(cfg: DictConfig) -> dict:
    """Train one job and write its record; never raises for a failure inside the job.

    A job another process is already running (two sweeps sharing a results
    folder) is left to it and reported as `busy`; one whose complete record
    appeared since the sweep planned (another sweep finished it) is `done`. A job
    stopped by Ctrl-C/SIGTERM, or started after one, returns as `interrupted`.
    """
    folder = job_dir(cfg)
    try:
        with requeue.checkpoint_first(), stop.worker():
            if stop.requested():
                return _summary(folder.name, "interrupted")
            with job_lock(folder) as mine:
                if not mine:
                    return _summary(folder.name, "busy")
                if not _rerun() and is_complete(folder):
                    return _summary(folder.name, "done")
                return _run_locked(cfg, folder)
    finally:
        _close_job_log(folder)


def _summary(job: str, status: str, **extra) -> dict:
    return {"job_id": job, "status": status, "error": None, "wall_time_s": 0.0, **extra}


def _sweep_index() -> int | None:
    """The job's number in its multirun (Hydra's `hydra.job.num`: its place in the sweep's order, the
    command line's); readers list groups in that order (None outside a sweep)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return None
    num = OmegaConf.select(HydraConfig.get(), "job.num", default=None)
    return num if isinstance(num, int) else None


def _rerun() -> bool:
    """Whether the sweep was asked to recompute complete records (`--rerun`)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return False
    return bool(OmegaConf.select(HydraConfig.get(), "sweeper.rerun", default=False))


def origin(folder: Path, rerun: bool) -> dict:
    """What a checkpoint of the job about to train says of that training (`FileCheckpoint`): a
    --rerun or not, the complete record it is to replace (its sha256; None: none there), and the
    versions. A --rerun resumes only a checkpoint of the same origin: one its own interrupted
    command saved, never one an earlier run left (made by other code, perhaps: the reason to rerun)."""
    replaces = hashlib.sha256((folder / "record.json").read_bytes()).hexdigest() if is_complete(folder) else None
    # plain str: torch's version is a str subclass, which a checkpoint's safe load refuses
    return {"rerun": rerun, "replaces": replaces, "versions": {k: str(v) for k, v in versions().items()}}


def _close_job_log(folder: Path) -> None:
    """Hydra points the root logger at each job's job.log and leaves it there: close this job's,
    so the launcher's next lines (and file handles) do not land in it."""
    root = logging.getLogger()
    for h in list(root.handlers):
        if isinstance(h, logging.FileHandler) and Path(h.baseFilename).parent == folder.resolve():
            root.removeHandler(h)
            h.close()


def _run_locked(cfg: DictConfig, folder: Path) -> dict:
    started = time.perf_counter()
    new_scope()  # each warning once a job
    engine = uses_engine(cfg)
    config = recorded(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True))
    base = {
        "job_id": job_id(cfg),
        "config": config,
        "inputs": inputs(config),  # what its data and model files held: readers tell two versions apart
        "created": datetime.now(timezone.utc).isoformat(timespec="microseconds"),  # jobs started within one second keep their order
        "sweep_index": _sweep_index(),
        "host": platform.node(),
        "versions": versions() if engine else versions(torch=False),
    }
    try:
        typed = validate(cfg)
        trained = _train_engine(typed, folder, base["job_id"]) if engine else _train_command(typed, folder)
        record = {
            **base,
            "status": "complete",
            "device": trained.pop("device"),
            "threads": trained.pop("threads"),
            "wall_time_s": round(time.perf_counter() - started, 3),
            **trained,
        }
    except stop.Interrupted:
        log.info("job %s interrupted", base["job_id"])
        kept = (folder / CHECKPOINT).exists() or any((folder / "runs").glob("*/result.json"))  # a command's ended runs
        return _summary(base["job_id"], "interrupted", checkpoint=kept)
    except Exception as e:  # recorded, reported at the end of the sweep; the sweep goes on
        log.exception("job failed")
        record = {
            **base,
            "status": "failed",
            "error": f"{e.__class__.__name__}: {e}",
            "traceback": traceback.format_exc(),
            "wall_time_s": round(time.perf_counter() - started, 3),
        }
    if record["status"] == "failed" and is_complete(folder):  # --rerun: a failure never replaces a result
        log.warning("keeping the complete record %s", folder / "record.json")
    else:
        try:
            write_record(folder, record)
        except OSError as e:  # a full disk: the checkpoint (if any) stays, a re-run finishes the job
            warn(f"could not write {folder / 'record.json'} ({e.strerror or e})")
            return _summary(base["job_id"], "failed", error=f"could not write its record: {e.strerror or e}")
    if record["status"] == "complete":
        FileCheckpoint(folder / CHECKPOINT, 0).discard()
        track(typed, record, folder)
    summary = {k: record.get(k) for k in ("job_id", "status", "error", "wall_time_s")}
    return {**summary, "failed_runs": record["failed_runs"]} if record.get("failed_runs") else summary


def _train_engine(typed, folder: Path, job: str) -> dict:
    """trainer=engine: the job's runs trained as ensembles by lrtransfer's engine, resumed from its checkpoint."""
    import torch

    from lrtransfer.training import build, engine

    torch.set_num_threads(thread_count(typed.engine.threads))
    built = build.job(typed)
    device = built.device
    runs = runs_of(typed)
    log.info("job %s: %d runs on %s", job, len(runs), device)
    rerun = _rerun()
    checkpoint = FileCheckpoint(folder / CHECKPOINT, typed.engine.checkpoint_s, origin(folder, rerun), only_own=rerun)
    steps_file = folder if typed.engine.progress else None  # read by the sweep's display alone
    with progress.job_steps(job_title(typed), typed.train.steps * len(runs), steps_file) as advance:
        results = engine.train(built, runs, progress=advance, checkpoint=checkpoint)
    return {"device": str(device), "threads": torch.get_num_threads(), "peak_memory_mib": peak_memory_mib(device),
            "runs": [run_record(r) for r in results]}


def _train_command(typed, folder: Path) -> dict:
    """trainer=command: each run a process of the user's command (`command_job`)."""
    from lrtransfer.sweeps import command_job

    runs = runs_per_job(typed)
    log.info("job %s: %d runs of %s, %d at a time", folder.name, runs, typed.trainer.command, typed.trainer.parallel)
    steps_file = folder if typed.engine.progress else None
    with progress.job_steps(job_title(typed), typed.train.steps * runs, steps_file) as advance:
        return command_job.train(typed, folder, rerun=_rerun(), progress=advance, should_stop=stop.requested)


def track(cfg, record: dict, folder: Path) -> None:
    """Log a finished job's runs to the configured tracker (`lrtransfer/options/tracker/`), after its record
    is written: a tracker that fails costs one warning line, never the result."""
    from lrtransfer import options
    from lrtransfer.options import tracker
    from lrtransfer.config import flatten, semantic

    job = tracker.Job(
        study=cfg.name,
        job_id=record["job_id"],
        title=job_title(cfg),
        overrides=" ".join(_overrides()),
        study_dir=folder.parent,
        config=flatten(semantic(record["config"])),
        runs=record["runs"],
    )
    started = time.perf_counter()
    try:
        options.module("tracker", cfg.tracker.name).log(cfg.tracker, job)
        log.info("job %s: %d runs logged to tracker=%s in %.1f s", job.job_id, len(job.runs), cfg.tracker.name,
                 time.perf_counter() - started)
    except Exception as e:  # the tracker's library, its files, its server: the record is safe already
        reason = str(e).strip().splitlines()[0] if str(e).strip() else ""
        warn(f"tracker={cfg.tracker.name}: job {job.job_id} was not logged "
                      f"({e.__class__.__name__}{': ' + reason if reason else ''}); its record is written")


def _overrides() -> list[str]:
    """The overrides that made this job (`width=64 param=mup`), [] outside a sweep: the user's,
    less those that never tell jobs apart (Hydra's own, results_dir, name, engine.*, tracker.*)."""
    from hydra.core.hydra_config import HydraConfig

    if not HydraConfig.initialized():
        return []
    task = OmegaConf.select(HydraConfig.get(), "overrides.task", default=None) or []
    ignored = ("hydra", "results_dir", "name", *RUN_SETTINGS)
    return [o for o in task if re.split(r"[./=]", o.lstrip("+~"), maxsplit=1)[0] not in ignored]


def peak_memory_mib(device) -> float:
    """The process's peak resident memory so far (on CUDA: the peak allocated on the device),
    in MiB. Under the in-process launcher the process runs many jobs: it is the peak of all so far."""
    import torch

    if device.type == "cuda":
        return round(torch.cuda.max_memory_allocated(device) / 2**20, 1)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return round(peak / (2**20 if sys.platform == "darwin" else 2**10), 1)


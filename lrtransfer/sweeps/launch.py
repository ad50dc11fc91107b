"""Sweeps: Hydra composes and launches, lrtransfer plans.

`launch` runs Hydra's own entry point with the user's overrides, so every Hydra
flag and launcher plugin works as documented. The primary config selects the
`lrtransfer` sweeper (`hydra_plugins/lrtransfer_sweeper`), a thin subclass of
Hydra's basic sweeper that calls `sweep` below. Before launching anything it:

1. expands the overrides into jobs (cartesian product, as Hydra's basic sweeper);
2. composes and validates every job's config, and checks that each job's data
   is on disk (downloading it once here when `data.download=true`), so a bad
   value or a missing dataset stops the sweep before any training;
3. drops jobs whose record is already complete (unless `--rerun`), so a re-run
   computes only what is missing, under any launcher, and nothing finished is
   submitted to a cluster again;
4. launches the rest through the configured launcher, then reports.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from lrtransfer.training import stop
from lrtransfer.config import ConfigError, validate
from lrtransfer.store import is_complete, job_dir, write_text_atomic
from lrtransfer.sweeps.plan import run_steps

if TYPE_CHECKING:
    from lrtransfer.sweeps.plan import Plan


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


# The report of the last sweep run in this process, for the CLI to print.
last_report: "SweepReport | Plan | None" = None
# Called with each round of an adaptive sweep as it ends (the CLI prints it); None: quiet.
on_round = None


def launch(argv: list[str], action: str = "run", on_round_end=None) -> SweepReport | Plan | None:
    """Run `lrtransfer sweep ARGV...` through Hydra; return the report (None for --cfg, --info, -h).

    action="plan" composes and validates every job and returns the `Plan` instead of running it.
    `on_round_end(round)`: called as each round of an adaptive sweep ends (`adaptive.Round`).
    """
    global last_report, on_round
    on_round = on_round_end
    from hydra import version
    from hydra._internal.utils import _run_hydra, get_args_parser

    import lrtransfer.store  # noqa: F401  (registers the job-id resolver)
    from lrtransfer.sweeps.job import run_job

    version.setbase("1.3")
    parser = get_args_parser()
    args = parser.parse_intermixed_args([*argv, f"hydra.sweeper.action={action}"])
    if not (args.cfg or args.info or args.shell_completion or args.run):
        # The config says MULTIRUN anyway; saying it here keeps Hydra from retrying a
        # failed composition in RUN mode, where any error became "Ambiguous value".
        args.multirun = True
    last_report = None
    with _caller_state_kept():
        _run_hydra(
            args=args,
            args_parser=parser,
            task_function=run_job,
            config_path="pkg://lrtransfer.conf",
            config_name="config",
        )
    return last_report


@contextmanager
def _caller_state_kept() -> Iterator[None]:
    """Hydra's errors raised (not printed and exited), and the caller's environment and logging left as found.

    HYDRA_FULL_ERROR makes Hydra raise, so the CLI (or a notebook) gets the exception;
    each job's logging config points the root logger at that job's log file.
    """
    import logging

    before = os.environ.get("HYDRA_FULL_ERROR")
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    os.environ["HYDRA_FULL_ERROR"] = "1"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("HYDRA_FULL_ERROR", None)
        else:
            os.environ["HYDRA_FULL_ERROR"] = before
        for h in root.handlers:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


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


def sweep(sweeper, arguments: list[str]) -> list:
    """The body of the lrtransfer sweeper (see module docstring)."""
    global last_report
    from lrtransfer.sweeps import adaptive

    job_overrides = expand(sweeper, arguments)
    _check_launcher(sweeper.config)
    if adaptive.requested(sweeper, job_overrides):
        last_report = adaptive.run(sweeper, job_overrides, on_round=on_round)
        return []
    if sweeper.action == "plan":
        from lrtransfer.sweeps.plan import survey

        last_report = survey(sweeper, job_overrides)
        return []
    todo, skipped, studies = plan(sweeper, job_overrides, rerun=sweeper.rerun)
    report = SweepReport(study_dirs=studies, total=len(todo) + skipped, skipped=skipped)
    last_report = report
    run_jobs(sweeper, todo, report)
    return []


def run_jobs(sweeper, todo: list[PlannedJob], report: SweepReport, first_index: int = 0) -> None:
    """Launch `todo` through the configured launcher (in batches of `max_batch_size`) and add each
    job's return to `report`; raise `stop.Interrupted` after a stop, every finished record kept.
    An adaptive sweep calls it once per round: each round is one multirun."""
    from lrtransfer.sweeps import launchers, progress

    if not todo:
        return
    launchers.prepare(sweeper.config)
    for d in dict.fromkeys([*report.study_dirs, *(j.folder.parent for j in todo)]):
        write_text_atomic(d / "multirun.yaml", OmegaConf.to_yaml(sweeper.config))
    batch_size = sweeper.max_batch_size or len(todo)
    with progress.sweep_display({j.folder: j.run_steps for j in todo}, enabled=_progress_enabled(sweeper.config)):
        for i in range(0, len(todo), batch_size):
            batch = todo[i : i + batch_size]
            try:
                results = sweeper.launcher.launch([j.overrides for j in batch], initial_job_idx=first_index + i)
            except Exception:  # a worker killed by its launcher after the stop (submitit's controller does)
                if stop.requested():
                    raise stop.Interrupted(_interrupted_message(report)) from None
                raise
            for job, r in zip(batch, results):
                report.returns.append(_job_return(job, r))
            if stop.requested() or report.count("interrupted"):
                raise stop.Interrupted(_interrupted_message(report))


def _interrupted_message(report: SweepReport) -> str:
    saved = sum(bool(r.get("checkpoint")) for r in report.returns if r.get("status") == "interrupted")
    finished = report.count("complete", "failed")
    line = f"interrupted: {finished} job(s) finished here and every finished record is kept"
    if saved:
        return f"{line}; {saved} running job(s) saved a checkpoint: re-run the same command to resume them"
    return f"{line}; no checkpoint was saved (engine.checkpoint_s=0, or no job was running): re-run to compute the rest"


def _check_launcher(cfg) -> None:
    """What the launcher would only refuse mid-launch, with a traceback."""
    n_jobs = OmegaConf.select(cfg, "hydra.launcher.n_jobs", default=None)
    if n_jobs == 0:
        raise ConfigError("hydra.launcher.n_jobs=0 runs nothing; valid: N > 0 jobs at once, or -1 (one per core)")


def expand(sweeper, arguments: list[str]) -> list[list[str]]:
    """The sweep's jobs, each as its list of overrides (the cartesian product, as Hydra's basic sweeper)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (sweeper.params or {}).items()] + list(arguments)
    parser = OverridesParser.create(config_loader=sweeper.hydra_context.config_loader)
    overrides = parser.parse_overrides(params)
    for o in overrides:
        if o.is_sweep_override():
            try:
                values = list(o.sweep_string_iterator())
            except ValueError as e:  # range() with a zero step
                raise ConfigError(f"cannot expand '{o.input_line}': {e}") from None
            if not values:
                raise ConfigError(f"'{o.input_line}' gives no values, so the sweep has no jobs")
    (job_overrides,) = sweeper.split_arguments(overrides, None)
    return job_overrides


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

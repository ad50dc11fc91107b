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
import sys
import tempfile
import types
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from lrtransfer.config import ConfigError, validate
from lrtransfer.store import is_complete, job_dir
from lrtransfer.sweep_plan import run_steps

if TYPE_CHECKING:
    from lrtransfer.sweep_plan import Plan


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

    @property
    def failed(self) -> list[dict]:
        return [r for r in self.returns if r.get("status") not in ("complete", "busy")]


# The report of the last sweep run in this process, for the CLI to print.
last_report: "SweepReport | Plan | None" = None


def launch(argv: list[str], action: str = "run") -> SweepReport | Plan | None:
    """Run `lrtransfer sweep ARGV...` through Hydra; return the report (None for --cfg, --info, -h).

    action="plan" composes and validates every job and returns the `Plan` instead of running it.
    """
    global last_report
    from hydra import version
    from hydra._internal.utils import _run_hydra, get_args_parser

    import lrtransfer.store  # noqa: F401  (registers the job-id resolver)
    from lrtransfer.job import run_job

    version.setbase("1.3")
    parser = get_args_parser()
    args = parser.parse_intermixed_args([*argv, f"hydra.sweeper.action={action}"])
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


def plan(sweeper, job_overrides: list[list[str]], *, rerun: bool) -> tuple[list[PlannedJob], int, list[Path]]:
    """Compose and validate every job; return the jobs to run, how many were already done, and the study folders."""
    loader = sweeper.hydra_context.config_loader
    todo: list[PlannedJob] = []
    seen: set[str] = set()
    skipped = 0
    studies: dict[Path, None] = {}
    prepared: set[str] = set()
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
        studies[folder.parent] = None
        if folder.name in seen:
            continue
        seen.add(folder.name)
        if not rerun and is_complete(folder):
            skipped += 1
            continue
        if repr(typed.data) not in prepared:  # finished jobs need no data
            from lrtransfer.data import prepare

            prepare(typed)
            prepared.add(repr(typed.data))
        todo.append(PlannedJob(list(overrides), folder.name, folder, run_steps(typed)))
    if cuda_wanted:
        from lrtransfer.engine import select_device

        for job in todo:
            select_device(loader.load_sweep_config(sweeper.config, job.overrides).engine.device)
    for d in studies:
        check_writable(d)
    return todo, skipped, list(studies)


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
    from lrtransfer import progress

    job_overrides = expand(sweeper, arguments)
    if sweeper.action == "plan":
        from lrtransfer.sweep_plan import survey

        last_report = survey(sweeper, job_overrides)
        return []
    todo, skipped, studies = plan(sweeper, job_overrides, rerun=sweeper.rerun)

    report = SweepReport(study_dirs=studies, total=len(todo) + skipped, skipped=skipped)
    last_report = report
    if not todo:
        return []
    for d in studies:
        OmegaConf.save(sweeper.config, d / "multirun.yaml")

    batch_size = sweeper.max_batch_size or len(todo)
    returns = []
    with progress.sweep_display({j.folder: j.run_steps for j in todo}, enabled=_progress_enabled(sweeper.config)):
        for i in range(0, len(todo), batch_size):
            batch = todo[i : i + batch_size]
            results = sweeper.launcher.launch([j.overrides for j in batch], initial_job_idx=i)
            for job, r in zip(batch, results):
                report.returns.append(_job_return(job, r))
            returns.append(results)
    return returns


def expand(sweeper, arguments: list[str]) -> list[list[str]]:
    """The sweep's jobs, each as its list of overrides (the cartesian product, as Hydra's basic sweeper)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    params = [f"{k}={v}" for k, v in (sweeper.params or {}).items()] + list(arguments)
    parser = OverridesParser.create(config_loader=sweeper.hydra_context.config_loader)
    (job_overrides,) = sweeper.split_arguments(parser.parse_overrides(params), None)
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



class _CallableModule(types.ModuleType):
    """`lrtransfer.sweep(overrides)` is the Python API's sweep (`lrtransfer.api.sweep`), though
    `lrtransfer.sweep` is also this module: importing a submodule binds its name in the package."""

    def __call__(self, *args, **kwargs):
        from lrtransfer.api import sweep as api_sweep

        return api_sweep(*args, **kwargs)


sys.modules[__name__].__class__ = _CallableModule

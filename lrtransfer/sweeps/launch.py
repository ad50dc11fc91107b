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
4. launches the rest through the configured launcher, then reports
   (`multirun.py`: one multirun), or, for `--until-decided`, runs rounds of them
   (`adaptive.py`).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from lrtransfer.config import ConfigError
from lrtransfer.sweeps.multirun import SweepReport, plan, run_jobs

if TYPE_CHECKING:
    from lrtransfer.sweeps.plan import Plan

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

    from lrtransfer.errors import new_scope

    new_scope(command=True)  # a study's warnings once a sweep (the Python API runs several in a process)
    from hydra._internal.utils import _run_hydra, get_args_parser

    import lrtransfer.store  # noqa: F401  (registers the job-id resolver)
    import lrtransfer.sweeps.launchers  # noqa: F401  (registers the resolver of submitit's local folder)
    from lrtransfer.sweeps.job import run_job

    version.setbase("1.3")
    parser = get_args_parser()
    parser.error = _refuse  # a bad Hydra flag is one line, not argparse's usage block
    args = parser.parse_intermixed_args(argv)
    if args.hydra_help:  # Hydra's own help, the same whatever the overrides
        args.overrides = []
    else:  # added once parsed, so a flag at the end (--info, --package) cannot take it as its value
        args.overrides.append(f"hydra.sweeper.action={action}")
    _refuse_output_keys(args.overrides)
    if not (args.cfg or args.info or args.shell_completion or args.run):
        # The config says MULTIRUN anyway; saying it here keeps Hydra from retrying a
        # failed composition in RUN mode, where any error became "Ambiguous value".
        args.multirun = True
    last_report = None
    with _caller_state_kept(), _mode_known(args.multirun):
        _run_hydra(
            args=args,
            args_parser=parser,
            task_function=run_job,
            config_path="pkg://lrtransfer.conf",
            config_name="config",
        )
    return last_report


@contextmanager
def _mode_known(multirun: bool) -> Iterator[None]:
    """Hydra composes the whole config once only to read `hydra.mode` from it, then again to run; a
    sweep's mode is MULTIRUN (the config says so, and so does `args.multirun`), so the first
    composition (half the time of a sweep that is refused, or of a one-job one) is skipped."""
    if not multirun:
        yield
        return
    from hydra._internal.hydra import Hydra
    from hydra.types import RunMode

    saved = Hydra.get_mode
    Hydra.get_mode = lambda self, config_name, overrides: RunMode.MULTIRUN
    try:
        yield
    finally:
        Hydra.get_mode = saved


def _refuse(message: str):
    raise ConfigError(f"{message} (lrtransfer sweep --help)")


# Hydra's keys for where a job's own files go: lrtransfer sets them under results_dir/name (a
# job's folder is its id); set from the command line they would write outside it (`../../x`).
OUTPUT_KEYS = ("hydra.sweep.", "hydra.run.", "hydra.output_subdir", "hydra.job.chdir")


def _refuse_output_keys(overrides: list[str]) -> None:
    from lrtransfer.options.schema import ConfigError

    for o in overrides:
        key = o.split("=", 1)[0].lstrip("+~")
        if key.startswith(OUTPUT_KEYS) or f"{key}." in OUTPUT_KEYS:
            raise ConfigError(f"{key} is lrtransfer's to set (a job's files go to results_dir/name/JOB_ID); "
                              "choose the folder with results_dir=PATH and name=NAME")


@contextmanager
def _caller_state_kept() -> Iterator[None]:
    """Hydra's errors raised (not printed and exited), workers that watch this process, and the
    caller's environment and logging left as found.

    HYDRA_FULL_ERROR makes Hydra raise, so the CLI (or a notebook) gets the exception; the
    sweep's token (`stop.ENV`) lets a worker process stop with it, even killed (`stop.worker`);
    whatever else a sweep sets in the environment (PyTorch sets TORCHINDUCTOR_CACHE_DIR when
    `torch.func` loads, Hydra a job's `env_set`) is undone; each job's logging config points the
    root logger at that job's log file.
    """
    import logging

    from lrtransfer.training import stop

    before = dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    os.environ["HYDRA_FULL_ERROR"] = "1"
    os.environ.setdefault(stop.ENV, stop.token())
    try:
        yield
    finally:
        for key in [k for k in os.environ if k not in before]:
            del os.environ[key]
        os.environ.update({k: v for k, v in before.items() if os.environ.get(k) != v})
        for h in root.handlers:
            if h not in handlers:
                root.removeHandler(h)
                h.close()
        for h in handlers:
            if h not in root.handlers:
                root.addHandler(h)
        root.setLevel(level)


def sweep(sweeper, arguments: list[str]) -> list:
    """The body of the lrtransfer sweeper (see module docstring)."""
    global last_report
    from lrtransfer.sweeps import adaptive, launchers, transfer, tuning

    job_overrides = expand(sweeper, arguments)
    launchers.check(sweeper.config)
    if transfer.requested(sweeper, job_overrides):
        last_report = transfer.run(sweeper, job_overrides)
        return []
    if tuning.requested(sweeper, job_overrides):
        last_report = tuning.run(sweeper, job_overrides, on_round=on_round)
        return []
    if adaptive.requested(sweeper, job_overrides):
        last_report = adaptive.run(sweeper, job_overrides, on_round=_logged(on_round))
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


def _logged(then):
    """As each round ends: its groups' rounds into their study's rounds file (`report` shows them), then `then`."""
    from lrtransfer.sweeps.outcome import write_rounds_log

    def on_round(r) -> None:
        write_rounds_log(r.groups)
        if then is not None:
            then(r)

    return on_round


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



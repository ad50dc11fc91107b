"""`lrtransfer sweep`: the command line handed to Hydra, less the flags that are ours. Only typer
at module level, like `app.py`: the sweep's machinery loads when the command runs."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

from lrtransfer.cli import show
from lrtransfer.cli.completion import complete_override


HYDRA_HELP = (
    "Hydra overrides: key=value, comma lists and range() sweep (width=64,256,1024 seed=range(3)); "
    "group options (model=mlp param=standard optim=sgd data=teacher study=width). "
    "-h lists the groups, their options and the keys; --cfg job prints the (first) job's config; "
    "Hydra's other flags pass through (--info, --config-dir DIR)."
)


def sweep(
    overrides: Optional[List[str]] = typer.Argument(
        None, help=HYDRA_HELP, show_default=False, autocompletion=complete_override
    ),
    rerun: bool = typer.Option(False, "--rerun", help="Recompute jobs that already have a complete record."),
    plan: bool = typer.Option(
        False, "--plan", help="List the jobs this sweep would run, which are done or running, and the work left; train nothing."
    ),
    until_decided: bool = typer.Option(
        False, "--until-decided", help="Run in rounds (coarse LRs, then finer ones around each optimum, then seeds where "
        "the drift is least sure) until each verdict is decided (adaptive.enabled=true)."
    ),
    budget: Optional[str] = typer.Option(
        None, "--budget", help="With --until-decided: at most this many run-steps (20000; a run-step is one "
        "training step of one LR run), or this long (90m, 2h, 600s)."
    ),
    transfer_from: Optional[Path] = typer.Option(
        None, "--transfer-from", metavar="TUNED", help="A study of `lrtransfer tune`: at each job's scale (and the tuned "
        "one) scan each tuned key and the LR by 2^-2..2^2 around the tuned point, one ensemble per scale."
    ),
) -> None:
    """Train every job of a sweep (each job: one config at every LR of its grid) and summarise it."""
    from lrtransfer.sweeps.outcome import until_decided_overrides
    from lrtransfer.sweeps.launch import launch
    from lrtransfer.training import stop

    argv = list(overrides or [])
    _check_flags(argv)
    argv += until_decided_overrides(until_decided, budget)
    if transfer_from is not None:  # by default the check is a study beside the tuned one: TUNED_check
        tuned = transfer_from.resolve()
        given = {a.split("=", 1)[0].lstrip("+") for a in argv}
        argv += [f"search.transfer_from='{tuned}'"] + [f"{k}={v}" for k, v in (("results_dir", f"'{tuned.parent}'"),
                                                                              ("name", f"{tuned.name}_check")) if k not in given]
    if "-h" in argv:  # Hydra's own app help would list internal groups
        from lrtransfer.cli.catalog import help_text

        typer.echo(help_text())
        return
    if rerun:
        argv.append("hydra.sweeper.rerun=true")
    view = _pop_cfg_job(argv)
    if plan or view:
        surveyed = launch(argv, action="plan")
        if surveyed is not None:  # None: Hydra printed what --info or --cfg hydra asked for
            show.plan(surveyed, view)
        return
    try:
        with stop.graceful():
            report = launch(argv, on_round_end=show.adaptive_round)
    except KeyboardInterrupt as e:  # stop.Interrupted says what was saved; a bare one is a second Ctrl-C
        message = str(e) if isinstance(e, stop.Interrupted) and str(e) else (
            "interrupted at once: finished records are kept; re-run the same command to compute the rest")
        typer.echo(message, err=True)
        raise typer.Exit(130) from None
    if report is None:  # --cfg, --info: Hydra printed what was asked
        return
    show.sweep_report(report)
    if report.failed:
        raise typer.Exit(1)


def _pop_cfg_job(argv: list[str]) -> str | None:
    """Take `--cfg job [--resolve]` out of ARGV: the plan shows the first job's config, which works
    for a sweep too (Hydra's --cfg cannot compose comma lists). Returns None, "raw" or "resolved"."""
    for i, arg in enumerate(argv):  # --cfg=job is one argument
        if arg in ("--cfg=job", "-c=job"):
            argv[i : i + 1] = ["--cfg", "job"]
    for i, (flag, value) in enumerate(zip(argv, argv[1:])):
        if flag in ("--cfg", "-c") and value == "job" and not {"--package", "-p"} & set(argv):
            del argv[i : i + 2]
            if "--resolve" in argv:
                argv.remove("--resolve")
                return "resolved"
            return "raw"
    return None


# Hydra's flags a sweep passes through, with whether each takes a value
HYDRA_FLAGS = {"-h": False, "--hydra-help": False, "--cfg": True, "-c": True, "--resolve": False, "--package": True,
               "-p": True, "--info": False, "-i": False, "--multirun": False, "-m": False, "--config-dir": True,
               "-cd": True, "--config-path": True, "-cp": True, "--config-name": True, "-cn": True,
               "--experimental-rerun": True, "--shell-completion": False, "-sc": True, "--run": False, "-r": False}


def _check_flags(argv: list[str]) -> None:
    """An option sweep does not know is one line naming it, where Hydra's parser prints its usage
    and the internal override it was handed."""
    from lrtransfer.errors import UserError

    i = 0
    while i < len(argv):
        arg = argv[i]
        flag = arg.split("=", 1)[0]
        if arg.startswith("-") and flag not in HYDRA_FLAGS:
            raise UserError(f"unknown option {flag} for sweep; valid: --plan, --rerun, --until-decided, --budget, "
                            "--cfg job [--resolve], --info, --config-dir DIR, --transfer-from TUNED, -h (lrtransfer sweep -h)")
        i += 2 if HYDRA_FLAGS.get(arg) else 1  # a flag's value (--config-dir DIR) is no option

"""The `lrtransfer` command.

Only typer is imported at module level: torch, Hydra, pandas and matplotlib load
inside the command that needs them, so `lrtransfer --help` answers at once.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import List, Optional

import typer

from lrtransfer.cli import importing, show, tuning, usage
from lrtransfer.cli.completion import complete_override, use_override_aware_bash_script

app = typer.Typer(
    help="Does my learning rate transfer when I scale this model up? Sweep, summarise, plot.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},  # every command; sweep keeps -h for its keys
)
use_override_aware_bash_script()

def _version(asked: bool) -> None:
    """What a bug report needs, read from the installed packages' metadata: importing torch would
    take a second."""
    if not asked:
        return
    import platform
    from importlib.metadata import PackageNotFoundError, version

    from lrtransfer import __version__

    def installed(name: str) -> str:
        try:
            return version(name)
        except PackageNotFoundError:
            return "not installed"

    typer.echo(f"lrtransfer {__version__} (torch {installed('torch')}, hydra-core {installed('hydra-core')}, "
               f"python {platform.python_version()})")
    raise typer.Exit()


@app.callback()
def _options(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print the versions of lrtransfer, torch, Hydra and Python, and exit."),
) -> None:
    """Does my learning rate transfer when I scale this model up? Sweep, summarise, plot."""


HYDRA_HELP = (
    "Hydra overrides: key=value, comma lists and range() sweep (width=64,256,1024 seed=range(3)); "
    "group options (model=mlp param=standard optim=sgd data=teacher study=width). "
    "-h lists the groups, their options and the keys; --cfg job prints the (first) job's config; "
    "Hydra's other flags pass through (--info, --config-dir DIR)."
)


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True, "help_option_names": ["--help"]})
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


DIR_HELP = "A results folder, or one study inside it."
METRIC_HELP = "train_loss | eval_loss | eval_acc"
ALL_VERSIONS_HELP = ("Each version of a group's data or model files a group of its own (default: the newest version, "
                     "the older jobs named in a warning).")


@app.command()
def summary(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """Each scale's best LR, the drift of the optimum (octaves per doubling) with its 95% interval, a verdict;
    with a grid.<key> axis, each scale's joint optimum (LR, value) and the value's drift."""
    from lrtransfer import analysis

    analysis.check_metric(metric)
    with show.warnings_to_stderr():
        doc = analysis.summarize(directory, metric, all_versions)
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
    else:
        show.summary(doc)


def _out_path(text: str) -> Path:
    """--out as typed: Typer makes "" Path("."), this folder, where plot and coord-check then wrote
    without a word (and export, report said the folder could not be written)."""
    from lrtransfer.errors import UserError

    if not text.strip():  # " " too: plot made a folder named by a space and wrote there
        raise UserError(f"--out {text!r} is empty: give a path (--out PATH), or leave --out out for the command's "
                        "default (--help says it)")
    return Path(text)


def _writable(out: Path, folder: bool) -> Path:
    """`--out` checked before any record is read: the folder it writes into made if missing, and
    writable, or one line saying why not (exit 2)."""
    from lrtransfer.errors import UserError
    from lrtransfer.store import probe_writable

    try:
        if not folder and out.is_dir():
            raise IsADirectoryError(21, "Is a directory")
        probe_writable(out if folder else out.parent)
    except OSError as e:
        raise UserError(f"--out {out}: cannot write there ({e.strerror}); choose a writable path") from None
    if not folder and out.exists() and (out.name in SWEEP_FILES or ".hydra" in out.parts
                                        or (out.parent / "record.json").exists()):
        raise UserError(f"--out {out}: a file a sweep wrote (a job's record, checkpoint or log), which this would "
                        "overwrite; choose another path")
    return out


def _check_curves_lr(curves_lr: float | None, groups) -> None:
    """--curves-lr names a log2 LR every group measured: anywhere else its figure has no curve."""
    import math

    from lrtransfer.errors import UserError

    if curves_lr is None:
        return
    for g in groups:
        lrs = sorted({float(v) for v in g.runs["log2_lr"]}) if g.runs is not None else []
        if lrs and not (math.isfinite(curves_lr) and any(abs(v - curves_lr) < 1e-9 for v in lrs)):
            shown = ", ".join(f"{v:g}" for v in lrs[:12]) + (", ..." if len(lrs) > 12 else "")
            raise UserError(f"--curves-lr {curves_lr:g} is no log2 LR of {g.label}; its LRs: {shown}")


SWEEP_FILES = ("record.json", "checkpoint.pt", "multirun.yaml", "adaptive.json", "job.log")


@app.command()
def plot(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    out: Optional[Path] = typer.Option(None, parser=_out_path, help="Where figures go (default: DIRECTORY/figures)."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    curves_lr: Optional[float] = typer.Option(
        None, "--curves-lr", help="log2 LR of the training-curve figure (default: the smallest scale's best)."
    ),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """Figures per study: loss vs log2 LR, optimum vs scale (drift), training curves; PNG + PDF."""
    from lrtransfer import analysis
    from lrtransfer.reporting import plots

    analysis.check_metric(metric)
    out = _writable(out, folder=True) if out is not None else None
    with show.warnings_to_stderr():
        found = analysis.scan_runs(directory)
        groups = analysis.scanned_groups(found, metric, all_versions)
    show.group_warnings(groups)
    _check_curves_lr(curves_lr, groups)
    paths = plots.save_figures(groups, out or Path(directory) / "figures", metric, curves_lr)
    paths += tuning.figures_of(found, out or Path(directory) / "figures", metric)
    for p in paths:
        typer.echo(f"wrote {p} (+ .pdf)")
    for study in plots.without_curves(groups):
        typer.echo(f"study {study}: {plots.NO_CURVES}")


@app.command()
def report(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    out: Optional[Path] = typer.Option(None, parser=_out_path, help="The HTML file (default: DIRECTORY/report.html)."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    curves_lr: Optional[float] = typer.Option(None, "--curves-lr", help="log2 LR of the training-curve figure."),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """One self-contained HTML file: summary tables, figures (embedded), configs. Attach it to a message."""
    from lrtransfer import analysis
    from lrtransfer.reporting import html as html_report

    analysis.check_metric(metric)
    out = _writable(out, folder=False) if out is not None else None
    with show.warnings_to_stderr():  # records it skips, runs two jobs hold, a rounds file it skips
        found = analysis.scan_runs(directory)
        groups = analysis.scanned_groups(found, metric, all_versions)
        _check_curves_lr(curves_lr, groups)
        text = html_report.build(directory, found, groups, metric, curves_lr)
    path = html_report.write(out or Path(directory) / "report.html", text)
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


@app.command()
def predict(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    width: Optional[float] = typer.Option(None, "--width", help="Predict at this width (groups whose axis is width)."),
    depth: Optional[float] = typer.Option(None, "--depth", help="Predict at this depth (groups whose axis is depth)."),
    at: Optional[float] = typer.Option(None, "--at", help="Predict at this value of each group's own axis."),
    axis: Optional[str] = typer.Option(
        None, "--axis", help="With --at: only groups on this axis (train.steps, train.batch_size, ...)."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of text."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """The optimal LR the measured optima predict at a new scale (a parabola in log2 scale from five scales on, else the drift's line), with a 95% prediction interval, and the loss given up there by using the smallest scale's best LR."""
    from lrtransfer import analysis
    from lrtransfer.analysis import prediction
    from lrtransfer.errors import UserError

    analysis.check_metric(metric)
    given = [(flag, v) for flag, v in (("--width", width), ("--depth", depth), ("--at", at)) if v is not None]
    if len(given) != 1:
        raise UserError("give one scale to predict at: --width N, --depth N, or --at N (each group's own axis; "
                        f"--axis KEY picks groups), got {' '.join(f for f, _ in given) or 'none'}")
    (flag, value), = given
    if flag != "--at":
        if axis not in (None, flag[2:]):
            raise UserError(f"--axis {axis} contradicts {flag}; give --axis {axis} --at N")
        axis = flag[2:]
    prediction.check_scale(value, flag)  # before reading any record
    with show.warnings_to_stderr():
        groups = analysis.scanned_groups(analysis.scan_runs(directory), metric, all_versions)
    preds, skipped = prediction.predict_groups(groups, value, axis, name=flag, where=f"'{directory}'")
    for message in skipped:
        typer.echo(f"warning: {message}", err=True)
    if as_json:
        doc = {"metric": metric, "at": value, "confidence": analysis.CONFIDENCE,
               "predictions": [prediction.prediction_dict(p) for p in preds]}
        typer.echo(json.dumps(doc, indent=1))
        return
    for p in preds:
        show.prediction(p, metric)


@app.command()
def export(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="csv | parquet (default: from --out's extension, else csv; parquet needs pyarrow)."),
    out: Optional[Path] = typer.Option(None, parser=_out_path, help="The file (default: DIRECTORY/runs.csv or .parquet)."),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """Every run as one row (config columns + metrics): pandas.read_csv / read_parquet loads it. Runs of a
    group's older data or model files are left out, as summary leaves them out (--all-versions keeps them)."""
    from lrtransfer import analysis
    from lrtransfer.reporting.export import resolve_format, write_table

    fmt = resolve_format(fmt, out)
    path = _writable(out, folder=False) if out is not None else Path(directory) / f"runs.{fmt}"
    with show.warnings_to_stderr():
        found = analysis.scan_runs(directory)  # the LR curves' runs, and a search's or a check's rows
        runs = analysis.versioned(found.runs, all_versions) if not found.runs.empty else found.runs
        table = analysis.export_frame(runs if found.points.empty else tuning.with_points(found, runs))
    write_table(table, path, fmt)
    typer.echo(f"wrote {path} ({len(table)} runs, {len(table.columns)} columns)")


@app.command("list")
def list_(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """The studies and groups found, with job and run counts and how many runs diverged or jobs failed."""
    from rich.table import Table

    from lrtransfer import analysis
    from lrtransfer.analysis.summary import skipped_lines

    with show.warnings_to_stderr():  # records it skips, runs two jobs hold
        found = analysis.scan(directory)
        if found.runs.empty and not found.failed:
            analysis.load_runs(directory)  # raises the usual "no finished records"
        rows, shared = analysis.overview(found.runs, all_versions)
    table = Table(title=f"{directory}", title_justify="left")
    for col, just in [("study", "left"), ("group", "left"), ("axis", "left"), ("scales", "left"),
                      ("jobs", "right"), ("runs", "right"), ("diverged", "right")]:
        table.add_column(col, justify=just)
    for r in rows:
        table.add_row(r["study"], r["group"], r["axis"], ",".join(map(str, r["scales"])), str(r["jobs"]),
                      str(r["runs"]), str(r["diverged"]))
    console = show.wide_console()
    console.print(table)
    if shared:
        console.print("all groups: " + "  ".join(f"{k}={v}" for k, v in shared.items()), style="dim")
    for r in rows:
        if r["superseded"]:
            typer.echo(f"{r['study']} {r['group']}: {r['superseded']} job(s) built from an older version of its data "
                       "or model files left out (--all-versions lists them)")
    for f in found.failed:
        typer.echo(f"failed job: {f['path']}: {f.get('error')}")
    if found.failed:
        typer.echo(f"{len(found.failed)} failed job(s) (re-run the sweep to retry them)")
    for line in skipped_lines([vars(s) for s in found.skipped], found.set_aside):
        typer.echo(line)


@app.command("coord-check", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def coord_check(
    ctx: typer.Context,
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="Config overrides as for sweep (param=mup optim=sgd depth=4 ...); width=64,256,1024 lists the widths "
        "(default: 64,128,256,512,1024); lrtransfer sweep -h lists the groups and keys.",
        show_default=False,
        autocompletion=complete_override,
    ),
    steps: int = typer.Option(3, help="Training steps; panels show steps 0 (init) .. STEPS."),
    log2_lr: Optional[float] = typer.Option(None, "--log2-lr", help="log2 learning rate (default: the middle of the LR grid)."),
    seeds: int = typer.Option(2, help="Runs averaged at each width."),
    out: Optional[Path] = typer.Option(None, parser=_out_path, help="Output folder (default: RESULTS_DIR/coord-check/NAME)."),
) -> None:
    """Mean |activation| of every layer against width over a few steps: flat = width-stable parameterization."""
    from lrtransfer.diagnostics import coordcheck
    from lrtransfer.diagnostics.compose import compose

    usage.refuse_flags(ctx, overrides or [])
    out = _writable(out, folder=True) if out is not None else None
    cfgs = compose(list(overrides or []), default_widths=list(coordcheck.DEFAULT_WIDTHS))
    data = coordcheck.measure(cfgs, steps=steps, log2_lr=log2_lr, seeds=seeds)
    paths = coordcheck.save(data, out or coordcheck.output_dir(cfgs[0]))
    typer.echo(f"coordinate check: {data.title}, widths {','.join(map(str, data.widths))}, "
               f"log2 LR {data.log2_lr:g}, {data.seeds} seeds")
    typer.echo("log-log slope of mean |activation| against width (0: width-stable; +1: grows like the width)")
    typer.echo(coordcheck.slope_table(data))
    typer.echo(f"wrote {paths[0]}, {paths[1]} (+ .pdf)")


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def inspect(
    ctx: typer.Context,
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="Config overrides as for sweep (param=mup width=256 param.base_width=64 ...); width=64,256,1024 "
        "(depth=2,4,8, any key of numbers) prints one table per config and the ratios between them; "
        "lrtransfer sweep -h lists the groups and keys.",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {config, tensors} (a list of them for several configs)."),
    log2_lr: Optional[float] = typer.Option(
        None, "--log2-lr", help="A run's log2 LR: each tensor's effective LR (and decay, under decay_scaling=lr) at it."),
) -> None:
    """Each trained tensor's role, init mean and std (seed 0), forward and LR multipliers, and under param=modular its target
    norm; with hp.* set or --log2-lr, each tensor's hyperparameter role and effective LR, epsilon and decay per step."""
    from lrtransfer.diagnostics import inspect as inspection
    from lrtransfer.diagnostics.compose import compose

    usage.refuse_flags(ctx, overrides or [])
    cfgs = compose(list(overrides or []), default_widths=None, min_widths=1, command="inspect", scales=True)
    docs = [inspection.inspect(cfg, log2_lr) for cfg in cfgs]
    if as_json:
        typer.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
        return
    keys = inspection.varying(docs) if len(docs) > 1 else []
    for doc in docs:
        typer.echo(f"== {inspection.describe(doc, keys)}")
        typer.echo(inspection.table(doc) + "\n")
        for note in doc.get("notes", []):
            typer.echo(note)
    if len(docs) > 1:
        first = " ".join(f"{k}={inspection.value_of(docs[0]['config'], k)}" for k in keys)
        typer.echo("== ratios to the first width" if keys == ["width"] else
                   f"== ratios to the first config ({first}; each column names its config by {','.join(keys)})")
        typer.echo(inspection.ratio_table(docs))


app.command("import")(importing.import_table)
app.command("tune", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})(tuning.tune)


def main() -> None:
    """Entry point: run the app; known user errors become one line and exit code 2 (a fault such as
    a full disk: 1)."""
    import os
    import warnings

    from lrtransfer.errors import new_scope
    from lrtransfer.sweeps.messages import describe

    # Before torch loads OpenMP: idle threads sleep instead of spin-waiting. With the
    # default (active) policy, two threads of one process slowed small ops 10-150x
    # whenever anything else used a core (measured: 46.8 s -> 0.3 s for a small job).
    # Launcher workers inherit the variable.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if not getattr(warnings.showwarning, "once", False):
        warnings.showwarning = show.each_warning_once(warnings.showwarning)

    new_scope(command=True)  # each warning once a command (and once a job of a sweep)
    try:
        code = app(prog_name="lrtransfer", standalone_mode=False)  # a usage error comes here as itself: one line
    except usage.ERRORS.UsageError as e:
        if not usage.is_help(e):
            typer.echo(f"error: {usage.one_line(e)}", err=True)
        sys.exit(e.exit_code)
    except typer.Abort:  # end of input at a prompt
        typer.echo("aborted", err=True)
        sys.exit(1)
    except Exception as e:
        message = describe(e)
        if message is None:
            raise
        typer.echo(f"error: {message}", err=True)
        sys.exit(getattr(e, "exit_code", 2))
    sys.exit(code if isinstance(code, int) else 0)  # typer.Exit(n) and --help come back as their code


if __name__ == "__main__":
    main()

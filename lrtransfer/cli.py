"""The `lrtransfer` command.

Only typer is imported at module level: torch, Hydra, pandas and matplotlib load
inside the command that needs them, so `lrtransfer --help` answers at once.
"""

from __future__ import annotations

import json
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import List, Optional

import typer

from lrtransfer.completion import complete_override, use_override_aware_bash_script

app = typer.Typer(
    help="Does my learning rate transfer when I scale this model up? Sweep, summarise, plot.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
use_override_aware_bash_script()

HYDRA_HELP = (
    "Hydra overrides: key=value, comma lists and range() sweep (width=64,256,1024 seed=range(3)); "
    "group options (model=mlp param=standard optim=sgd data=teacher study=width). "
    "-h lists the groups, their options and the keys; --cfg job prints the (first) job's config; "
    "Hydra's other flags pass through (--info, --config-dir DIR)."
)


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def sweep(
    overrides: Optional[List[str]] = typer.Argument(
        None, help=HYDRA_HELP, show_default=False, autocompletion=complete_override
    ),
    rerun: bool = typer.Option(False, "--rerun", help="Recompute jobs that already have a complete record."),
    plan: bool = typer.Option(
        False, "--plan", help="List the jobs this sweep would run, which are done or running, and the work left; train nothing."
    ),
) -> None:
    """Train every job of a sweep (each job: one config at every LR of its grid) and summarise it."""
    from lrtransfer import stop
    from lrtransfer.sweep import launch

    argv = list(overrides or [])
    if "-h" in argv:  # Hydra's own app help would list internal groups
        from lrtransfer.catalog import help_text

        typer.echo(help_text())
        return
    show = _pop_cfg_job(argv)
    if plan or show:
        _print_plan(launch(argv, action="plan"), show)
        return
    if rerun:
        argv.append("hydra.sweeper.rerun=true")
    try:
        with stop.graceful():
            report = launch(argv)
    except KeyboardInterrupt as e:  # stop.Interrupted says what was saved; a bare one is a second Ctrl-C
        message = str(e) if isinstance(e, stop.Interrupted) and str(e) else (
            "interrupted at once: finished records are kept; re-run the same command to compute the rest")
        typer.echo(message, err=True)
        raise typer.Exit(130) from None
    if report is None:  # --cfg, --info: Hydra printed what was asked
        return
    _print_sweep_report(report)
    if report.failed:
        raise typer.Exit(1)


def _pop_cfg_job(argv: list[str]) -> str | None:
    """Take `--cfg job [--resolve]` out of ARGV: the plan shows the first job's config, which works
    for a sweep too (Hydra's --cfg cannot compose comma lists). Returns None, "raw" or "resolved"."""
    for i, (flag, value) in enumerate(zip(argv, argv[1:])):
        if flag in ("--cfg", "-c") and value == "job" and not {"--package", "-p"} & set(argv):
            del argv[i : i + 2]
            if "--resolve" in argv:
                argv.remove("--resolve")
                return "resolved"
            return "raw"
    return None


def _print_plan(plan, show: str | None) -> None:
    from omegaconf import OmegaConf

    from lrtransfer.sweep_plan import describe

    if show:
        if len(plan.jobs) > 1:
            typer.echo(f"# the first of {len(plan.jobs)} jobs ({plan.jobs[0].varying}); "
                       "lrtransfer sweep --plan lists them all", err=True)
        typer.echo(OmegaConf.to_yaml(plan.first_config, resolve=show == "resolved"), nl=False)
        return
    for line in describe(plan):
        typer.echo(line)


DIR_HELP = "A results folder, or one study inside it."
METRIC_HELP = "train_loss | eval_loss | eval_acc"


@app.command()
def summary(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print JSON instead of tables."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
) -> None:
    """Each scale's best LR, the drift of the optimum (octaves per doubling) with its 95% interval, a verdict;
    with a grid.<key> axis, each scale's joint optimum (LR, value) and the value's drift."""
    from lrtransfer import analysis

    analysis.check_metric(metric)
    with _warnings_to_stderr():
        doc = analysis.summarize(directory, metric)
    if as_json:
        typer.echo(json.dumps(doc, indent=1))
    else:
        _print_summary(doc)


@app.command()
def plot(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    out: Optional[Path] = typer.Option(None, help="Where figures go [default: DIRECTORY/figures]."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    curves_lr: Optional[float] = typer.Option(
        None, "--curves-lr", help="log2 LR of the training-curve figure [default: the smallest scale's best]."
    ),
) -> None:
    """Figures per study: loss vs log2 LR, optimum vs scale (drift), training curves; PNG + PDF."""
    from lrtransfer import analysis, plots

    analysis.check_metric(metric)
    with _warnings_to_stderr():
        groups = analysis.groups(analysis.load_runs(directory), metric)
    _echo_warnings(groups)
    paths = plots.save_figures(groups, out or Path(directory) / "figures", metric, curves_lr)
    for p in paths:
        typer.echo(f"wrote {p} (+ .pdf)")


@app.command()
def report(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    out: Optional[Path] = typer.Option(None, help="The HTML file [default: DIRECTORY/report.html]."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    curves_lr: Optional[float] = typer.Option(None, "--curves-lr", help="log2 LR of the training-curve figure."),
) -> None:
    """One self-contained HTML file: summary tables, figures (embedded), configs. Attach it to a message."""
    from lrtransfer import analysis
    from lrtransfer import report as html_report

    analysis.check_metric(metric)
    with _warnings_to_stderr():
        found = analysis.scan(directory)
    if found.runs.empty:
        analysis.load_runs(directory)  # raises the usual "no finished records"
    groups = analysis.groups(found.runs, metric)
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
    with _warnings_to_stderr():
        groups = analysis.groups(analysis.load_runs(directory), metric)
    preds, skipped = prediction.predict_groups(groups, value, axis, name=flag, where=f"'{directory}'")
    for message in skipped:
        typer.echo(f"warning: {message}", err=True)
    if as_json:
        doc = {"metric": metric, "at": value, "confidence": analysis.CONFIDENCE,
               "predictions": [prediction.prediction_dict(p) for p in preds]}
        typer.echo(json.dumps(doc, indent=1))
        return
    for p in preds:
        _print_prediction(p, metric)


def _print_prediction(p, metric: str) -> None:
    from lrtransfer.analysis import metric_noun

    lo, hi = p.log2_lr_interval
    typer.echo("  ".join(f"{k}={v}" for k, v in p.fixed.items()))
    typer.echo(f"  {p.axis} {p.at:g}: optimal log2 LR {p.log2_lr:+.2f}, 95% prediction interval [{lo:+.2f}, {hi:+.2f}]"
               f"  (LR {p.lr:.3g}, [{p.lr_interval[0]:.3g}, {p.lr_interval[1]:.3g}])")
    dlo, dhi = p.drift_ci
    scales = ",".join(f"{s:g}" for s in p.scales)
    if p.model == "line":
        typer.echo(f"  from the drift {p.drift:+.2f} [{dlo:+.2f}, {dhi:+.2f}] over {p.axis} {scales} "
                   f"(a straight line in log2 {p.axis}); interval: {p.interval_method}")
    else:
        llo, lhi = p.line_interval
        typer.echo(f"  from a parabola in log2 {p.axis} through the optima at {p.axis} {scales}; interval: "
                   f"{p.interval_method}")
        typer.echo(f"  a straight line (the drift {p.drift:+.2f} [{dlo:+.2f}, {dhi:+.2f}], constant) gives "
                   f"{p.line_log2_lr:+.2f} [{llo:+.2f}, {lhi:+.2f}], an interval valid only if the optima do not bend")
    if p.penalty is not None:
        plo, phi = p.penalty_interval
        typer.echo(f"  using {p.axis} {p.scales[0]:g}'s best LR (log2 {p.transfer_log2_lr:g}) gives up about "
                   f"{p.penalty:.4f} [{plo:.4f}, {phi:.4f}] of {metric} ({metric_noun(metric)} penalty; {p.penalty_method})")
    for w in p.warnings:
        typer.echo(f"  warning: {w}")
    typer.echo("")


@app.command()
def export(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    fmt: str = typer.Option("csv", "--format", help="csv | parquet (parquet needs pyarrow)."),
    out: Optional[Path] = typer.Option(None, help="The file [default: DIRECTORY/runs.csv or .parquet]."),
) -> None:
    """Every run as one row (config columns + metrics): pandas.read_csv / read_parquet loads it."""
    from lrtransfer import analysis
    from lrtransfer.export import check_format, write_table

    check_format(fmt)
    path = out or Path(directory) / f"runs.{fmt}"
    with _warnings_to_stderr():
        table = analysis.export_frame(analysis.load_runs(directory))
    write_table(table, path, fmt)
    typer.echo(f"wrote {path} ({len(table)} runs, {len(table.columns)} columns)")


@app.command("list")
def list_(directory: Path = typer.Argument(Path("results"), help=DIR_HELP)) -> None:
    """The studies and groups found, with job and run counts and how many runs diverged or jobs failed."""
    from rich.table import Table

    from lrtransfer import analysis

    with _warnings_to_stderr():
        found = analysis.scan(directory)
    if found.runs.empty and not found.failed:
        analysis.load_runs(directory)  # raises the usual "no finished records"
    table = Table(title=f"{directory}", title_justify="left")
    for col, just in [("study", "left"), ("group", "left"), ("axis", "left"), ("scales", "left"),
                      ("jobs", "right"), ("runs", "right"), ("diverged", "right")]:
        table.add_column(col, justify=just)
    rows, shared = analysis.overview(found.runs)
    for r in rows:
        table.add_row(r["study"], r["group"], r["axis"], ",".join(map(str, r["scales"])), str(r["jobs"]),
                      str(r["runs"]), str(r["diverged"]))
    console = _console()
    console.print(table)
    if shared:
        console.print("all groups: " + "  ".join(f"{k}={v}" for k, v in shared.items()), style="dim")
    for f in found.failed:
        typer.echo(f"failed job: {f['path']}: {f.get('error')}")
    if found.failed:
        typer.echo(f"{len(found.failed)} failed job(s) (re-run the sweep to retry them)")


@contextmanager
def _warnings_to_stderr():
    """Print the analysis' warnings (skipped records, ...) as `warning: ...` lines."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                typer.echo(f"warning: {w.message}", err=True)


@app.command("coord-check", context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def coord_check(
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="Config overrides as for sweep (param=mup optim=sgd depth=4 ...); width=64,256,1024 lists the widths "
        "[default: 64,128,256,512,1024].",
        show_default=False,
        autocompletion=complete_override,
    ),
    steps: int = typer.Option(3, help="Training steps; panels show steps 0 (init) .. STEPS."),
    log2_lr: Optional[float] = typer.Option(None, "--log2-lr", help="log2 learning rate [default: the middle of the LR grid]."),
    seeds: int = typer.Option(2, help="Runs averaged at each width."),
    out: Optional[Path] = typer.Option(None, help="Output folder [default: RESULTS_DIR/coord-check/NAME]."),
) -> None:
    """Mean |activation| of every layer against width over a few steps: flat = width-stable parameterization."""
    from lrtransfer import coordcheck

    cfgs = coordcheck.compose(list(overrides or []))
    data = coordcheck.measure(cfgs, steps=steps, log2_lr=log2_lr, seeds=seeds)
    paths = coordcheck.save(data, out or coordcheck.output_dir(cfgs[0]))
    typer.echo(f"coordinate check: {data.title}, widths {','.join(map(str, data.widths))}, "
               f"log2 LR {data.log2_lr:g}, {data.seeds} seeds")
    typer.echo("log-log slope of mean |activation| against width (0: width-stable; +1: grows like the width)")
    typer.echo(coordcheck.slope_table(data))
    typer.echo(f"wrote {paths[0]}, {paths[1]} (+ .pdf)")


@app.command(context_settings={"ignore_unknown_options": True, "allow_extra_args": True})
def inspect(
    overrides: Optional[List[str]] = typer.Argument(
        None,
        help="Config overrides as for sweep (param=mup width=256 param.base_width=64 ...); width=64,256,1024 "
        "prints one table per width and the ratios between them.",
        show_default=False,
    ),
    as_json: bool = typer.Option(False, "--json", help="Print JSON: {config, tensors} (a list of them for several widths)."),
) -> None:
    """Each trained tensor's role, init std (seed 0), forward and LR multipliers, and under param=modular its target norm."""
    from lrtransfer import coordcheck
    from lrtransfer import inspect as inspection

    cfgs = coordcheck.compose(list(overrides or []), default_widths=None, min_widths=1, command="inspect")
    docs = [inspection.inspect(cfg) for cfg in cfgs]
    if as_json:
        typer.echo(json.dumps(docs[0] if len(docs) == 1 else docs, indent=1))
        return
    for doc in docs:
        typer.echo(f"== {inspection.describe(doc)}")
        typer.echo(inspection.table(doc) + "\n")
        for note in doc.get("notes", []):
            typer.echo(note)
    if len(docs) > 1:
        typer.echo("== ratios to the first width")
        typer.echo(inspection.ratio_table(docs))


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def _console():
    """A rich console; piped output gets room for the tables instead of 80 columns."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=140)


def _echo_warnings(groups) -> None:
    for g in groups:
        for w in g.warnings:
            typer.echo(f"warning: {g.label}: {w}", err=True)


def _print_summary(doc: dict) -> None:
    from rich.table import Table

    from lrtransfer.analysis import metric_noun

    console = _console()
    best = f"best {metric_noun(doc['metric'])}"
    for g in doc["groups"]:
        title = "  ".join(f"{k}={v}" for k, v in g["fixed"].items())
        table = Table(title=title, title_justify="left")
        cost_lr = _fmt(g.get("transfer_log2_lr"), "+g")
        for col in (g["axis"], "best log2 LR", "95% interval", "grid best", best, "seeds", "diverged",
                    f"cost at {cost_lr}"):
            table.add_column(col, justify="right")
        for i, s in enumerate(g["scales"]):
            ci = g["best_log2_lr_ci"][i]
            where = "" if g["optimum"][i] in ("interior",) else f" ({g['optimum'][i]})"
            cost = g["transfer_cost"][i]
            table.add_row(
                str(s),
                _fmt(g["best_log2_lr"][i], "+.2f") + where,
                "-" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]",
                _fmt(g["grid_best_log2_lr"][i], "+g"),
                _fmt(g["best_loss"][i], ".4f"),
                str(g["n_seeds"][i]),
                f"{g['n_diverged'][i]}/{g['n_runs'][i]}",
                "-" if cost is None else f"{cost:.4f}",
            )
        console.print(table)
        ci = g["drift_ci"]
        interval = "" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
        console.print(
            f"drift: [bold]{_fmt(g['drift'], '+.2f')}{interval}[/] octaves of optimal LR per doubling of "
            f"{g['axis']} -> [bold]{g['verdict']}[/]"
        )
        if g.get("interval_method"):
            console.print(f"  interval: {g['interval_method']}", style="dim")
        if g.get("joint"):
            _print_joint(console, g, best)
        for w in g["warnings"]:
            console.print(f"  [yellow]warning:[/] {w}")
        console.print()


def _print_joint(console, g: dict, best: str) -> None:
    """A group with a second inner axis: each scale's joint optimum, and the value's drift."""
    from rich.table import Table

    j = g["joint"]
    key = j["key"]
    table = Table(title=f"joint optimum over (LR, {key}); the table above is at each {g['axis']}'s best {key}",
                  title_justify="left")
    for col in (g["axis"], f"best {key}", "best log2 LR", best, *(f"{best} at {v:g}" for v in j["values"])):
        table.add_column(col, justify="right")
    for i, s in enumerate(g["scales"]):
        v, where = j["best_value"][i], j["best_value_where"][i]
        table.add_row(
            str(s),
            ("-" if v is None else f"{v:g}") + ("" if where == "interior" else f" ({where})"),
            _fmt(g["best_log2_lr"][i], "+.2f"),
            _fmt(g["best_loss"][i], ".4f"),
            *(_fmt(x, ".4f") for x in j["best_loss_by_value"][i]),
        )
    console.print(table)
    ci = j["value_drift_ci"]
    interval = "" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
    what = f"octaves of best {key}" if j["value_coordinate"] == "log2" else f"best {key} (its own units; the grid holds 0)"
    console.print(f"{key} drift: [bold]{_fmt(j['value_drift'], '+.3g')}{interval}[/] {what} per doubling of {g['axis']}")


def _print_sweep_report(report) -> None:
    from rich.console import Console

    from lrtransfer import analysis

    console = Console()
    busy = report.count("busy")
    line = f"[bold]{report.count('complete', 'failed')}[/] job(s) ran, {report.skipped + report.count('done')} already done"
    if busy:
        line += f", {busy} running in another sweep (left to it)"
    if report.failed:
        line += f", [bold red]{len(report.failed)}[/] failed"
    console.print(line)
    common = set.intersection(*(set(r["overrides"]) for r in report.returns)) if report.returns else set()
    for f in report.failed:
        which = " ".join(o for o in f["overrides"] if o not in common) or f["job_id"]
        console.print(f"  [red]failed[/] {which}: {f.get('error')}")
    for d in report.study_dirs:
        try:
            with _warnings_to_stderr():
                doc = analysis.summarize(d)
        except analysis.NoRecordsError:
            continue
        _print_summary(doc)
        console.print(f"records: {d}/  (next: lrtransfer plot {d})")


def main() -> None:
    """Entry point: run the app; known user errors become one line and exit code 2."""
    import os

    from lrtransfer.errors import describe

    # Before torch loads OpenMP: idle threads sleep instead of spin-waiting. With the
    # default (active) policy, two threads of one process slowed small ops 10-150x
    # whenever anything else used a core (measured: 46.8 s -> 0.3 s for a small job).
    # Launcher workers inherit the variable.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

    try:
        app()
    except Exception as e:
        message = describe(e)
        if message is None:
            raise
        typer.echo(f"error: {message}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()

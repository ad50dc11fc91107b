"""The commands that read a results folder: `summary`, `plot`, `report`, `predict`, `export`,
`list`. Only typer at module level, like `app.py`: pandas and matplotlib load inside the
command that needs them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer

from lrtransfer.cli import show, tuning
from lrtransfer.cli.outputs import out_path, writable


DIR_HELP = "A results folder, or one study inside it."
METRIC_HELP = "train_loss | eval_loss | eval_acc"
ALL_VERSIONS_HELP = ("Each version of a group's data or model files a group of its own (default: the newest version, "
                     "the older jobs named in a warning).")


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


def plot(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    out: Optional[Path] = typer.Option(None, parser=out_path, help="Where figures go (default: DIRECTORY/figures)."),
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
    out = writable(out, folder=True) if out is not None else None
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


def report(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    out: Optional[Path] = typer.Option(None, parser=out_path, help="The HTML file (default: DIRECTORY/report.html)."),
    metric: str = typer.Option("train_loss", help=METRIC_HELP),
    curves_lr: Optional[float] = typer.Option(None, "--curves-lr", help="log2 LR of the training-curve figure."),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """One self-contained HTML file: summary tables, figures (embedded), configs. Attach it to a message."""
    from lrtransfer import analysis
    from lrtransfer.reporting import html as html_report

    analysis.check_metric(metric)
    out = writable(out, folder=False) if out is not None else None
    with show.warnings_to_stderr():  # records it skips, runs two jobs hold, a rounds file it skips
        found = analysis.scan_runs(directory)
        groups = analysis.scanned_groups(found, metric, all_versions)
        _check_curves_lr(curves_lr, groups)
        text = html_report.build(directory, found, groups, metric, curves_lr)
    path = html_report.write(out or Path(directory) / "report.html", text)
    typer.echo(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB)")


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


def export(
    directory: Path = typer.Argument(Path("results"), help=DIR_HELP),
    fmt: Optional[str] = typer.Option(
        None, "--format", help="csv | parquet (default: from --out's extension, else csv; parquet needs pyarrow)."),
    out: Optional[Path] = typer.Option(None, parser=out_path, help="The file (default: DIRECTORY/runs.csv or .parquet)."),
    all_versions: bool = typer.Option(False, "--all-versions", help=ALL_VERSIONS_HELP),
) -> None:
    """Every run as one row (config columns + metrics): pandas.read_csv / read_parquet loads it. Runs of a
    group's older data or model files are left out, as summary leaves them out (--all-versions keeps them)."""
    from lrtransfer import analysis
    from lrtransfer.reporting.export import resolve_format, write_table

    fmt = resolve_format(fmt, out)
    path = writable(out, folder=False) if out is not None else Path(directory) / f"runs.{fmt}"
    with show.warnings_to_stderr():
        found = analysis.scan_runs(directory)  # the LR curves' runs, and a search's or a check's rows
        runs = analysis.versioned(found.runs, all_versions) if not found.runs.empty else found.runs
        table = analysis.export_frame(runs if found.points.empty else tuning.with_points(found, runs))
    write_table(table, path, fmt)
    typer.echo(f"wrote {path} ({len(table)} runs, {len(table.columns)} columns)")


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

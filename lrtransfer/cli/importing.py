"""`lrtransfer import TABLE --name STUDY ...`: runs you already have, as a study every reading
command reads (`lrtransfer/importing/`). Only typer at module level, like `app.py`."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

import typer

SHOWN_BAD_ROWS = 20  # rows named one by one; the rest are counted


def import_table(
    table: Path = typer.Argument(..., metavar="TABLE", help="The table of runs, one row per run: .csv, .tsv, .jsonl (or a JSON array), "
                                 ".parquet (W&B's runs table, MLflow's search_runs saved to CSV, a shell loop's output)."),
    name: str = typer.Option(..., "--name", metavar="STUDY", help="The study's name: its folder in the results folder."),
    scale: Optional[List[str]] = typer.Option(
        None, "--scale", metavar="KEY=COL", help="A scale column, repeatable: KEY=COL puts column COL under the key KEY (width=n_embd, "
        "depth=n_layer, train.steps=max_iters); COL alone keys it by the column's own name."),
    lr: Optional[str] = typer.Option(None, "--lr", metavar="COL", help="The learning-rate column (the LR itself, not its log)."),
    loss: Optional[str] = typer.Option(None, "--loss", metavar="COL", help="The final training-loss column (NaN or inf: the run diverged)."),
    seed: Optional[str] = typer.Option(None, "--seed", metavar="COL", help="The seed column (default: every run is seed 0)."),
    eval_loss: Optional[str] = typer.Option(None, "--eval-loss", metavar="COL", help="The held-out loss column (summary --metric eval_loss)."),
    group: Optional[List[str]] = typer.Option(
        None, "--group", metavar="KEY=COL", help="A column that tells groups apart, repeatable: KEY=COL or COL as for --scale "
        "(param.name=parameterization: SP named 'standard' comes first in figures)."),
    diverged: Optional[str] = typer.Option(
        None, "--diverged", metavar="COL", help="A true/false column marking runs that diverged (beside a loss that is not finite)."),
    fmt: Optional[str] = typer.Option(None, "--format", metavar="FORMAT", help="csv | tsv | json | parquet (default: from TABLE's extension)."),
    results_dir: str = typer.Option("results", "--results-dir", metavar="DIR", help="The results folder the study goes in."),
    append: bool = typer.Option(False, "--append", help="Add to a study folder that already holds records (the same "
                                "table again adds nothing)."),
) -> None:
    """Make a study from runs you already have: a table with one row per run, its columns named here."""
    from lrtransfer.errors import UserError
    from lrtransfer.importing import columns, study, tables

    if not results_dir.strip():  # Path("") would be this folder
        raise UserError(f"--results-dir {results_dir!r} is empty: give a folder (the default: results)")
    study.check_name(name)
    wanted = columns.parse(list(scale or []), list(group or []), lr=lr, loss=loss, seed=seed, eval_loss=eval_loss,
                           diverged=diverged)
    folder = Path(results_dir) / name
    study.check_study_folder(folder, append)
    found = tables.read_table(table, fmt)
    columns.check(wanted, found)
    imported = study.records(found, wanted, name)
    if not imported.records:
        first = imported.bad[0]
        raise UserError(f"{table}: no row is a usable run ({_counts(imported)}; {first.where}: {first.why}); "
                        "nothing written")
    _say_bad_rows(imported, table)
    written, there = study.write(imported, folder)
    runs = imported.runs
    diverged_runs = sum(r["diverged"] for rec in imported.records for r in rec["runs"])
    again = f"; {there} already there (the same table imported before)" if there else ""
    typer.echo(f"imported {runs} run(s) of {table} into {folder}: {written} job(s) written{again}; "
               f"{diverged_runs} diverged")
    if imported.bad:
        typer.echo(f"skipped {len(imported.bad)} of {imported.rows} row(s): {_counts(imported)}")
    typer.echo(f"read it with: lrtransfer summary {folder}")


def _counts(imported) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in imported.bad_counts().items()) or "no rows"


def _say_bad_rows(imported, table: Path) -> None:
    for bad in imported.bad[:SHOWN_BAD_ROWS]:
        typer.echo(f"warning: skipped {bad.where} of {table}: {bad.why}", err=True)
    if len(imported.bad) > SHOWN_BAD_ROWS:
        typer.echo(f"warning: ... and {len(imported.bad) - SHOWN_BAD_ROWS} more row(s) skipped", err=True)

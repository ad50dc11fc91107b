"""The commands that check a config without a sweep: `coord-check` (activations against width)
and `inspect` (each tensor's init and multipliers). Only typer at module level, like `app.py`:
torch loads inside the command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import List, Optional

import typer

from lrtransfer.cli import usage
from lrtransfer.cli.completion import complete_override
from lrtransfer.cli.outputs import out_path, writable


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
    out: Optional[Path] = typer.Option(None, parser=out_path, help="Output folder (default: RESULTS_DIR/coord-check/NAME)."),
) -> None:
    """Mean |activation| of every layer against width over a few steps: flat = width-stable parameterization."""
    from lrtransfer.diagnostics import coordcheck
    from lrtransfer.diagnostics.compose import compose

    usage.refuse_flags(ctx, overrides or [])
    out = writable(out, folder=True) if out is not None else None
    cfgs = compose(list(overrides or []), default_widths=list(coordcheck.DEFAULT_WIDTHS))
    data = coordcheck.measure(cfgs, steps=steps, log2_lr=log2_lr, seeds=seeds)
    paths = coordcheck.save(data, out or coordcheck.output_dir(cfgs[0]))
    typer.echo(f"coordinate check: {data.title}, widths {','.join(map(str, data.widths))}, "
               f"log2 LR {data.log2_lr:g}, {data.seeds} seeds")
    typer.echo("log-log slope of mean |activation| against width (0: width-stable; +1: grows like the width)")
    typer.echo(coordcheck.slope_table(data))
    typer.echo(f"wrote {paths[0]}, {paths[1]} (+ .pdf)")


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

"""`lrtransfer tune`: a search of per-module hyperparameters at the base scale; and how a search and
a transfer check print (`summary`, a sweep's end). Only typer at module level, like `app.py`."""

from __future__ import annotations

from typing import List, Optional

import typer

from lrtransfer.cli.completion import complete_override


def tune(
    ctx: typer.Context,
    overrides: Optional[List[str]] = typer.Argument(
        None, help="The base job and the search as overrides: model=transformer data=text width=64 depth=2 "
        "search.hp.hidden.lr_mult=[0.25,4] search.optim.weight_decay=[0,0.1] (search.lr: the global LR's range; "
        "search.policy=random|trust_region, search.round_size, search.seeds).",
        show_default=False, autocompletion=complete_override),
    budget: Optional[str] = typer.Option(
        None, "--budget", help="Run-steps the search may spend (20000; its LR-only baseline spends as much again), or a "
        "wall time (90m, 2h, 600s); default: 4 rounds of search.round_size points."),
    plan: bool = typer.Option(False, "--plan", help="Show the next round's jobs and work; train nothing."),
) -> None:
    """Search per-module hyperparameters at one scale, in rounds (each round one batched ensemble), against an
    LR-only search of the same budget; then train both best points at fresh seeds for intervals."""
    from lrtransfer.cli import show, usage
    from lrtransfer.sweeps.launch import launch
    from lrtransfer.sweeps.outcome import budget_overrides
    from lrtransfer.training import stop

    argv = list(overrides or [])
    usage.refuse_flags(ctx, argv)
    if not any(o.split("=", 1)[0].lstrip("+") in ("name", "study") for o in argv):
        argv.insert(0, "name=tune")  # its own study folder, not the sweeps' default one
    argv.append("search.enabled=true")
    if budget is not None:
        argv += budget_overrides("search", budget, "for search.round_size x 4 rounds")
    if plan:
        surveyed = launch(argv, action="plan")
        if surveyed is not None:
            show.plan(surveyed, None)
        return
    try:
        with stop.graceful():
            report = launch(argv, on_round_end=round_line)
    except KeyboardInterrupt as e:
        typer.echo(str(e) or "interrupted: finished rounds are kept; re-run the same command to go on", err=True)
        raise typer.Exit(130) from None
    if report is None:
        return
    if report.failed:
        show.sweep_report(report)
        raise typer.Exit(1)
    if report.tuning is not None:
        from lrtransfer import analysis
        from lrtransfer.analysis.tuning import searches

        with show.warnings_to_stderr():
            found = searches(analysis.scan(report.tuning).points)
        for s in found:
            show.search(s.dict())
        typer.echo(f"records: {report.tuning}/  (next: lrtransfer sweep --transfer-from {report.tuning} width=...)")


def round_line(tune) -> None:
    """One round of a search as it ends."""
    r = tune.rounds[-1]
    best, base = r["best"], r["baseline_best"]
    typer.echo(f"round {r['round']}: {r['run_steps']:,} run-steps (and as many for the LR-only baseline); best loss "
               f"{'-' if best is None else f'{best:.4f}'} (LR only: {'-' if base is None else f'{base:.4f}'}); "
               f"trust region half-side {r['radius']:.3g}")


def figures_of(found, out, metric: str) -> list:
    """The figures of every search and transfer check in a scanned folder (`plot`)."""
    if found.points.empty:
        return []
    from lrtransfer.analysis.transfer import checks
    from lrtransfer.analysis.tuning import searches
    from lrtransfer.reporting.tuning import save_figures

    return save_figures(searches(found.points), checks(found.points, metric), out)


def with_points(found, runs):
    """The runs of the LR curves (`runs`: the versions kept) and the rows of searches and checks, as one
    table (`export`)."""
    import pandas as pd

    return pd.concat([runs, found.points], ignore_index=True)

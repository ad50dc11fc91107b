"""What the commands print: the sweep's report, the summary's tables, predictions, warnings.

Imported only by a command that prints one of these (rich, and the analysis' names,
load then); the numbers come ready-made from the analysis (`summary_doc`, `Prediction`).
"""

from __future__ import annotations

from contextlib import contextmanager

import typer


def plan(plan, show: str | None) -> None:
    from omegaconf import OmegaConf

    from lrtransfer.sweeps.plan import describe

    if show:
        if len(plan.jobs) > 1:
            typer.echo(f"# the first of {len(plan.jobs)} jobs ({plan.jobs[0].varying}); "
                       "lrtransfer sweep --plan lists them all", err=True)
        text = OmegaConf.to_yaml(plan.first_config, resolve=show == "resolved")
        if "${" in text:  # Hydra's --cfg prints interpolations as written
            typer.echo("# ${...} values are filled in when the job runs; --cfg job --resolve shows them", err=True)
        typer.echo(text, nl=False)
        return
    for line in describe(plan):
        typer.echo(line)


def prediction(p, metric: str) -> None:
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


def each_warning_once(showwarning):
    """`showwarning` for Python's warnings, each text once a process. Python's own record of what it
    showed is forgotten whenever a library enters `warnings.catch_warnings` (pandas does, often), and
    one warning raised from two lines shows twice: PyTorch's missing batching rule under vmap, from a
    user's attention and from lrtransfer's rescaled call of it, would show twice a sweep."""
    shown = set()

    def show(message, category, filename, lineno, file=None, line=None):
        if (category, str(message)) not in shown:
            shown.add((category, str(message)))
            showwarning(message, category, filename, lineno, file, line)

    show.once = True
    return show


@contextmanager
def warnings_to_stderr():
    """Print the analysis' warnings (skipped records, ...) as `warning: ...` lines."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        finally:
            for w in caught:
                typer.echo(f"warning: {w.message}", err=True)


def _fmt(v, spec: str = ".3f") -> str:
    return "-" if v is None else format(v, spec)


def wide_console():
    """A rich console; piped output gets room for the tables instead of 80 columns."""
    from rich.console import Console

    console = Console()
    return console if console.is_terminal else Console(width=140)


def group_warnings(groups) -> None:
    for g in groups:
        for w in g.warnings:
            typer.echo(f"warning: {g.label}: {w}", err=True)


def summary(doc: dict) -> None:
    from rich.table import Table

    from lrtransfer.analysis import metric_noun, verdict_text
    from lrtransfer.analysis.summary import incomplete_words, skipped_lines

    console = wide_console()
    best = f"best {metric_noun(doc['metric'])}"
    explained = False  # the cost column, said under the first table that has one
    for g in doc["groups"]:
        title = "  ".join(f"{k}={v}" for k, v in g["fixed"].items())
        table = Table(title=title, title_justify="left")
        cost_lr = g.get("transfer_log2_lr")
        columns = [g["axis"], "best log2 LR", "95% interval", "grid best", best, "seeds", "diverged"]
        for col in columns + ([f"cost at {cost_lr:+g}"] if cost_lr is not None else []):  # no LR to carry over: no column
            table.add_column(col, justify="right")
        for i, s in enumerate(g["scales"]):
            ci = g["best_log2_lr_ci"][i]
            where = "" if g["optimum"][i] in ("interior",) else f" ({g['optimum'][i]})"
            cost = g["transfer_cost"][i]
            row = [
                str(s),
                _fmt(g["best_log2_lr"][i], "+.2f") + where,
                "-" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]",
                _fmt(g["grid_best_log2_lr"][i], "+g"),
                _fmt(g["best_loss"][i], ".4f"),
                str(g["n_seeds"][i]),
                f"{g['n_diverged'][i]}/{g['n_runs'][i]}",
            ]
            table.add_row(*row, *(["-" if cost is None else f"{cost:.4f}"] if cost_lr is not None else []))
        console.print(table)
        if cost_lr is not None and not explained:
            explained = True
            console.print(f"  cost at {cost_lr:+g}: each {g['axis']}'s {metric_noun(doc['metric'])} at the smallest "
                          f"{g['axis']}'s best grid LR (log2 {cost_lr:+g}), less its own best: what carrying that LR "
                          "over costs", style="dim")
        ci = g["drift_ci"]
        interval = "" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]"
        console.print(
            f"drift: [bold]{_fmt(g['drift'], '+.2f')}{interval}[/] octaves of optimal LR per doubling of "
            f"{g['axis']} -> [bold]{verdict_text(g['verdict'], g['leans'])}[/]"
            f"{incomplete_words(g['skipped_records'], g['skipped_runs'])}"
        )
        if g.get("interval_method"):
            console.print(f"  interval: {g['interval_method']}", style="dim")
        if g.get("joint"):
            joint(console, g, best)
        for w in g["warnings"]:
            console.print(f"  [yellow]warning:[/] {w}")
        console.print()
    for s in doc.get("searches", []):
        search(s)
        console.print()
    for c in doc.get("transfer_checks", []):
        check(c)
        console.print()
    for line in skipped_lines(doc["skipped"], doc["set_aside"]):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def joint(console, g: dict, best: str) -> None:
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
    log2 = j["value_coordinate"] == "log2"
    spec = "+.2f" if log2 else "+.3g"  # octaves as every drift; a value in its own units (0.001, 3e-5) as it is written
    ci = j["value_drift_ci"]
    interval = "" if ci is None else f" [{_zeroed(ci[0]):{spec}}, {_zeroed(ci[1]):{spec}}]"
    what = f"octaves of best {key}" if log2 else f"best {key} (its own units; the grid holds 0)"
    drift = None if j["value_drift"] is None else _zeroed(j["value_drift"])
    console.print(f"{key} drift: [bold]{_fmt(drift, spec)}{interval}[/] {what} per doubling of {g['axis']}")


def _zeroed(v: float) -> float:
    """0 for a value that is zero but for rounding (a slope through equal optima: -7.8e-19)."""
    return 0.0 if abs(v) < 1e-12 else v


def sweep_report(report) -> None:
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
    for f in report.returns:  # trainer=command: runs of a finished job that failed (the job went on)
        for run in f.get("failed_runs") or []:
            which = " ".join(o for o in f["overrides"] if o not in common) or f["job_id"]
            from rich.markup import escape

            console.print(f"  [red]run failed[/] {escape(which)} log2_lr={run['log2_lr']:g} seed={run['seed']}: "
                          f"{escape(str(run['error']))}", highlight=False)
    for d in report.study_dirs:
        try:
            with warnings_to_stderr():
                doc = analysis.summarize(d)
        except analysis.NoRecordsError:
            continue
        summary(doc)
        console.print(f"records: {d}/  (next: lrtransfer plot {d})")
    if report.adaptive is not None:
        adaptive_outcome(report.adaptive)


def adaptive_round(r) -> None:
    """One round of an adaptive sweep as it ends: each scale's optimum and interval, the drift, the
    verdict so far, the run-steps spent and what the next round trains."""
    from rich.table import Table

    from lrtransfer.analysis import verdict_text
    from lrtransfer.sweeps.outcome import next_words

    console = wide_console()
    of = f" of {r.budget:,}" if r.budget else ""
    said = " (a run-step: one training step of one LR run)" if r.index == 1 else ""
    console.print(f"[bold]round {r.index}[/]: {r.spent:,} run-steps spent{of}{said}")
    for g in r.groups:
        a = g.analysis
        if a is None:
            continue
        table = Table(title=g.label, title_justify="left")
        for col in (a.axis, "best log2 LR", "95% interval", "LRs", "seeds", "where"):
            table.add_column(col, justify="right")
        for i, s in enumerate(a.scales):
            ci = a.best_log2_lr_ci[i]
            state = g.states[s]
            table.add_row(str(s), _fmt(a.best_log2_lr[i], "+.2f"), "-" if ci is None else f"[{ci[0]:+.2f}, {ci[1]:+.2f}]",
                          str(len(state.points())), str(len(state.seeds)), a.optimum[i])
        console.print(table)
        ci = "" if a.drift_ci is None else f" [{a.drift_ci[0]:+.2f}, {a.drift_ci[1]:+.2f}]"
        status = g.end or (g.step.state if g.step else "")
        console.print(f"drift {_fmt(a.drift, '+.2f')}{ci} -> [bold]{verdict_text(a.verdict, a.leans)}[/] "
                      f"({status}; {g.spent:,} run-steps)")
        for note in (g.step.notes if g.step else []):
            console.print(f"  {note}")
        nxt = next_words(g.step, a.axis) if not g.end else ""
        if nxt:
            console.print(f"  next: {nxt}", style="dim")
    for line in r.lines:
        console.print(f"  [yellow]{line}[/]")
    console.print()


def adaptive_outcome(outcome) -> None:
    """How each group of an adaptive sweep ended: decided (its verdict), or undecided and why, with
    the cheapest next step."""
    from lrtransfer.sweeps.outcome import ended_words

    console = wide_console()
    console.print(f"adaptive sweep: {outcome.rounds} round(s), {outcome.spent:,} run-steps"
                  + (f" of a budget of {outcome.budget:,}" if outcome.budget else ""))
    for g in outcome.groups:
        console.print(f"  {g.label}: {ended_words(g)}", markup=False)
    for line in outcome.lines:
        console.print(f"  [yellow]{line}[/]")


def _ci(e: dict | None, spec: str = ".4f") -> str:
    if not e or e.get("mean") is None:
        return "-"
    ci = e.get("ci")
    return f"{e['mean']:{spec}}" + ("" if ci is None else f" [{ci[0]:{spec}}, {ci[1]:{spec}}]")


def search(doc: dict) -> None:
    """A search's result (`analysis.tuning.Search.dict`)."""
    from rich.table import Table

    console = wide_console()
    table = Table(title=f"study={doc['study']}: the search's best point, against the LR-only setting", title_justify="left")
    for col in ("key", "tuned", "LR-only (its own)"):
        table.add_column(col, justify="right")
    best, own = doc["best"], doc.get("defaults") or {}
    table.add_row("log2 LR", f"{best.get('log2_lr', float('nan')):+.3f}",
                  "-" if doc["baseline_log2_lr"] is None else f"{doc['baseline_log2_lr']:+.3f}")
    for k in doc["keys"]:
        table.add_row(k, f"{best[k]:.4g}", "-" if k not in own else f"{own[k]:.4g}")
    console.print(table)
    steps, wall = doc["run_steps"], doc["wall_time_s"]
    console.print(f"budget: search {steps.get('search', 0):,} run-steps ({wall.get('search', 0):.0f} s), LR-only baseline "
                  f"{steps.get('baseline', 0):,} ({wall.get('baseline', 0):.0f} s), confirming {steps.get('confirm', 0):,} "
                  f"({wall.get('confirm', 0):.0f} s); {len(doc['rounds'])} round(s)")
    n = (doc.get("tuned") or {}).get("n", 0)
    console.print(f"{doc['metric']} at {n} fresh seed(s), 95% interval: tuned [bold]{_ci(doc.get('tuned'))}[/], "
                  f"LR-only {_ci(doc.get('global_lr'))}; gain (LR-only minus tuned, paired by seed): "
                  f"[bold]{_ci(doc.get('gain'), '+.4f')}[/]")


def check(doc: dict) -> None:
    """A transfer check's result (`analysis.transfer.Check.dict`)."""
    from rich.table import Table

    console = wide_console()
    axis = doc["axis"]
    table = Table(title=f"study={doc['study']}: each tuned key scanned by 2^f around its tuned value along {axis} "
                  f"({', '.join(map(str, doc['scales']))})", title_justify="left")
    for col in ("key", f"best log2 factor per {axis}", "drift per doubling [95%]", "verdict",
                f"cost of not retuning at {axis}={doc['scales'][-1]}"):
        table.add_column(col, justify="right")
    for k, r in doc["keys"].items():
        bests = ", ".join("-" if b is None else f"{b:+.2f}" + ("" if w == "interior" else " (edge)")
                          for b, w in zip(r["best_log2_factor"], r["where"]))
        ci = r["drift_ci"]
        drift = "-" if r["drift"] is None else f"{r['drift']:+.2f}" + ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")
        cost, se = r["cost_of_not_retuning"][-1], r["cost_se"][-1]
        table.add_row(k, bests, drift, r["verdict"], "-" if cost is None else f"{cost:.4f}" + ("" if se is None else f" ± {se:.4f}"))
    console.print(table)
    h = doc.get("headline") or {}
    if h:
        parts = [f"tuned {_ci(h['tuned'])}"]
        for name in ("transferred", "retuned"):
            if name in h:
                parts.append(f"LR-only with its LR {name} (log2 {h[name]['log2_lr']:+.2f}): {_ci(h[name]['loss'])}, "
                             f"gain {_ci(h[name]['gain'], '+.4f')}")
        console.print(f"at {axis}={h['scale']}: " + "; ".join(parts))

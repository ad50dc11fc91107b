"""One self-contained HTML file per results folder: something to attach to a message.

Everything is inside the file: figures as base64 PNG, styles inline, no scripts,
no link to anything outside. Built from the analysis' groups and the runs table
(never from the engine), and for an adaptive study from its rounds file, which the
sweep wrote beside the records (`store.ROUNDS_NAME`). Runs imported from a table are said to be,
with the table's path and hash.
"""

from __future__ import annotations

import base64
import html
from datetime import datetime, timezone
from pathlib import Path

import pandas as pd

from lrtransfer import __version__
from lrtransfer.analysis import CONFIDENCE, HISTORY_COLUMNS, JOB_COLUMNS, RUN_COLUMNS, TOLERANCE, Group, Scan
from lrtransfer.analysis.group import adaptive_design
from lrtransfer.analysis.summary import skipped_lines
from lrtransfer.store import ROUNDS_NAME, read_rounds
from lrtransfer.reporting.panels import description, drift_words, families, natural, panel_labels
from lrtransfer.reporting.plots import NO_CURVES, family_figures, has_curves
from lrtransfer.config import RUN_SETTINGS
from lrtransfer.reporting.style import DPI, LABELS, png_bytes

# Figures show at this many CSS pixels per inch of figure while they fit the page; a wider
# one shrinks every figure of the report alike, so that all show text at one size.
PX_PER_INCH = 144
PAGE_PX = 1100  # the body's width (CSS)


CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;max-width:%dpx;margin:2em auto;padding:0 1em;
color:#222;line-height:1.4}
h1{font-size:1.5em}h2{font-size:1.25em;border-bottom:1px solid #ccc;padding-bottom:.2em;margin-top:2em}
h3{font-size:1.05em;margin-bottom:.3em}
table{border-collapse:collapse;margin:.4em 0 1em;font-size:.9em}
th,td{border:1px solid #ddd;padding:.2em .6em;text-align:right}th{background:#f4f4f4}
td.k,th.k{text-align:left;font-family:monospace}
.verdict{font-weight:bold}.warn{color:#9a5b00}.muted{color:#666;font-size:.9em}
img{display:block;margin:.5em 0 1.5em}
details{margin:.5em 0}
""" % PAGE_PX

HOW_TO_READ = f"""
<p class="muted"><b>How to read this.</b> Each scale's optimum is located below the grid spacing by the
parabola through the grid minimum and its two neighbours (log<sub>2</sub> LR). <b>Drift</b> is the
least-squares slope of the optimal log<sub>2</sub> LR against log<sub>2</sub> scale, in octaves per
doubling: 0 means the best LR of the small model is the best LR of the big one, &minus;1 means it halves
every time the model doubles. The {CONFIDENCE:.0%} interval is the wider of two: a bootstrap over seeds
(one seed: over the noise measured on the LR curves) and the classical least-squares interval from the
scatter of the optima about the line. The verdict is <i>transfers</i> when the whole interval lies within
&plusmn;{TOLERANCE}, <i>drifts down/up</i> when it excludes 0, <i>inconclusive</i> otherwise, and <i>undetermined</i> when no interval
can be given (one scale, an optimum on the edge of the grid, too little data). The <b>cost of
transferring</b> is how much worse each scale does at the smallest scale's best grid LR than at its own.</p>
"""


HOW_TO_READ_ADAPTIVE = """
<p class="muted"><b>An adaptive study</b> (<code>--until-decided</code>) trained its LRs and seeds in
rounds, each chosen from the ones before it (the table under each group). Its optima are the
least-squares parabola through the LRs within an octave of the best one, and its drift's interval
that of a weighted regression with replicates (one seed's variance pooled from the seeds' spread and
the scatter about the line).</p>
"""


def _e(v) -> str:
    return html.escape(str(v))


def _f(v, spec: str) -> str:
    return "&ndash;" if v is None else _e(format(v, spec).replace("-", "\u2212"))


def group_table(g: Group) -> str:
    """The per-scale numbers of one group."""
    metric = LABELS.get(g.metric, g.metric)
    head = (
        f"<tr><th>{_e(g.axis)}</th><th>best log<sub>2</sub> LR</th><th>{CONFIDENCE:.0%} interval</th>"
        f"<th>grid best</th><th>best {_e(metric)}</th><th>where</th><th>seeds</th><th>runs diverged</th>"
        f"<th>cost at log<sub>2</sub> LR {_f(g.transfer_log2_lr, 'g')}</th></tr>"
    )
    rows = []
    for i, s in enumerate(g.scales):
        ci = g.best_log2_lr_ci[i]
        cost = g.transfer_cost[i]
        cost_s = _f(cost, ".4f") + ("" if not g.transfer_cost_se[i] else f" &plusmn; {_f(g.transfer_cost_se[i], '.4f')}")
        if cost is None and g.transfer_log2_lr is not None:
            cost_s = "diverged" if any(g.transfer_log2_lr == x for x in _diverged_lrs(g, s)) else "&ndash;"
        rows.append(
            f"<tr><td>{s}</td><td>{_f(g.best_log2_lr[i], '+.2f')}</td>"
            f"<td>{_interval(ci)}</td>"
            f"<td>{_f(g.grid_best_log2_lr[i], '+g')}</td><td>{_f(g.best_loss[i], '.4f')}</td>"
            f"<td>{_e(g.optimum[i])}</td><td>{g.n_seeds[i]}</td><td>{g.n_diverged[i]} / {g.n_runs[i]}</td>"
            f"<td>{cost_s}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def joint_table(g: Group) -> str:
    """A group with a second inner axis: each scale's joint optimum, each value's best, the value's drift."""
    j, metric = g.joint, LABELS.get(g.metric, g.metric)
    head = (f"<tr><th>{_e(g.axis)}</th><th>best {_e(j.key)}</th><th>best log<sub>2</sub> LR</th>"
            f"<th>best {_e(metric)}</th>" + "".join(f"<th>at {_e(format(v, 'g'))}</th>" for v in j.values) + "</tr>")
    rows = []
    for i, s in enumerate(g.scales):
        v, where = j.best_value[i], j.best_value_where[i]
        best = "&ndash;" if v is None else _e(format(v, "g")) + ("" if where == "interior" else f" ({_e(where)})")
        rows.append(f"<tr><td>{s}</td><td>{best}</td><td>{_f(g.best_log2_lr[i], '+.2f')}</td>"
                    f"<td>{_f(g.best_loss[i], '.4f')}</td>"
                    + "".join(f"<td>{_f(x, '.4f')}</td>" for x in j.best_loss_by_value[i]) + "</tr>")
    unit = "octaves" if j.value_coordinate == "log2" else "its units (the grid holds 0)"
    drift = (f"<p><span class='muted'>joint optimum over (LR, {_e(j.key)}); the table above is at each "
             f"{_e(g.axis)}'s best value. {_e(j.key)} drift: {_f(j.value_drift, '+.3g')} {_interval(j.value_drift_ci)} "
             f"{unit} per doubling of {_e(g.axis)}</span></p>")
    return f"{drift}<table>{head}{''.join(rows)}</table>"


def _interval(ci) -> str:
    return "&ndash;" if ci is None else f"[{_f(ci[0], '+.2f')}, {_f(ci[1], '+.2f')}]"


def _diverged_lrs(g: Group, scale) -> list[float]:
    c = g.curves
    return c[(c["scale"] == scale) & (c["n_diverged"] > 0)]["log2_lr"].tolist()


# The keys an adaptive sweep sets for each job it plans: its LR blocks, not the user's choice.
ROUND_KEYS = ("lr.log2_min", "lr.log2_max", "lr.log2_step")


def config_table(runs: pd.DataFrame) -> str:
    """A study's configuration: what all its jobs share, then what varies (what its data and model
    files held, `inputs.*`, too; not when or in what order each job ran).

    Where and how the jobs ran (`engine.*`: device, threads, chunking) and where
    their results also went (`tracker.*`) are left out: they change no result. An
    adaptive study's LR blocks (`ROUND_KEYS`) are its rounds' choice: one row says
    which LRs they chose instead.
    """
    settings = tuple(f"{s}." for s in RUN_SETTINGS)
    hidden = ROUND_KEYS if adaptive_design(runs) else ()
    cols = [c for c in runs.columns if c not in (*RUN_COLUMNS, *HISTORY_COLUMNS, *JOB_COLUMNS, *hidden)
            and not c.startswith(settings)]
    same, varies = [], []
    for c in sorted(cols):
        values = sorted({str(v) for v in runs[c]}, key=natural)
        (same if len(values) == 1 else varies).append((c, values))
    if hidden:
        lrs = runs["log2_lr"]
        same.append(("log2 LR", [f"{lrs.nunique()} LRs from {lrs.min():g} to {lrs.max():g}, chosen round by round"]))
    rows = [f"<tr><td class='k'>{_e(c)}</td><td class='k'>{_e(v[0])}</td></tr>" for c, v in same]
    rows += [f"<tr><td class='k'>{_e(c)}</td><td class='k'><b>{_e(', '.join(v))}</b></td></tr>" for c, v in varies]
    return f"<table><tr><th class='k'>key</th><th class='k'>value (bold: varies)</th></tr>{''.join(rows)}</table>"


def rounds_table(log: dict) -> str:
    """An adaptive sweep's rounds for one group: what each added (LRs, seeds), its run-steps, the
    drift and its interval after it, and how the sweep ended."""
    head = ("<tr><th>round</th><th class='k'>what it added</th><th>run-steps</th><th>drift after it</th>"
            f"<th>{CONFIDENCE:.0%} interval</th><th>verdict</th><th>then</th></tr>")
    rows = [f"<tr><td>{r['round']}</td><td class='k'>{'<br>'.join(_e(x) for x in r['added'].split('; '))}</td>"
            f"<td>{r['run_steps']:,}</td><td>{_f(r['drift'], '+.2f')}</td><td>{_interval(r['drift_ci'])}</td>"
            f"<td>{_e(r['verdict'])}</td><td>{_e(r['state'])}</td></tr>" for r in log["rounds"]]
    ended = log["ended"] or "not finished: the same command goes on from here"
    return (f"<p><span class='muted'>adaptive sweep: {len(log['rounds'])} round(s), {log['run_steps']:,} run-steps; "
            f"</span>{_e(ended)}</p><table>{head}{''.join(rows)}</table>")


def rounds_logs(directory: Path) -> list[dict]:
    """The groups of every adaptive sweep's rounds file below `directory`."""
    return [g for path in sorted(Path(directory).rglob(ROUNDS_NAME)) for g in read_rounds(path)]


def _rounds_of(g: Group, logs: list[dict]) -> dict | None:
    """The rounds that planned this group's jobs, if an adaptive sweep did."""
    jobs = set(g.runs["job_id"]) if g.runs is not None else set()
    return next((log for log in logs if jobs & set(log["jobs"])), None)


def build(directory: Path, scan: Scan, groups: list[Group], metric: str, curves_lr: float | None = None) -> str:
    """The report's HTML text."""
    from lrtransfer.analysis.transfer import checks
    from lrtransfer.analysis.tuning import searches
    from lrtransfer.reporting import tuning_html

    runs = pd.concat([scan.runs, scan.points], ignore_index=True) if not scan.points.empty else scan.runs
    now = datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    jobs = runs["job_id"].nunique()
    parts = [
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>lrtransfer report: {_e(directory)}</title><style>{CSS}</style></head><body>",
        f"<h1>Learning-rate transfer: {_e(directory)}</h1>",
        f"<p class='muted'>{jobs} jobs, {len(runs)} runs ({int(runs['diverged'].sum())} diverged); "
        f"metric: {_e(LABELS.get(metric, metric))}; made {now} by lrtransfer {_e(__version__)}.</p>",
    ]
    if "source" in runs:  # jobs imported from a table (`lrtransfer import`): which table, by content
        parts += [f"<p class='muted'>Runs {_e(s)}.</p>" for s in sorted(runs["source"].dropna().unique())]
    if scan.failed:
        parts.append(f"<p class='warn'>{len(scan.failed)} failed job(s) left out: "
                     + "; ".join(_e(f"{f['path']}: {f.get('error')}") for f in scan.failed) + "</p>")
    lines = skipped_lines([vars(s) for s in scan.skipped], scan.set_aside)
    if lines:
        parts.append("<p class='warn'>" + "<br>".join(_e(line) for line in lines) + "</p>")
    parts.append(HOW_TO_READ)
    logs = rounds_logs(directory)
    if any(adaptive_design(g.runs) for g in groups if g.runs is not None):
        parts.append(HOW_TO_READ_ADAPTIVE)

    shown = [(family, _pngs(family, metric, curves_lr)) for family in families(groups)]
    scale = _image_scale([png for _, figs in shown for _, png in figs])
    for family, figs in shown:
        parts.append(f"<h2>study {_e(family[0].fixed.get('study', ''))}: {_e(description(family))}</h2>")
        for g, label in zip(family, panel_labels(family)):
            if label:  # a family of one group is named by its heading already
                parts.append(f"<h3>{_e(label)}</h3>")
            parts.append(f"<p><span class='verdict'>{_e(drift_words(g))}</span> "
                         f"<span class='muted'>octaves of optimal LR per doubling of {_e(g.axis)}"
                         f"{'; interval: ' + _e(g.interval_method) if g.interval_method else ''}</span></p>")
            for w in g.warnings:
                parts.append(f"<p class='warn'>&#9888; {_e(w)}</p>")
            parts.append(group_table(g))
            if g.joint is not None:
                parts.append(joint_table(g))
            log = _rounds_of(g, logs)
            if log is not None:
                parts.append(rounds_table(log))
        if not any(map(has_curves, family)):
            parts.append(f"<p class='muted'>{_e(NO_CURVES.capitalize())}.</p>")
        for stem, png in figs:
            data = base64.b64encode(png).decode("ascii")
            width = f"{100 * _png_width(png) * scale:.2f}%"
            parts.append(f"<img alt='{_e(stem)}' style='width:{width}' src='data:image/png;base64,{data}'>")
    parts += tuning_html.sections(searches(scan.points), checks(scan.points, metric), scale, _png_width)
    parts.append("<h2>Configuration</h2>")
    for study, sub in runs.groupby("study", sort=True):
        parts.append(f"<h3>study {_e(study)}</h3>")
        parts.append(f"<details open><summary>{sub['job_id'].nunique()} jobs</summary>{config_table(sub)}</details>")
    parts.append("</body></html>")
    return "\n".join(parts)


def _pngs(family: list[Group], metric: str, curves_lr: float | None) -> list[tuple[str, bytes]]:
    import matplotlib.pyplot as plt

    out = []
    for stem, fig in family_figures(family, metric, curves_lr):
        out.append((stem, png_bytes(fig)))
        plt.close(fig)
    return out


def _image_scale(pngs: list[bytes]) -> float:
    """The fraction of the page width per PNG pixel, one for every figure of the report."""
    widest = max((_png_width(p) for p in pngs), default=1)
    return 1 / max(widest, PAGE_PX * DPI / PX_PER_INCH)


def _png_width(png: bytes) -> int:
    """Pixel width from the PNG header (IHDR: width at bytes 16..20, big-endian)."""
    return int.from_bytes(png[16:20], "big")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path

"""The report's sections for searches (`lrtransfer tune`) and transfer checks (`sweep --transfer-from`):
their tables and figures, in the report's style (`html.py` places them)."""

from __future__ import annotations

import base64
import html

from lrtransfer.analysis import CONFIDENCE
from lrtransfer.analysis.transfer import Check
from lrtransfer.analysis.tuning import Search
from lrtransfer.reporting.style import png_bytes

HOW_TO_READ = f"""
<p class="muted"><b>A search</b> trained its points in rounds at one seed, each round one ensemble, beside an
LR-only search of the same budget (every other key at the job's own value); the best point of each was then
trained at fresh seeds, where its loss and the <b>gain</b> (the LR-only loss minus the tuned one, paired by
seed) come with a {CONFIDENCE:.0%} Student-t interval. <b>A transfer check</b> scanned each tuned key (and the LR) by
2<sup>f</sup> around its tuned value at each scale, the other keys held at theirs: each key's optimum f per
scale, its drift per doubling and verdict read as an LR's, and the <b>cost of not retuning</b>, the loss at f = 0
over the best measured f.</p>
"""


def _e(v) -> str:
    return html.escape(str(v))


def _ci(e: dict | None, spec: str = ".4f") -> str:
    if not e or e.get("mean") is None:
        return "&ndash;"
    ci = e.get("ci")
    mid = format(e["mean"], spec)
    return _e(mid if ci is None else f"{mid} [{format(ci[0], spec)}, {format(ci[1], spec)}]")


def search_section(s: Search) -> str:
    d = s.dict()
    rows = [f"<tr><td class='k'>log2 LR</td><td>{d['best'].get('log2_lr', float('nan')):+.3f}</td>"
            f"<td>{'&ndash;' if d['baseline_log2_lr'] is None else format(d['baseline_log2_lr'], '+.3f')}</td></tr>"]
    own = d.get("defaults") or {}
    rows += [f"<tr><td class='k'>{_e(k)}</td><td>{d['best'][k]:.4g}</td><td>{'&ndash;' if k not in own else format(own[k], '.4g')}"
             f"</td></tr>" for k in d["keys"]]
    steps, wall = d["run_steps"], d["wall_time_s"]
    return (f"<h2>search {_e(s.study)}</h2><table><tr><th class='k'>key</th><th>tuned</th><th>LR-only (its own)</th></tr>"
            + "".join(rows) + "</table>"
            f"<p>{_e(d['metric'])} at {(d.get('tuned') or {}).get('n', 0)} fresh seed(s): tuned <b>{_ci(d.get('tuned'))}</b>, "
            f"LR-only {_ci(d.get('global_lr'))}; gain <b>{_ci(d.get('gain'), '+.4f')}</b></p>"
            f"<p class='muted'>budget: search {steps.get('search', 0):,} run-steps ({wall.get('search', 0):.0f} s), LR-only "
            f"{steps.get('baseline', 0):,} ({wall.get('baseline', 0):.0f} s), confirming {steps.get('confirm', 0):,} "
            f"({wall.get('confirm', 0):.0f} s); {len(d['rounds'])} round(s)</p>")


def check_section(c: Check) -> str:
    d = c.dict()
    head = (f"<tr><th class='k'>key</th><th>best log2 factor per {_e(c.axis)} ({', '.join(map(str, c.scales))})</th>"
            f"<th>drift per doubling [{CONFIDENCE:.0%}]</th><th>verdict</th><th>cost of not retuning at "
            f"{_e(c.axis)}={c.scales[-1]}</th></tr>")
    rows = []
    for k, r in d["keys"].items():
        bests = ", ".join("&ndash;" if b is None else f"{b:+.2f}" + ("" if w == "interior" else f" ({w})")
                          for b, w in zip(r["best_log2_factor"], r["where"]))
        ci = r["drift_ci"]
        drift = "&ndash;" if r["drift"] is None else f"{r['drift']:+.2f}" + ("" if ci is None else f" [{ci[0]:+.2f}, {ci[1]:+.2f}]")
        cost, se = r["cost_of_not_retuning"][-1], r["cost_se"][-1]
        rows.append(f"<tr><td class='k'>{_e(k)}</td><td>{bests}</td><td>{drift}</td><td>{_e(r['verdict'])}</td>"
                    f"<td>{'&ndash;' if cost is None else f'{cost:.4f}'}{'' if se is None else f' &plusmn; {se:.4f}'}</td></tr>")
    h = d.get("headline") or {}
    line = ""
    if h:
        parts = [f"tuned {_ci(h['tuned'])}"]
        parts += [f"LR-only, its LR {name} (log2 {h[name]['log2_lr']:+.2f}): {_ci(h[name]['loss'])}, gain "
                  f"<b>{_ci(h[name]['gain'], '+.4f')}</b>" for name in ("transferred", "retuned") if name in h]
        line = f"<p>at {_e(c.axis)}={h['scale']}: " + "; ".join(parts) + "</p>"
    return f"<h2>transfer check {_e(c.study)}</h2><table>{head}{''.join(rows)}</table>{line}"


def sections(searches: list[Search], checks: list[Check], scale: float, png_width) -> list[str]:
    """Each search's and check's section, its figures at the report's common scale."""
    import matplotlib.pyplot as plt

    from lrtransfer.reporting.tuning import figures

    if not searches and not checks:
        return []
    figs = {}
    for stem, fig in figures(searches, checks):
        figs[stem] = png_bytes(fig)
        plt.close(fig)
    out = [HOW_TO_READ]
    for item, section in [*((s, search_section(s)) for s in searches), *((c, check_section(c)) for c in checks)]:
        out.append(section)
        for stem, png in figs.items():
            if stem.startswith(f"{item.study}-"):
                data = base64.b64encode(png).decode("ascii")
                out.append(f"<img alt='{_e(stem)}' style='width:{100 * png_width(png) * scale:.2f}%' "
                           f"src='data:image/png;base64,{data}'>")
    return out

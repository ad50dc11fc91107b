"""Figures of a search (`lrtransfer tune`) and of a transfer check (`sweep --transfer-from`).

- `search`: the loss of every point the search trained against each searched key (and the global
  LR), coloured by round, the LR-only twin's points grey on the LR's panel, the best point a star;
- `progress`: the best loss so far against the run-steps spent, the search's and its LR-only twin's;
- `check`: for each tuned key, the loss against the log2 of the factor it was scanned by (0: the
  tuned value), a line per scale, each scale's optimum marked (the LR figure of `plots`, read with
  the factor for the LR);
- `check-drift`: each key's optimal factor against the scale, with its fitted drift and 95% band, a
  panel per key (one axes for nine keys' bands is unreadable).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from lrtransfer.analysis.transfer import Check  # noqa: E402
from lrtransfer.analysis.tuning import BASELINE, SEARCH, Search  # noqa: E402
from lrtransfer.reporting.panels import description  # noqa: E402
from lrtransfer.reporting.plots import draw_optima, edge_handles, lr_figure  # noqa: E402
from lrtransfer.reporting.style import COLUMN_WIDTH, LABELS, STYLE, save  # noqa: E402

FACTOR = "factor (x the tuned value)"


def _panels(n: int, width: float, height: float, pad_w: float, pad_h: float):
    """A figure of n panels sharing y, 4 a row (the spare ones hidden); its axes as a 2-d array."""
    ncols = min(n, 4)
    nrows = math.ceil(n / ncols)
    fig, axes = plt.subplots(nrows, ncols, figsize=(width * ncols + pad_w, height * nrows + pad_h), sharey=True,
                             squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, axes


def search_figure(s: Search):
    """Loss against each searched key (and the LR), a dot per point, coloured by round."""
    pts = s.points
    keys = ["log2_lr", *s.keys]
    with plt.rc_context(STYLE):
        fig, axes = _panels(len(keys), 2.2, 2.1, 0.6, 0.4)
        mine, base = pts[pts["arm"] == SEARCH], pts[pts["arm"] == BASELINE]
        finite = np.isfinite(pts["loss"].astype(float))
        y = pts.loc[finite, "loss"].astype(float)
        lo, hi = (float(y.min()), float(np.quantile(y, 0.9))) if len(y) else (0.0, 1.0)
        rounds = mine["points.round"].astype(int)
        for ax, k in zip(axes.flat, keys):
            x = mine[k].astype(float)
            sc = ax.scatter(x, mine["loss"].astype(float).clip(upper=hi), c=rounds, cmap="viridis", s=7, linewidths=0)
            if k == "log2_lr" and len(base):
                ax.scatter(base[k].astype(float), base["loss"].astype(float).clip(upper=hi), color="grey", s=7,
                           marker="s", linewidths=0, label="LR only", alpha=0.7)
                ax.legend(frameon=False, loc="upper right")
            if s.best:
                ax.scatter([s.best[k]], [s.best_loss], marker="*", s=60, color="crimson", zorder=6, label="best")
            lo_hi = s.ranges.get(k)
            if lo_hi and lo_hi[0] > 0 and not k.endswith(("beta1", "beta2")):  # searched log-uniformly
                ax.set_xscale("log", base=2)
            ax.set_xlabel("log$_2$ learning rate" if k == "log2_lr" else k)
            ax.set_ylim(lo - 0.05 * (hi - lo or 1), hi + 0.05 * (hi - lo or 1))
        for ax in axes[:, 0]:
            ax.set_ylabel(LABELS.get(s.metric, s.metric))
        bar = fig.colorbar(sc, ax=axes.ravel().tolist(), label="round", shrink=0.8)
        bar.set_ticks(sorted(set(rounds)))
        fig.suptitle(f"study {s.study}: every point of the search (a star: the best; points above the 90th "
                     "percentile drawn at it)")
    return fig


def progress_figure(s: Search):
    """The best loss so far against the run-steps spent: the search and its LR-only twin."""
    with plt.rc_context(STYLE):
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.4), layout="constrained")
        steps = [r["run_steps"] for r in s.rounds]
        for key, label, color in (("best", "search", "tab:blue"), ("baseline_best", "LR only", "grey")):
            ys = [np.nan if r[key] is None else r[key] for r in s.rounds]
            ax.plot(steps, ys, marker="o", markersize=3, color=color, label=label)
        if s.tuned is not None and s.tuned.mean is not None:
            for est, color in ((s.tuned, "tab:blue"), (s.global_lr, "grey")):
                if est is not None and est.ci is not None:
                    ax.axhspan(est.ci[0], est.ci[1], color=color, alpha=0.15, linewidth=0)
        ax.set_xlabel("run-steps spent (each arm)")
        ax.set_ylabel(f"best {LABELS.get(s.metric, s.metric)}")
        ax.legend(frameon=False)
        ax.set_title(f"study {s.study}: best so far; bands: each best at {s.tuned.n if s.tuned else 0} fresh seeds, 95%")
    return fig


def drift_figure(per_key: dict, metric: str):
    """Each key's optimal log2 factor against the scale: a panel per key, its drift and verdict above it."""
    keys = list(per_key)
    with plt.rc_context(STYLE):
        fig, axes = _panels(len(keys), 2.3, 2.0, 0.3, 0.7)
        located = [y for g in per_key.values() for y in g.best_log2_lr if y is not None]
        for ax, key in zip(axes.flat, keys):
            g = per_key[key]
            draw_optima(ax, g, "tab:blue")
            _, labels = ax.get_legend_handles_labels()
            ax.set_title(f"{key}\n{labels[0] if labels else ''}")
            ax.axhline(0.0, color="grey", linewidth=0.6, linestyle=":")
            scales = list(g.scales)
            ax.set_xticks(np.log2(scales), [str(s) for s in scales])
            ax.set_xlabel(g.axis)
        for ax in axes[:, 0]:
            ax.set_ylabel("optimal log$_2$ factor")
        if located:  # a scan's factors: a band far past its ends says nothing more
            axes.flat[0].set_ylim(min(located) - 0.6, max(located) + 0.6)
        kinds = {k for g in per_key.values() for k in g.optimum}
        if edge_handles(kinds, FACTOR):
            fig.legend(handles=edge_handles(kinds, FACTOR), frameon=False, loc="outside lower center")
        family = list(per_key.values())
        fig.suptitle(f"{description(family)}\neach key's optimum (x the tuned value; dotted: the tuned value) "
                     f"of the {LABELS.get(metric, metric)}; 95% intervals")
    return fig


def figures(searches: list[Search], checks: list[Check]) -> Iterator[tuple[str, object]]:
    """(file stem, figure) of every search and check; the caller closes them."""
    for s in searches:
        if s.points is not None and len(s.points):
            yield f"{s.study}-search", search_figure(s)
        if s.rounds:
            yield f"{s.study}-search-progress", progress_figure(s)
    for c in checks:
        family = list(c.per_key.values())
        if not family:
            continue
        yield f"{c.study}-transfer-check-{c.axis}", lr_figure(family, c.metric, FACTOR)
        yield f"{c.study}-transfer-check-drift-{c.axis}", drift_figure(c.per_key, c.metric)


def save_figures(searches: list[Search], checks: list[Check], out: Path) -> list[Path]:
    out.mkdir(parents=True, exist_ok=True)
    return [save(fig, out / stem)[0] for stem, fig in figures(searches, checks)]

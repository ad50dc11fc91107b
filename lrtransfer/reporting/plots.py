"""Figures: what a reader of a transfer study looks at, in one style.

Reads the analysis' groups (never the engine or the records directly). Groups of
one study that share model, data and scale axis form a *family*; each family gets

- `lr`: loss against log2 LR, a panel per group (parameterization, optimizer, ...:
  whatever varies), shared y axis, a line per scale coloured in scale order, the
  standard error over seeds as a band, a dot on each scale's sub-grid optimum
  (hollow when it sits on the grid edge and is not located), a cross at the
  worst edge (top for a loss, bottom for accuracy) where a run diverged, and a y
  range taken from the finite data so a blow-up does not flatten the basin;
- `transfer`: optimal log2 LR against log2 scale, a line per group, with 95%
  intervals per scale and the fitted drift with its band;
- `curves`: loss against step at one LR (by default the smallest scale's best),
  a line per scale: how the larger models behave at the transferred LR (none for runs
  imported from a table, which hold only their final losses);
- `joint`, for a group with a second inner axis (`grid.<key>`): the loss over
  (log2 LR, value), a panel per scale, the joint optimum and its path across scales.
  The other figures show such a group at each scale's best value.

The look (sizes, fonts) is `style`'s, shared with the coordinate check and the report.
"""

from __future__ import annotations

import hashlib
import math
import re
from collections.abc import Iterator
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402
from matplotlib.transforms import blended_transform_factory  # noqa: E402

from lrtransfer.analysis import EDGE_HIGH, EDGE_LOW, Group, maximizes  # noqa: E402
from lrtransfer.reporting.panels import FAMILY_KEYS, description, drift_words, families, panel_labels  # noqa: E402
from lrtransfer.reporting.style import COLUMN_WIDTH, LABELS, STYLE, fit_titles, save, signed  # noqa: E402

KINDS = ("lr", "transfer", "curves", "joint")


def y_limits(values: np.ndarray, maximize: bool = False) -> tuple[float, float]:
    """A y range that shows the basin: from the best value up to a robust ceiling."""
    v = values[np.isfinite(values)]
    if v.size == 0:
        return 0.0, 1.0
    lo, hi = float(v.min()), float(v.max())
    if maximize:
        lo = max(lo, float(np.quantile(v, 0.1)) - 0.1 * (hi - lo))
    else:
        # Curves rise steeply near divergence; cap the view at a few times the
        # spread between the best point and the median so the minima stay readable.
        med = float(np.median(v))
        hi = min(hi, med + 2.0 * (med - lo) + 1e-12) if med > lo else hi
    pad = 0.05 * (hi - lo or abs(hi) or 1.0)
    return lo - pad, hi + pad


def scale_colors(scales: list[int]) -> dict[int, tuple]:
    """A sequential map in scale order (viridis, without its palest yellow)."""
    cmap = plt.get_cmap("viridis")
    n = len(scales)
    return {s: cmap(0.88 * i / max(1, n - 1)) for i, s in enumerate(sorted(scales))}


PANELS_PER_ROW = 4


def _grid(n: int, width: float, height: float, sharey: bool, legend: bool):
    ncols = min(n, PANELS_PER_ROW)
    nrows = math.ceil(n / ncols)
    size = (COLUMN_WIDTH if n == 1 else 2.35 * ncols + (0.7 if legend else 0), height * nrows + 0.35)
    fig, axes = plt.subplots(nrows, ncols, figsize=size, sharey=sharey, squeeze=False, layout="constrained")
    for ax in axes.flat[n:]:
        ax.set_visible(False)
    return fig, list(axes.flat[:n])


def _scale_legend(fig, axes, family: list[Group], colors: dict, extra: list, marker: str | None = "o") -> None:
    """A line per scale, drawn as the figure draws its lines (`marker`), then the `extra` symbols."""
    handles = [Line2D([], [], color=c, marker=marker, markersize=2.5, label=str(s)) for s, c in colors.items()]
    title = f"{family[0].axis}"
    if len(axes) == 1:
        axes[0].legend(handles=handles + extra, title=title, frameon=False, loc="center left", bbox_to_anchor=(1.0, 0.5))
    else:
        fig.legend(handles=handles + extra, title=title, frameon=False, loc="outside right center")


def _mark_diverged(ax, xs, i: int, color, maximize: bool = False) -> None:
    """Crosses at the worst edge (top for a loss, bottom for accuracy); one row per scale so that
    crosses of several scales stay visible."""
    tr = blended_transform_factory(ax.transData, ax.transAxes)
    y = 0.035 * i if maximize else 1.0 - 0.035 * i
    ax.scatter(xs, np.full(len(xs), y), transform=tr, marker="x", color=color, s=12,
               linewidths=0.9, clip_on=False, zorder=5, gid="diverged")


# ----------------------------------------------------------------------------- the figures


def lr_figure(family: list[Group], metric: str = "train_loss", what: str = "learning rate"):
    """Loss against log2 LR (or `what` a group's x is the log2 of: a transfer check's factor); a panel
    per group, a line per scale."""
    maximize = maximizes(metric)
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(family), 2.35, 2.2, sharey=True, legend=True)
        colors = scale_colors(sorted({s for g in family for s in g.scales}))
        # the curves, and each optimum's marker: a fitted extremum can lie past the grid's points
        optima = np.array([v for g in family for v in g.best_loss_subgrid if v is not None], dtype=float)
        values = np.concatenate([g.curves["mean"].to_numpy(dtype=float) for g in family] + [optima])
        lo, hi = y_limits(values, maximize)
        any_div = False
        for ax, g, label in zip(axes, family, panel_labels(family)):
            cv = g.curves
            for i, scale in enumerate(g.scales):
                color = colors[scale]
                c = cv[cv["scale"] == scale].sort_values("log2_lr")
                x, y = c["log2_lr"].to_numpy(dtype=float), c["mean"].to_numpy(dtype=float)
                se = c["sem"].to_numpy(dtype=float)
                ax.plot(x, y, color=color, marker="o", markersize=1.8)
                if np.isfinite(se).any():
                    ax.fill_between(x, y - se, y + se, color=color, alpha=0.25, linewidth=0)
                bad = c["n_diverged"].to_numpy() > 0
                if bad.any():
                    any_div = True
                    _mark_diverged(ax, x[bad], list(colors).index(scale), color, maximize)
                if g.best_log2_lr[i] is not None:
                    edge = g.optimum[i] in (EDGE_LOW, EDGE_HIGH)
                    ax.scatter([g.best_log2_lr[i]], [g.best_loss_subgrid[i]], s=22, zorder=6, linewidth=0.7,
                               facecolor="white" if edge else color, edgecolor="black", gid="optimum")
            ax.set_ylim(lo, hi)
            ax.set_title((f"{label}\n" if label else "") + drift_words(g))
            ax.set_xlabel(f"log$_2$ {what}")
        for ax in axes[:: min(len(axes), PANELS_PER_ROW)]:
            ax.set_ylabel(LABELS.get(metric, metric))
        extra = [Line2D([], [], ls="", marker="o", markerfacecolor="grey", markeredgecolor="black", markersize=4,
                        label="optimum")]
        if any(k in (EDGE_LOW, EDGE_HIGH) for g in family for k in g.optimum):
            extra.append(Line2D([], [], ls="", marker="o", markerfacecolor="white", markeredgecolor="black",
                                markersize=4, label="on grid edge"))
        if any_div:
            extra.append(Line2D([], [], ls="", marker="x", color="grey", markersize=4, label="diverged"))
        _scale_legend(fig, axes, family, colors, extra)
        seeds = max(max(g.n_seeds) for g in family)
        band = f", mean ± s.e. over {seeds} seeds" if seeds > 1 else ", 1 seed"
        fig.suptitle(f"{description(family)}\n{LABELS.get(metric, metric)} vs {what}{band}")
        fit_titles(fig)
    return fig


def transfer_figure(family: list[Group], metric: str = "train_loss", what: str = "learning rate"):
    """Optimal log2 LR (or `what`) against log2 scale, a line per group, fitted drift with its 95% band."""
    with plt.rc_context(STYLE):
        kinds = {k for g in family for k in g.optimum}
        entries = len(family) + len(kinds & {EDGE_LOW, EDGE_HIGH})
        # the legend sits below the axes, a line an entry: the figure grows with it, the axes keep their height
        fig, ax = plt.subplots(figsize=(COLUMN_WIDTH, 2.0 + 0.17 * entries), layout="constrained")
        palette = plt.get_cmap("tab10")
        for j, (g, label) in enumerate(zip(family, panel_labels(family))):
            draw_optima(ax, g, palette(j % 10), f"{label}: " if label else "")
        scales = sorted({s for g in family for s in g.scales})
        ax.set_xticks(np.log2(scales), [str(s) for s in scales])
        ax.set_xlabel(f"{family[0].axis} (log scale)")
        ax.set_ylabel(f"optimal log$_2$ {what}")
        handles, _ = ax.get_legend_handles_labels()
        fig.legend(handles=handles + edge_handles(kinds, what), frameon=False, loc="outside lower center")
        fig.suptitle(f"{description(family)}\noptimum of the {LABELS.get(metric, metric)}; 95% intervals")
    return fig


def draw_optima(ax, g: Group, color, name: str = "") -> None:
    """A group's optimum per scale (with its interval; an open triangle where the optimum lies past the
    grid's edge) and its fitted drift line with the 95% band, labelled `name` + the drift in words."""
    x = np.log2(np.array(g.scales, dtype=float))
    for i in range(len(g.scales)):
        y = g.best_log2_lr[i]
        if y is None:
            continue
        if g.optimum[i] in (EDGE_LOW, EDGE_HIGH):  # not located: the optimum lies beyond
            ax.scatter([x[i]], [y], marker="v" if g.optimum[i] == EDGE_LOW else "^", s=26,
                       facecolor="white", edgecolor=color, zorder=5)
            continue
        ci = g.best_log2_lr_ci[i]
        yerr = None if ci is None else [[max(0.0, y - ci[0])], [max(0.0, ci[1] - y)]]
        ax.errorbar([x[i]], [y], yerr=yerr, color=color, marker="o", markersize=3.5, capsize=2,
                    elinewidth=0.8, zorder=5)
    if g.fit is not None:
        bx = g.fit.band_x
        ax.plot(bx, g.fit.intercept + g.fit.slope * bx, color=color, label=name + drift_words(g))
        if np.isfinite(g.fit.band_lo).all():
            ax.fill_between(bx, g.fit.band_lo, g.fit.band_hi, color=color, alpha=0.18, linewidth=0)
    else:
        ax.plot([], [], color=color, label=name + drift_words(g))


def edge_handles(kinds: set, what: str = "learning rate") -> list:
    """The legend's entries for the open triangles `draw_optima` drew (`kinds`: the groups' optimum kinds)."""
    point = "LR" if what == "learning rate" else "factor"
    return [Line2D([], [], ls="", marker=marker, markerfacecolor="white", markeredgecolor="grey", markersize=5,
                   label=f"best at the grid's {edge} {point}: optimum {side}, not fitted")
            for kind, marker, edge, side in ((EDGE_LOW, "v", "lowest", "below"), (EDGE_HIGH, "^", "highest", "above"))
            if kind in kinds]


def curves_figure(family: list[Group], log2_lr: float | None = None, window: int = 9):
    """Training loss against step at one LR (default: each group's transferred LR), a line per scale.

    Recorded losses are single-batch losses, so the faint lines (as recorded, the mean
    over seeds where there are several) are noisy; the solid lines are their centred running mean over
    `window` recorded points, drawn where the whole window fits (the faint lines show the ends), and
    the title says so.
    """
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(family), 2.35, 2.2, sharey=True, legend=True)
        colors = scale_colors(sorted({s for g in family for s in g.scales}))
        shown, any_div = [], False
        for ax, g, label in zip(axes, family, panel_labels(family)):
            lr = g.transfer_log2_lr if log2_lr is None else log2_lr
            if lr is None:
                lr = next((b for b in g.grid_best_log2_lr if b is not None), None)
            runs = g.runs[np.isclose(g.runs["log2_lr"], lr)] if lr is not None else g.runs.iloc[:0]
            if not has_curves(g):  # beside groups that have curves
                ax.set_title((f"{label}\n" if label else "") + "no curves (imported runs)")
                continue
            for scale in g.scales:
                r = runs[runs[g.axis] == scale]
                if r.empty:
                    continue
                step, mean, diverged = _mean_history(r)
                smooth = running_mean(mean, window)
                ax.plot(step, mean, color=colors[scale], alpha=0.25, linewidth=0.6, gid="recorded")
                ax.plot(step, smooth, color=colors[scale], gid="smoothed")
                if not diverged:  # the y range holds the runs that trained, as recorded; blow-ups leave the top
                    shown.append(mean[np.isfinite(mean)])
                if diverged:
                    any_div = True
                    _mark_diverged(ax, [step[-1]], list(colors).index(scale), colors[scale])
            what = "" if log2_lr is not None else f" (best of {g.axis} {g.scales[0]})"
            ax.set_title((f"{label}\n" if label else "") + ("no runs" if lr is None else f"log$_2$ LR {signed(lr, 'g')}{what}"))
            ax.set_xlabel("step")
        v = np.concatenate(shown) if shown and np.concatenate(shown).size else np.array([0.0, 1.0])
        pad = 0.04 * (v.max() - v.min() or 1.0)
        for ax in axes:
            ax.set_ylim(v.min() - pad, v.max() + pad)
        for ax in axes[:: min(len(axes), PANELS_PER_ROW)]:
            ax.set_ylabel("training loss")
        extra = [Line2D([], [], ls="", marker="x", color="grey", markersize=4, label="diverged")] if any_div else []
        _scale_legend(fig, axes, family, colors, extra, marker=None)
        seeds = max(max(g.n_seeds) for g in family)
        faint = f"mean over {seeds} seeds" if seeds > 1 else "1 seed"
        fig.suptitle(f"{description(family)}\ntraining loss ({faint}; solid: running mean of {window} points)")
        fit_titles(fig)
    return fig


def joint_figure(g: Group, metric: str = "train_loss"):
    """A group with a second inner axis (`grid.<key>`): the loss over (log2 LR, value), a panel
    per scale, each scale's joint optimum marked, and the optimum's path across the scales
    drawn on every panel. Values sit evenly spaced, labelled (a grid may hold 0); cells
    where a run diverged are hatched grey; one colour scale for all panels."""
    joint, maximize = g.joint, maximizes(metric)
    cells = joint.cells
    lrs = np.sort(cells["log2_lr"].unique())
    values = joint.values
    lo, hi = y_limits(cells["mean"].to_numpy(dtype=float), maximize)
    cmap = plt.get_cmap("viridis_r" if not maximize else "viridis").with_extremes(bad="0.85")
    row = {v: i for i, v in enumerate(values)}
    path_x = [b for b, v in zip(g.best_log2_lr, joint.best_value) if v is not None and b is not None]
    path_y = [row[v] for b, v in zip(g.best_log2_lr, joint.best_value) if v is not None and b is not None]
    with plt.rc_context(STYLE):
        fig, axes = _grid(len(g.scales), 2.35, 2.1, sharey=True, legend=False)
        image = None
        for ax, scale, i in zip(axes, g.scales, range(len(g.scales))):
            c = cells[cells["scale"] == scale]
            z = np.full((len(values), len(lrs)), np.nan)  # (values, LRs)
            for v, lr, m in zip(c["value"], c["log2_lr"], c["mean"]):
                z[row[v], int(np.searchsorted(lrs, lr))] = m
            step = lrs[1] - lrs[0] if len(lrs) > 1 else 1.0
            extent = (lrs[0] - step / 2, lrs[-1] + step / 2, -0.5, len(values) - 0.5)
            image = ax.imshow(np.ma.masked_invalid(z), origin="lower", aspect="auto", extent=extent, cmap=cmap,
                              vmin=lo, vmax=hi, interpolation="nearest")
            ax.plot(path_x, path_y, color="white", linewidth=0.8, marker="o", markersize=2, gid="path")
            b, v = g.best_log2_lr[i], joint.best_value[i]
            if b is not None and v is not None:
                ax.scatter([b], [row[v]], marker="*", s=70, color="red", edgecolor="black", linewidth=0.5, zorder=6,
                           gid="optimum")
            ax.grid(False)
            ax.set_yticks(range(len(values)), [f"{v:g}" for v in values])
            ax.set_title(f"{g.axis} {scale}")
            ax.set_xlabel("log$_2$ learning rate")
        axes[0].set_ylabel(joint.key)
        fig.colorbar(image, ax=axes, label=LABELS.get(metric, metric), shrink=0.9)
        drift = "n/a" if joint.value_drift is None else f"{joint.value_drift:+.2g}"
        unit = "octaves per doubling" if joint.value_coordinate == "log2" else "per doubling (its units; the grid holds 0)"
        fig.suptitle(f"{description([g])}\n{LABELS.get(metric, metric)} over (LR, {joint.key}); star: joint optimum; "
                     f"line: its path across {g.axis}\nLR {drift_words(g)}; {joint.key} drift {drift} {unit}")
        fit_titles(fig)
    return fig


def running_mean(y: np.ndarray, window: int) -> np.ndarray:
    """Centred running mean over `window` points (fewer where the curve has fewer, an odd number), NaN
    (not drawn) where the whole window does not fit: a window cut short at the start of a falling
    curve would average only the later, lower losses and draw the mean below the first ones."""
    n = len(y)
    window = min(window, n if n % 2 else n - 1)
    if window < 1:
        return np.full(n, np.nan)
    half = window // 2
    out = np.full(n, np.nan)
    out[half : n - half] = np.convolve(y, np.ones(window) / window, mode="valid")
    return out


def _mean_history(runs) -> tuple[np.ndarray, np.ndarray, bool]:
    """Mean loss curve over the runs' thinned histories; diverged runs end early."""
    by_step: dict[int, list[float]] = {}
    diverged = bool(runs["diverged"].any())
    for steps, losses in zip(runs["history_step"], runs["history_loss"]):
        for s, v in zip(steps, losses):
            by_step.setdefault(int(s), []).append(np.nan if v is None else float(v))
    step = np.array(sorted(by_step), dtype=float)
    n = len(runs)
    # Average only where every run still has a value, so a dead run never bends the mean.
    mean = np.array([np.mean(by_step[int(s)]) if len(by_step[int(s)]) == n else np.nan for s in step])
    if diverged:
        keep = np.isfinite(mean)
        last = int(np.flatnonzero(keep)[-1]) + 1 if keep.any() else 1
        step, mean = step[:last], mean[:last]
    return step, mean, diverged


# ----------------------------------------------------------------------------- files


def slug(group_or_family) -> str:
    family = group_or_family if isinstance(group_or_family, list) else [group_or_family]
    f = family[0].fixed
    parts = [str(f.get(k, "")) for k in FAMILY_KEYS] + [family[0].axis]
    text = re.sub(r"[^A-Za-z0-9_.=-]+", "_", "-".join(p for p in parts if p)).strip("_")
    if len(text) > MAX_SLUG:  # a file name has 255 bytes, and a figure's adds its kind and metric
        text = f"{text[:MAX_SLUG - 17]}-{hashlib.sha1(text.encode()).hexdigest()[:16]}"
    return text


MAX_SLUG = 160


NO_CURVES = "no training curves: its runs hold only their final losses (imported from a table)"


def has_curves(g: Group) -> bool:
    """Whether any run of the group recorded its loss curve: a table's imported runs hold none."""
    return g.runs is not None and any(len(h) for h in g.runs["history_step"])


def without_curves(groups: list[Group]) -> list[str]:
    """The studies some of whose figures have no training curves (`NO_CURVES`), by name."""
    return sorted({str(f[0].fixed.get("study")) for f in families(groups) if not any(map(has_curves, f))})


def family_figures(family: list[Group], metric: str = "train_loss", curves_lr: float | None = None):
    """(file stem, figure) for each figure of one family; the caller closes them."""
    stem = slug(family)
    yield f"{stem}-lr-{metric}", lr_figure(family, metric)
    yield f"{stem}-transfer-{metric}", transfer_figure(family, metric)
    if all(g.runs is not None for g in family) and any(map(has_curves, family)):
        yield f"{stem}-curves", curves_figure(family, curves_lr)
    grids = [g for g in family if g.joint is not None]
    for i, g in enumerate(grids):
        yield f"{stem}-joint{'' if len(grids) == 1 else f'-{i + 1}'}-{metric}", joint_figure(g, metric)


def figures(groups: list[Group], metric: str = "train_loss", curves_lr: float | None = None) -> Iterator[tuple[str, object]]:
    """(file stem, figure) for every figure of every family; the caller closes them."""
    for family in families(groups):
        yield from family_figures(family, metric, curves_lr)


def save_figures(groups: list[Group], out: Path, metric: str = "train_loss", curves_lr: float | None = None) -> list[Path]:
    """Every figure as PNG and PDF in `out`; returns the PNG paths."""
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for stem, fig in figures(groups, metric, curves_lr):
        paths.append(save(fig, out / stem)[0])
    return paths

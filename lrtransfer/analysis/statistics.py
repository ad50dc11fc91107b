"""Statistics: where each scale's optimum lies, how far it moves, and how sure we are.

Within a group (see `grouping`) each scale gets one curve, the mean over seeds at
each learning rate (a point where any seed diverged is a diverged point and never
wins).

- Each scale's optimum is located below the grid spacing by the parabola through
  the grid minimum and its two neighbours in log2 LR. The parabola is exact for a
  quadratic basin and its vertex never leaves the two neighbours, so it cannot
  extrapolate. A minimum on the first or last LR of the grid is *not* located
  (the true optimum may lie beyond it); a minimum next to a diverged point keeps
  its grid value (nothing to fit on that side).
- Drift is the least-squares slope of the located optima against log2 scale, in
  octaves per doubling: 0 means the optimum transfers, -1 means it halves every
  time the model doubles.
- Its 95% interval is the wider of two. (a) A bootstrap: resample the seeds when
  there are several (spread scaled by sqrt(S/(S-1)), the plug-in bootstrap's
  shortfall for S values), else perturb the single curve by the noise measured
  on it (`curve_noise`); recompute every optimum and the slope each time. (b) The
  classical least-squares interval from the scatter of the optima about the line
  (Student t, n-2 df), which also sees what (a) misses: seed noise shared across
  a run's LRs, grid effects, curvature. scripts/interval_coverage.py measures
  how often the result covers a known drift.
- The cost of transferring: each scale's loss at the smallest scale's best grid
  LR, minus its own best loss.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd

from lrtransfer.analysis.records import plain

CONFIDENCE = 0.95
N_RESAMPLES = 2000
# Where a scale's optimum sits on its LR grid.
INTERIOR, NEAR_DIVERGENCE, EDGE_LOW, EDGE_HIGH, NONE, FLAT = (
    "interior",
    "next to divergence",
    "grid edge (low)",
    "grid edge (high)",
    "all diverged",
    "same loss at every LR",
)
LOCATED = (INTERIOR, NEAR_DIVERGENCE)
# ----------------------------------------------------------------------------- optima


@dataclass
class Optima:
    """Optima of B curves on one LR grid; every field has shape (B,)."""

    log2_lr: np.ndarray  # sub-grid optimum (NaN when no finite point)
    value: np.ndarray  # the parabola's value there (the grid value where no parabola)
    grid_index: np.ndarray  # index of the grid minimum (-1 when none)
    kind: np.ndarray  # INTERIOR, NEAR_DIVERGENCE, EDGE_LOW, EDGE_HIGH, NONE or FLAT


def subgrid_optima(x: np.ndarray, y: np.ndarray, maximize: bool = False, window: float | None = None) -> Optima:
    """Locate the optimum of each row of `y` (B, L) on the grid `x` (L,), NaN = diverged/missing.

    Parabola through the grid minimum and its two neighbours; vertex and value. With `window`
    (octaves), the least-squares parabola through every finite point within `window` of the
    grid minimum instead (`windowed_vertex`): the same on a grid `window` apart, and on an
    adaptive sweep's LRs, bunched round the optimum, it averages their noise where three close
    points would magnify it.
    """
    x = np.asarray(x, dtype=float)
    y = np.atleast_2d(np.asarray(y, dtype=float))
    s = -y if maximize else y
    B, L = s.shape
    rows = np.arange(B)
    filled = np.where(np.isfinite(s), s, np.inf)
    i = filled.argmin(1)
    found = np.isfinite(filled[rows, i])
    il, ir = np.clip(i - 1, 0, L - 1), np.clip(i + 1, 0, L - 1)
    has_l, has_r = i > 0, i < L - 1
    yl, y0, yr = s[rows, il], s[rows, i], s[rows, ir]
    interior = found & has_l & has_r & np.isfinite(yl) & np.isfinite(yr)

    xl, x0, xr = x[il], x[i], x[ir]
    if window is None:
        with np.errstate(divide="ignore", invalid="ignore"):
            d1 = (y0 - yl) / (x0 - xl)  # Newton form: p(x) = yl + d1 (x - xl) + a (x - xl)(x - x0)
            d2 = (yr - y0) / (xr - x0)
            a = (d2 - d1) / (xr - xl)
            vertex = np.clip((xl + x0) / 2 - d1 / (2 * a), xl, xr)
            at_vertex = yl + d1 * (vertex - xl) + a * (vertex - xl) * (vertex - x0)
    else:
        vertex, at_vertex, a = windowed_vertex(x, s, i, window)
    curved = interior & (a > 0)
    log2_lr = np.where(curved, vertex, np.where(found, x0, np.nan))
    value = np.where(curved, at_vertex, np.where(found, y0, np.nan))
    kind = np.full(B, NEAR_DIVERGENCE, dtype=object)
    kind[interior] = INTERIOR
    kind[found & ~has_r] = EDGE_HIGH
    kind[found & ~has_l] = EDGE_LOW
    kind[~found] = NONE
    # three or more LRs and not a digit between their losses: the LR changed nothing (a script that ignores
    # its {lr}), and the first of equal losses would read as an optimum on the grid's low edge
    with np.errstate(invalid="ignore"):
        flat = found & (np.isfinite(s).sum(1) >= 3) & np.all(~np.isfinite(s) | (s == y0[:, None]), 1)
    kind[flat] = FLAT
    log2_lr[flat] = np.nan
    return Optima(log2_lr, -value if maximize else value, np.where(found & ~flat, i, -1), kind)


def windowed_vertex(x: np.ndarray, s: np.ndarray, i: np.ndarray, window: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Vertex, value there and curvature (B,) of the least-squares parabola through the finite
    points of each row of `s` (B, L) within `window` of its grid minimum x[i], or out to its
    nearest finite neighbour on either side where that is further (a coarse grid's parabola is
    its three points'); the vertex kept within those points. Curvature 0 (no parabola) where
    fewer than three points are in reach."""
    x0 = x[i][:, None]  # (B, 1)
    u = x[None, :] - x0  # (B, L)
    finite = np.isfinite(s)
    left = np.where(finite & (u < -1e-9), -u, np.inf).min(1)  # (B,) distance to the nearest finite LR below
    right = np.where(finite & (u > 1e-9), u, np.inf).min(1)
    reach = np.maximum(window, np.where(np.isfinite(np.maximum(left, right)), np.maximum(left, right), window))
    m = (np.abs(u) <= reach[:, None] + 1e-9) & finite
    uz, sz = np.where(m, u, 0.0), np.where(m, s, 0.0)
    S = [np.sum(m * uz**k, 1) for k in range(5)]  # sums of u^0 .. u^4 over the window
    T = [np.sum(uz**k * sz, 1) for k in range(3)]
    A = np.stack([np.stack(S[r : r + 3], -1) for r in range(3)], -2)  # (B, 3, 3) normal equations
    ok = m.sum(1) >= 3
    A[~ok] = np.eye(3)
    c = np.linalg.solve(A, np.stack(T, -1)[..., None])[..., 0]  # (B, 3): c0 + c1 u + c2 u^2
    c[~ok] = 0.0
    lo = np.where(m, u, np.inf).min(1)
    hi = np.where(m, u, -np.inf).max(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        uv = np.clip(-c[:, 1] / (2 * c[:, 2]), lo, hi)
    return x0[:, 0] + uv, c[:, 0] + c[:, 1] * uv + c[:, 2] * uv**2, c[:, 2]


# ----------------------------------------------------------------------------- drift


@dataclass
class Fit:
    """The drift line and its confidence band, for the transfer plot."""

    slope: float
    intercept: float  # optimal log2 LR at log2 scale 0
    ci: tuple[float, float] | None
    method: str | None
    band_x: np.ndarray  # log2 scale
    band_lo: np.ndarray
    band_hi: np.ndarray
    # What the fit was made of, for a prediction at a new scale (`prediction`):
    x: np.ndarray | None = None  # (n,) log2 scales fitted
    y: np.ndarray | None = None  # (n,) their optima
    resampled: np.ndarray | None = None  # (B, n) resampled optima, deviations from `y` already inflated


def drift(scales: list[float], best: list[float | None]) -> float | None:
    """Least-squares slope of best log2 LR against log2 scale; None with fewer than two points."""
    fit = _ols([math.log2(s) for s, b in zip(scales, best) if b is not None], [b for b in best if b is not None])
    return None if fit is None else fit[0]


def _ols(x, y) -> tuple[float, float] | None:
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    if len(set(x.tolist())) < 2:
        return None
    slope, intercept = np.polyfit(x, y, 1)
    return float(slope), float(intercept)


def _slopes(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """OLS slope and intercept of each row of `y` (B, n) against `x` (n,)."""
    xc = x - x.mean()
    slope = (y - y.mean(1, keepdims=True)) @ xc / (xc @ xc)
    return slope, y.mean(1) - slope * x.mean()


@functools.lru_cache(maxsize=64)
def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t (p > 0.5), by bisection on its CDF integrated numerically (cached: a
    coverage check asks for the same few thousands of times)."""
    c = math.exp(math.lgamma((df + 1) / 2) - math.lgamma(df / 2)) / math.sqrt(df * math.pi)

    def cdf(t: float) -> float:
        u = np.linspace(0.0, t, 4001)
        f = c * (1 + u * u / df) ** (-(df + 1) / 2)
        return 0.5 + float(np.sum((f[1:] + f[:-1]) / 2) * (u[1] - u[0]))

    lo, hi = 0.0, 1.0
    while cdf(hi) < p:
        lo, hi = hi, hi * 2
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if cdf(mid) < p else (lo, mid)
    return (lo + hi) / 2


def _percentile_fit(x: np.ndarray, opt: np.ndarray, slope: float, intercept: float, method: str, inflate: float) -> Fit | None:
    """Interval and band from resampled optima `opt` (B, n): their deviations from the estimate,
    scaled by `inflate`, added to it, and their percentiles taken."""
    ok = np.isfinite(opt).all(1)
    if ok.sum() < 0.5 * len(opt):
        return None
    s, c = _slopes(x, opt[ok])
    s, c = slope + inflate * (s - slope), intercept + inflate * (c - intercept)
    q = ((1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2)
    bx = np.linspace(x.min(), x.max(), 41)
    lines = c[:, None] + s[:, None] * bx
    lo, hi = np.quantile(s, q)
    dropped = int((~ok).sum())
    note = f"; {dropped} resamples without an optimum dropped" if dropped else ""
    return Fit(slope, intercept, (float(lo), float(hi)), method + note, bx, *np.quantile(lines, q, axis=0))


def _residual_fit(x: np.ndarray, y: np.ndarray, slope: float, intercept: float) -> Fit | None:
    """Classical least-squares interval from the scatter of the optima about the line (n >= 3)."""
    n = len(x)
    if n < 3:
        return None
    resid = y - (intercept + slope * x)
    s2 = float(resid @ resid) / (n - 2)
    sxx = float(((x - x.mean()) ** 2).sum())
    t = t_quantile((1 + CONFIDENCE) / 2, n - 2)
    half = t * math.sqrt(s2 / sxx)
    bx = np.linspace(x.min(), x.max(), 41)
    band = t * np.sqrt(s2 * (1 / n + (bx - x.mean()) ** 2 / sxx))
    line = intercept + slope * bx
    method = f"least squares on the scatter of the optima about the line (t, {n - 2} df)"
    return Fit(slope, intercept, (slope - half, slope + half), method, bx, line - band, line + band)


def _width(fit: Fit | None) -> float:
    return -1.0 if fit is None or fit.ci is None else fit.ci[1] - fit.ci[0]


def inflation(n_seeds: int) -> float:
    """A bootstrap over S values spreads sqrt((S-1)/S) too little (plug-in variance); this undoes it."""
    return math.sqrt(n_seeds / (n_seeds - 1)) if n_seeds > 1 else 1.0


def scale_intervals(scales: list, best: list, located: list[bool], boot: dict | None, inflate: float) -> list:
    """Each located scale's 95% interval from its resampled optima `boot[scale]` (n,); None elsewhere."""
    out = [None] * len(scales)
    if boot is None:
        return out
    q = ((1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2)
    for i, s in enumerate(scales):
        b = boot[s][np.isfinite(boot[s])]
        if located[i] and b.size:
            out[i] = [float(best[i] + inflate * (v - best[i])) for v in np.quantile(b, q)]
    return out


def drift_fit(x: np.ndarray, y: np.ndarray, boot: np.ndarray | None, method: str | None, inflate: float) -> Fit | None:
    """The drift line of optima `y` against log2 scales `x`, with the wider of its two intervals.

    `boot` (B, n): resampled optima at the same scales. Few seeds (or one, whose
    curve noise is shared across LRs: same init, same batches) can understate how
    far a new seed moves the optimum; the scatter of the optima about the line
    measures that too, so the wider interval is kept. None with fewer than two scales;
    a Fit without interval (`ci` None) when neither can be given.
    """
    ols = _ols(x, y)
    if ols is None:
        return None
    y = np.asarray(y, dtype=float)
    fit = None if boot is None else _percentile_fit(x, boot, *ols, method, inflate)
    resid = _residual_fit(x, y, *ols)
    if _width(resid) > _width(fit):
        fit = resid
    if fit is None:
        fit = Fit(*ols, None, None, x, np.full(len(x), np.nan), np.full(len(x), np.nan))
    fit.x, fit.y = np.asarray(x, dtype=float), y
    if boot is not None:
        fit.resampled = y + inflate * (boot - y)
    return fit


def widen(fit: Fit, other: Fit | None) -> None:
    """`fit` given `other`'s interval, band and method where `other`'s interval is the wider (the same
    line: what a prediction reads of `fit`'s resampled optima stays)."""
    if other is not None and _width(other) > _width(fit):
        fit.ci, fit.method, fit.band_x, fit.band_lo, fit.band_hi = other.ci, other.method, other.band_x, other.band_lo, other.band_hi


def replicate_fit(x: np.ndarray, y: np.ndarray, n: np.ndarray, within_ss: float, within_df: int,
                  adaptive: bool = True) -> Fit | None:
    """The drift line of optima `y` (each the optimum of its scale's mean curve over n_i seeds)
    against log2 scales `x`, weighted by n_i, with the interval of a regression with replicates.

    An adaptive sweep gives its scales different numbers of seeds, so each optimum is as
    unsure as one seed's (s^2, the same at every scale) divided by its n_i: weighted least
    squares. s^2 is pooled from the two places it shows: the spread of the seeds' own
    optima within each scale (`within_ss`, `within_df` = sum of (seeds - 1)) and the
    weighted scatter of the scales' optima about the line (n - 2 df), whose lack of fit
    (a bend) widens it honestly. Student t with the pooled degrees of freedom.
    """
    k, w = len(x), np.asarray(n, dtype=float)
    df = within_df + k - 2
    if k < 2 or len(set(np.asarray(x).tolist())) < 2:
        return None
    xw = float(w @ x / w.sum())
    sxx = float(w @ (x - xw) ** 2)
    slope = float(w @ ((x - xw) * y) / sxx)
    intercept = float(w @ y / w.sum()) - slope * xw
    if df < 1:  # two scales of one seed each: a line, no spread to measure
        nan = np.full(2, np.nan)
        return Fit(slope, intercept, None, None, np.array([x.min(), x.max()]), nan, nan, np.asarray(x, float), np.asarray(y, float))
    resid = y - (intercept + slope * x)
    s2 = (float(w @ resid**2) + within_ss) / df
    t = t_quantile((1 + CONFIDENCE) / 2, df)
    half = t * math.sqrt(s2 / sxx)
    bx = np.linspace(x.min(), x.max(), 41)
    band = t * np.sqrt(s2 * (1 / w.sum() + (bx - xw) ** 2 / sxx))
    line = intercept + slope * bx
    fewest, most = int(w.min()), int(w.max())
    seeds = f"{fewest} seed{'s' if fewest > 1 else ''}" if fewest == most else f"{fewest} to {most} seeds"
    method = (f"weighted least squares on the optima, {seeds} per scale "
              f"({'adaptive: ' if adaptive else ''}t, {df} df from the seeds' spread"
              f"{' and the scatter about the line' if k > 2 else ''})")
    fit = Fit(slope, intercept, (slope - half, slope + half), method, bx, line - band, line + band)
    fit.x, fit.y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    return fit


@dataclass
class ScaleOptima:
    """Each scale's optimum on its mean curve; lists in scale order."""

    best: list[float | None]  # sub-grid log2 LR
    value: list[float | None]  # the parabola's value there
    grid_best: list[float | None]  # log2 LR of the best grid point
    grid_value: list[float | None]  # the best measured mean
    kind: list[str]  # where it sits: INTERIOR, NEAR_DIVERGENCE, EDGE_LOW, EDGE_HIGH, NONE, FLAT


def scale_optima(cv: pd.DataFrame, scales: list[int], maximize: bool, window: float | None = None) -> ScaleOptima:
    """Each scale's optimum on its mean curve (`curves`' rows of that scale)."""
    per_scale = []
    for s in scales:
        c = cv[cv["scale"] == s].sort_values("log2_lr")
        o = subgrid_optima(c["log2_lr"].to_numpy(), c["mean"].to_numpy(dtype=float)[None], maximize, window)
        i = int(o.grid_index[0])
        grid = (float(c["log2_lr"].iloc[i]), float(c["mean"].iloc[i])) if i >= 0 else (None, None)
        per_scale.append((plain(float(o.log2_lr[0])), plain(float(o.value[0])), *grid, str(o.kind[0])))
    return ScaleOptima(*(list(t) for t in zip(*per_scale)))


def curves(df: pd.DataFrame, axis: str, metric: str = "train_loss") -> pd.DataFrame:
    """Mean and standard error over seeds of `metric` per (scale, log2 LR).

    A point where any seed diverged is a diverged point: its mean is NaN.
    """
    g = df.groupby([axis, "log2_lr"])
    out = g[metric].agg(["mean", "sem", "count"]).rename(columns={"count": "n"})
    out["n"] = g["diverged"].size()
    out["n_diverged"] = g["diverged"].sum()
    out.loc[out["n_diverged"] > 0, ["mean", "sem"]] = np.nan
    return out.reset_index().rename(columns={axis: "scale"})


def transfer_cost(cv: pd.DataFrame, tables: dict, scales: list, grid_lr: list, grid_val: list, t_lr: float | None):
    """Each scale's mean at the transferred grid LR `t_lr`, how much worse that is than its best
    measured mean (>= 0 by construction), and the standard error over seeds of that difference,
    paired by seed (a seed's runs share init and batches). None where the scale has no finite
    value at `t_lr` (diverged or not run)."""
    loss, cost, se = [], [], []
    for s, gl, gv in zip(scales, grid_lr, grid_val):
        c = cv[cv["scale"] == s].set_index("log2_lr")
        at = float(c["mean"].get(t_lr, math.nan)) if t_lr is not None else math.nan
        if gv is None or not math.isfinite(at):
            row = (None, None, None)
        else:
            x, V = tables[s][0], tables[s][1]  # (L,), (S, L)
            d = V[:, np.flatnonzero(x == t_lr)[0]] - V[:, np.flatnonzero(x == gl)[0]]
            d = d[np.isfinite(d)]
            row = (at, abs(at - gv), float(d.std(ddof=1) / math.sqrt(d.size)) if d.size > 1 else None)
        for out, v in zip((loss, cost, se), row):
            out.append(v)
    return loss, cost, se


def diverged_at(cv: pd.DataFrame, scales: list, log2_lr: float | None) -> list[bool]:
    rows = cv[cv["log2_lr"] == log2_lr].set_index("scale")["n_diverged"]
    return [bool(rows.get(s, 0) > 0) for s in scales]



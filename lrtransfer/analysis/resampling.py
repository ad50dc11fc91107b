"""How sure each optimum is: the seeds, or the curve's own noise, resampled.

Several seeds: the seed list is resampled with replacement, the same draw for every
scale. One seed: Gaussian noise of the size measured on the curves themselves
(`curve_noise`) is added to every point. Each resample's optima are found as the
measured ones are (`statistics.subgrid_optima`), so the interval of an optimum and of
the drift comes from what the data would have given, had it been drawn again.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from lrtransfer.analysis.statistics import subgrid_optima


def seed_tables(sub: pd.DataFrame, axis: str, metric: str, scales: list[int]):
    """Per scale: grid x (L,), values V (S, L) (NaN: diverged or not run), diverged D, measured M."""
    seeds = sorted(sub["run_seed"].unique())
    tables = {}
    for scale in scales:
        s = sub[sub[axis] == scale]
        x = np.sort(s["log2_lr"].unique())
        vals = s.pivot_table(index="run_seed", columns="log2_lr", values=metric, aggfunc="mean", dropna=False)
        div = s.pivot_table(index="run_seed", columns="log2_lr", values="diverged", aggfunc="max", dropna=False)
        meas = s.pivot_table(index="run_seed", columns="log2_lr", values="diverged", aggfunc="size", dropna=False)
        vals, div, meas = (t.reindex(index=seeds, columns=x) for t in (vals, div, meas))
        D = div.fillna(False).to_numpy(dtype=bool)
        M = meas.fillna(0).to_numpy(dtype=float) > 0
        V = np.where(M & ~D, vals.to_numpy(dtype=float), np.nan)
        tables[scale] = (x, V, D, M)
    return seeds, tables


def _resampled_means(V: np.ndarray, D: np.ndarray, M: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """Mean curves (B, L) over the seeds `idx` (B, S); a point is NaN when a drawn seed diverged there."""
    Vb, Db, Mb = V[idx], D[idx], M[idx]  # (B, S, L)
    valid = Mb & ~Db & np.isfinite(Vb)
    count = valid.sum(1)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(valid, Vb, 0.0).sum(1) / count
    return np.where(Db.any(1) | (count == 0), np.nan, mean)


def curve_noise(curves: list[tuple[np.ndarray, np.ndarray]]) -> float | None:
    """Noise of loss-vs-log2-LR curves, pooled: robust scale of third differences of every four
    neighbouring finite points.

    A third (divided) difference is zero for any quadratic, whatever the spacing, so the
    smooth basin does not count as noise; for independent noise of s.d. sigma, the
    difference sum_j c_j y_j has s.d. sigma * sqrt(sum_j c_j^2), which each is divided
    by. On a uniform stretch that is the plain difference y3 - 3 y2 + 3 y1 - y0 over
    sqrt(20); an adaptive sweep's grids are uneven. The median makes the few steep
    points near divergence count little.
    """
    d3 = []
    for x, y in curves:
        ok = np.isfinite(y)
        for start in range(len(x) - 3):
            w = slice(start, start + 4)
            if not ok[w].all():
                continue
            steps = np.diff(x[w])
            if np.allclose(steps, steps[0]):
                d3.append(abs(y[start + 3] - 3 * y[start + 2] + 3 * y[start + 1] - y[start]))
            else:  # in the same units: a uniform stretch's difference has s.d. sigma * sqrt(20)
                xs = x[w]
                c = np.array([1 / np.prod([xs[j] - xs[k] for k in range(4) if k != j]) for j in range(4)])
                d3.append(abs(float(c @ y[w])) / math.sqrt(float(c @ c)) * math.sqrt(20))
    if not d3:
        return None
    return float(np.median(d3) / (0.6745 * math.sqrt(20)))


def replicates(tables: dict, seeds: list, maximize: bool, rng: np.random.Generator, n: int, window: float | None = None):
    """Resampled sub-grid optima per scale (n,) each, and a description of what was resampled.

    Several seeds: resample the seed list with replacement, the same draw for every
    scale (seeds share their batches across scales, so pairing keeps that
    correlation). One seed: add Gaussian noise of the size measured on the curves
    themselves (`curve_noise`) to every point. A scale measured with one seed among
    scales with several (a larger scale run once, say) is resampled the one-seed way,
    with the noise of the single-seed curves of every scale: resampling seeds would
    redraw its one curve every time and give it an interval of zero width.
    """
    if len(seeds) >= 2:
        idx = rng.integers(0, len(seeds), size=(n, len(seeds)))
        alone = [s for s, (x, V, D, M) in tables.items() if M.any(1).sum() < 2]
        out = {s: subgrid_optima(x, _resampled_means(V, D, M, idx), maximize, window).log2_lr
               for s, (x, V, D, M) in tables.items() if s not in alone}
        how = f"bootstrap over seeds ({len(seeds)} seeds, {n} resamples)"
        if alone:  # V is NaN where a seed diverged or did not run: each row is one seed's curve
            sigma = curve_noise([(x, V[k]) for x, V, D, M in tables.values() for k in range(len(V)) if M[k].any()])
            if sigma is None:
                return None, None
            for s in alone:
                x, V, D, M = tables[s]
                out[s] = _with_noise(x, V[int(M.any(1).argmax())], sigma, n, rng, maximize, window)
            how += f"; {', '.join(f'{s:g}' for s in alone)} (one seed): LR-curve noise s.d. {sigma:.3g}"
        return out, how
    means = {s: (x, _resampled_means(V, D, M, np.zeros((1, 1), dtype=int))[0]) for s, (x, V, D, M) in tables.items()}
    sigma = curve_noise(list(means.values()))
    if sigma is None:
        return None, None
    out = {s: _with_noise(x, y, sigma, n, rng, maximize, window) for s, (x, y) in means.items()}
    return out, f"bootstrap over LR-curve noise (one seed; noise s.d. {sigma:.3g} from the curves, {n} resamples)"


def _with_noise(x: np.ndarray, y: np.ndarray, sigma: float, n: int, rng: np.random.Generator, maximize: bool,
                window: float | None = None) -> np.ndarray:
    """(n,) optima of the curve y (L,) with Gaussian noise of s.d. `sigma` added to every point."""
    return subgrid_optima(x, y + sigma * rng.standard_normal((n, len(y))), maximize, window).log2_lr

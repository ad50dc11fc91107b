"""From records to numbers: where each scale's optimum lies, how far it moves, and how sure we are.

Reads records only (never the engine). A *group* is a family of LR curves equal
in everything but the scale axis (`width` or `depth`) and the seed; within a
group each scale gets one curve, the mean over seeds at each learning rate (a
point where any seed diverged is a diverged point and never wins).

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

import math
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from lrtransfer.errors import UserError
from lrtransfer.store import iter_records

SCALE_AXES = ("width", "depth")
METRICS = ("train_loss", "eval_loss", "eval_acc")
TOLERANCE = 0.25  # |drift| (octaves per doubling) within which an optimum "transfers"
CONFIDENCE = 0.95
N_RESAMPLES = 2000
VERDICTS = ("transfers", "drifts down", "drifts up", "inconclusive", "undetermined")
# Where a scale's optimum sits on its LR grid.
INTERIOR, NEAR_DIVERGENCE, EDGE_LOW, EDGE_HIGH, NONE = (
    "interior",
    "next to divergence",
    "grid edge (low)",
    "grid edge (high)",
    "all diverged",
)
LOCATED = (INTERIOR, NEAR_DIVERGENCE)
# Per-run columns of `load_runs` (everything else is the job's config, dotted).
RUN_COLUMNS = (
    "run_seed",
    "lr",
    "log2_lr",
    "initial_loss",
    "train_loss",
    "eval_loss",
    "eval_acc",
    "diverged",
    "diverged_step",
)
HISTORY_COLUMNS = ("history_step", "history_loss")
# Columns that never define a group: replicates, the LR grid, where/how a job ran.
_NOT_GROUPING = ("seed", "n_seeds", "results_dir", "job_id")
_NOT_GROUPING_PREFIX = ("lr.", "engine.", "hydra.")
# Config values worth naming in a group's `fixed` (besides whatever varies).
_SHOWN = ("study", "model.name", "param.name", "optim.name", "data.name", "train.steps", "train.batch_size")


class NoRecordsError(UserError, ValueError):
    """No finished record under a directory."""


class SkippedRecordWarning(UserWarning):
    """A record file was not used; the message names it and says why."""


# ----------------------------------------------------------------------------- loading


@dataclass
class Scan:
    """Everything found below a results folder."""

    runs: pd.DataFrame  # one row per run of every complete record (may be empty)
    failed: list[dict]  # failed jobs: study, job_id, path, error
    skipped: list[str]  # unreadable or malformed record files, with the reason


def scan(root: str | Path) -> Scan:
    """Read every record below `root`; a bad file is skipped with a `SkippedRecordWarning`."""
    root = Path(root)
    if not root.exists():
        raise NoRecordsError(f"'{root}' does not exist; give the results folder of a sweep (e.g. results/)")
    rows, failed, skipped = [], [], []
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for path, rec in iter_records(root):
            study = rec["config"].get("name", "default") if isinstance(rec["config"], dict) else "default"
            if rec.get("status") != "complete":
                failed.append({"study": study, "job_id": rec.get("job_id"), "path": str(path), "error": rec.get("error")})
                continue
            try:
                rows.extend(_rows(rec))
            except (KeyError, TypeError, ValueError, AttributeError) as e:
                skipped.append(f"skipped {path}: malformed record ({e.__class__.__name__}: {e})")
    skipped = [str(w.message) for w in caught] + skipped
    for message in skipped:
        warnings.warn(message, SkippedRecordWarning, stacklevel=2)
    # object columns keep each config value as the record wrote it: an integer key
    # that some parameterizations lack stays an integer, not a float beside NaNs
    df = pd.DataFrame(rows, dtype=object)
    if not df.empty:
        for m in ("run_seed", "lr", "log2_lr", "initial_loss", *METRICS, *SCALE_AXES):
            if m in df.columns:
                df[m] = pd.to_numeric(df[m], errors="coerce")
        df["diverged"] = df["diverged"].astype(bool)
    return Scan(df, failed, skipped)


def _rows(rec: dict) -> list[dict]:
    """A complete record's runs as flat rows; raises on a malformed record."""
    flat = pd.json_normalize(rec["config"], sep=".").iloc[0].to_dict()
    flat["study"] = flat.pop("name", "default")
    for axis in SCALE_AXES:  # the scales every table and figure is built on
        v = flat.get(axis)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise ValueError(f"config.{axis}={v!r} is not a positive number")
    out = []
    for run in rec["runs"]:
        out.append(
            {
                **flat,
                "job_id": rec.get("job_id"),
                "run_seed": run["seed"],
                "lr": run["lr"],
                "log2_lr": float(run["log2_lr"]),
                "initial_loss": run.get("initial_loss"),
                "train_loss": run["final_loss"],
                "eval_loss": run.get("eval_loss"),
                "eval_acc": run.get("eval_acc"),
                "diverged": bool(run["diverged"]),
                "diverged_step": run.get("diverged_step"),
                "history_step": list(run.get("history_step") or []),
                "history_loss": list(run.get("history_loss") or []),
            }
        )
    return out


def load_runs(root: str | Path) -> pd.DataFrame:
    """One row per run of every complete record below `root`: config columns (dotted) + run columns."""
    df = scan(root).runs
    if df.empty:
        raise NoRecordsError(f"no finished records under '{root}'; run `lrtransfer sweep` first")
    return df


def export_frame(df: pd.DataFrame) -> pd.DataFrame:
    """The runs as a flat table (no per-step history): identity, config columns, then run columns."""
    run = [c for c in RUN_COLUMNS if c in df.columns]
    first = [c for c in ("study", "job_id", *SCALE_AXES) if c in df.columns]
    config = sorted(c for c in df.columns if c not in (*first, *run, *HISTORY_COLUMNS))
    out = df[first + config + run].copy()
    out["diverged_step"] = pd.array(out["diverged_step"], dtype="Int64")
    return out.reset_index(drop=True)


def config_columns(df: pd.DataFrame) -> list[str]:
    metrics = {*RUN_COLUMNS, *HISTORY_COLUMNS}
    return [
        c
        for c in df.columns
        if c not in metrics and c not in _NOT_GROUPING and not c.startswith(_NOT_GROUPING_PREFIX)
    ]


def scale_axis(df: pd.DataFrame) -> str:
    """The axis that varies within groups: width if it varies, else depth."""
    for axis in SCALE_AXES:
        keys = [c for c in config_columns(df) if c != axis]
        if (df.groupby(keys, dropna=False)[axis].nunique() > 1).any():
            return axis
    return SCALE_AXES[0]


def maximizes(metric: str) -> bool:
    return metric == "eval_acc"


# ----------------------------------------------------------------------------- optima


@dataclass
class Optima:
    """Optima of B curves on one LR grid; every field has shape (B,)."""

    log2_lr: np.ndarray  # sub-grid optimum (NaN when no finite point)
    value: np.ndarray  # the parabola's value there (the grid value where no parabola)
    grid_index: np.ndarray  # index of the grid minimum (-1 when none)
    kind: np.ndarray  # INTERIOR, NEAR_DIVERGENCE, EDGE_LOW, EDGE_HIGH or NONE


def subgrid_optima(x: np.ndarray, y: np.ndarray, maximize: bool = False) -> Optima:
    """Locate the optimum of each row of `y` (B, L) on the grid `x` (L,), NaN = diverged/missing.

    Parabola through the grid minimum and its two neighbours; vertex and value.
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
    with np.errstate(divide="ignore", invalid="ignore"):
        d1 = (y0 - yl) / (x0 - xl)  # Newton form: p(x) = yl + d1 (x - xl) + a (x - xl)(x - x0)
        d2 = (yr - y0) / (xr - x0)
        a = (d2 - d1) / (xr - xl)
        vertex = np.clip((xl + x0) / 2 - d1 / (2 * a), xl, xr)
        at_vertex = yl + d1 * (vertex - xl) + a * (vertex - xl) * (vertex - x0)
    curved = interior & (a > 0)
    log2_lr = np.where(curved, vertex, np.where(found, x0, np.nan))
    value = np.where(curved, at_vertex, np.where(found, y0, np.nan))
    kind = np.full(B, NEAR_DIVERGENCE, dtype=object)
    kind[interior] = INTERIOR
    kind[found & ~has_r] = EDGE_HIGH
    kind[found & ~has_l] = EDGE_LOW
    kind[~found] = NONE
    return Optima(log2_lr, -value if maximize else value, np.where(found, i, -1), kind)


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


def t_quantile(p: float, df: int) -> float:
    """Quantile of Student's t (p > 0.5), by bisection on its CDF integrated numerically."""
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


def verdict(ci: tuple[float, float] | None, tolerance: float = TOLERANCE) -> str:
    """One word for the interval: within +-tolerance, clearly below/above 0, or neither."""
    if ci is None:
        return "undetermined"
    lo, hi = ci
    if -tolerance <= lo and hi <= tolerance:
        return "transfers"
    if hi < 0:
        return "drifts down"
    if lo > 0:
        return "drifts up"
    return "inconclusive"


# ----------------------------------------------------------------------------- resampling


def _seed_tables(sub: pd.DataFrame, axis: str, metric: str, scales: list[int]):
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
    """Noise of loss-vs-log2-LR curves, pooled: robust scale of third differences on uniform stretches.

    A third difference is zero for any quadratic, so the smooth basin does not count
    as noise; for independent noise of s.d. sigma it has s.d. sigma*sqrt(20). The
    median makes the few steep points near divergence count little.
    """
    d3 = []
    for x, y in curves:
        ok = np.isfinite(y)
        for start in range(len(x) - 3):
            w = slice(start, start + 4)
            steps = np.diff(x[w])
            if ok[w].all() and np.allclose(steps, steps[0]):
                d3.append(abs(y[start + 3] - 3 * y[start + 2] + 3 * y[start + 1] - y[start]))
    if not d3:
        return None
    return float(np.median(d3) / (0.6745 * math.sqrt(20)))


def _replicates(tables: dict, seeds: list, maximize: bool, rng: np.random.Generator, n: int):
    """Resampled sub-grid optima per scale (n,) each, and a description of what was resampled.

    Several seeds: resample the seed list with replacement, the same draw for every
    scale (seeds share their batches across scales, so pairing keeps that
    correlation). One seed: add Gaussian noise of the size measured on the curves
    themselves (`curve_noise`) to every point.
    """
    if len(seeds) >= 2:
        idx = rng.integers(0, len(seeds), size=(n, len(seeds)))
        out = {s: subgrid_optima(x, _resampled_means(V, D, M, idx), maximize).log2_lr for s, (x, V, D, M) in tables.items()}
        return out, f"bootstrap over seeds ({len(seeds)} seeds, {n} resamples)"
    means = {s: (x, _resampled_means(V, D, M, np.zeros((1, 1), dtype=int))[0]) for s, (x, V, D, M) in tables.items()}
    sigma = curve_noise(list(means.values()))
    if sigma is None:
        return None, None
    out = {s: subgrid_optima(x, y + sigma * rng.standard_normal((n, len(y))), maximize).log2_lr for s, (x, y) in means.items()}
    return out, f"bootstrap over LR-curve noise (one seed; noise s.d. {sigma:.3g} from the curves, {n} resamples)"


# ----------------------------------------------------------------------------- groups


@dataclass
class Group:
    """One family of LR curves and everything `summary` says about it."""

    fixed: dict
    axis: str
    scales: list[int]
    best_log2_lr: list[float | None]  # sub-grid optimum per scale
    best_loss: list[float | None]  # best measured mean (at grid_best_log2_lr)
    drift: float | None
    curves: pd.DataFrame = field(repr=False)  # scale, log2_lr, mean, sem, n, n_diverged
    metric: str = "train_loss"
    grid_best_log2_lr: list[float | None] = field(default_factory=list)
    best_loss_subgrid: list[float | None] = field(default_factory=list)  # the parabola's value at its vertex
    best_log2_lr_ci: list[list[float] | None] = field(default_factory=list)
    optimum: list[str] = field(default_factory=list)  # where the optimum sits on the grid
    n_seeds: list[int] = field(default_factory=list)
    n_runs: list[int] = field(default_factory=list)
    n_diverged: list[int] = field(default_factory=list)
    drift_ci: list[float] | None = None
    drift_scales: list[int] = field(default_factory=list)
    interval_method: str | None = None
    verdict: str = "undetermined"
    transfer_log2_lr: float | None = None
    transfer_loss: list[float | None] = field(default_factory=list)
    transfer_cost: list[float | None] = field(default_factory=list)
    transfer_cost_se: list[float | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    fit: Fit | None = field(default=None, repr=False)
    runs: pd.DataFrame | None = field(default=None, repr=False)

    _NOT_JSON = ("curves", "fit", "runs")

    def to_json(self) -> dict:
        return {k: _plain(getattr(self, k)) for k in self.__dataclass_fields__ if k not in self._NOT_JSON}

    @property
    def label(self) -> str:
        return "  ".join(f"{k}={v}" for k, v in self.fixed.items())


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


def best_point(curve: pd.DataFrame, maximize: bool = False) -> tuple[float | None, float | None]:
    """Grid point of the curve's optimum among non-diverged points."""
    finite = curve[np.isfinite(curve["mean"])]
    if finite.empty:
        return None, None
    row = finite.loc[finite["mean"].idxmax() if maximize else finite["mean"].idxmin()]
    return float(row["log2_lr"]), float(row["mean"])


def partition(df: pd.DataFrame) -> tuple[str, list[tuple[dict, pd.DataFrame]]]:
    """The scale axis, and each group's defining values (`fixed`) with its runs."""
    axis = scale_axis(df)
    keys = [c for c in config_columns(df) if c != axis]
    varying = [c for c in keys if df[c].astype(str).nunique(dropna=False) > 1]
    shown = [*_SHOWN, *(a for a in SCALE_AXES if a != axis)]
    shown += [c for c in varying if c not in shown]
    out = []
    for _, sub in df.groupby(keys, dropna=False, sort=True):
        # values from the rows themselves: groupby's keys turn integers beside NaN into floats
        fixed_all = sub.iloc[0][keys].to_dict()
        # a key this group's config does not have (another parameterization's) is not shown
        fixed = {k: _plain(fixed_all[k]) for k in shown if k in fixed_all}
        out.append(({k: v for k, v in fixed.items() if v is not None}, sub))
    return axis, out


def groups(df: pd.DataFrame, metric: str = "train_loss", *, n_resamples: int = N_RESAMPLES, seed: int = 0) -> list[Group]:
    """Every group of `df`, analysed. Deterministic: resampling uses a fixed `seed`."""
    axis, parts = partition(df)
    return [analyse(sub, axis, fixed, metric, np.random.default_rng(seed), n_resamples) for fixed, sub in parts]


def analyse(sub: pd.DataFrame, axis: str, fixed: dict, metric: str, rng: np.random.Generator, n_resamples: int) -> Group:
    """Optima, drift with its interval, verdict and transfer cost of one group's runs."""
    maximize = maximizes(metric)
    cv = curves(sub, axis, metric)
    scales = sorted(int(s) for s in cv["scale"].unique())
    seeds, tables = _seed_tables(sub, axis, metric, scales)
    warn: list[str] = []

    # Each scale's optimum on its mean curve.
    per_scale = []
    for s in scales:
        c = cv[cv["scale"] == s].sort_values("log2_lr")
        o = subgrid_optima(c["log2_lr"].to_numpy(), c["mean"].to_numpy(dtype=float)[None], maximize)
        i = int(o.grid_index[0])
        grid = (float(c["log2_lr"].iloc[i]), float(c["mean"].iloc[i])) if i >= 0 else (None, None)
        per_scale.append((_num(o.log2_lr[0]), _num(o.value[0]), *grid, str(o.kind[0])))
    sub_lr, sub_val, grid_lr, grid_val, kinds = (list(t) for t in zip(*per_scale))

    for s, k, g in zip(scales, kinds, grid_lr):
        if k == EDGE_LOW:
            warn.append(f"{axis} {s}: best LR is the lowest of the grid (log2 {g:g}); widen the grid down (lr.log2_min)")
        elif k == EDGE_HIGH:
            warn.append(f"{axis} {s}: best LR is the highest of the grid (log2 {g:g}); widen the grid up (lr.log2_max)")
        elif k == NONE:
            warn.append(f"{axis} {s}: every LR diverged; no optimum")
    if len(scales) < 2:
        warn.append(f"only one {axis} ({scales[0]}): no drift without a second scale")

    # Drift over the located optima; resampling gives its interval.
    used = [i for i, k in enumerate(kinds) if k in LOCATED]
    x = np.log2(np.array([scales[i] for i in used], dtype=float))
    ols = _ols(x, [sub_lr[i] for i in used])
    boot, method = _replicates(tables, seeds, maximize, rng, n_resamples)
    # A bootstrap over S values spreads sqrt((S-1)/S) too little (plug-in variance).
    inflate = math.sqrt(len(seeds) / (len(seeds) - 1)) if len(seeds) > 1 else 1.0
    ci_scale = [None] * len(scales)
    fit = None
    if boot is not None:
        q = ((1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2)
        for i, s in enumerate(scales):
            b = boot[s][np.isfinite(boot[s])]
            if kinds[i] in LOCATED and b.size:
                ci_scale[i] = [float(sub_lr[i] + inflate * (v - sub_lr[i])) for v in np.quantile(b, q)]
    if ols is not None:
        y = np.array([sub_lr[i] for i in used])
        if boot is not None:
            fit = _percentile_fit(x, np.stack([boot[scales[i]] for i in used], 1), *ols, method, inflate)
        # Few seeds (or one, whose curve noise is shared across LRs: same init, same
        # batches) can understate how far a new seed moves the optimum; the scatter of
        # the optima about the line measures that too. Keep the wider interval.
        resid = _residual_fit(x, y, *ols)
        if _width(resid) > _width(fit):
            fit = resid
        if fit is None:
            fit = Fit(*ols, None, None, x, np.full(len(x), np.nan), np.full(len(x), np.nan))
            warn.append("no interval: too few finite points to measure the noise; add seeds")
    on_edge = any(k in (EDGE_LOW, EDGE_HIGH) for k in kinds)  # the optimum may lie off the grid: no verdict
    word = "undetermined" if on_edge or fit is None else verdict(fit.ci)

    t_lr = grid_lr[0] if len(scales) > 1 else None
    t_loss, t_cost, t_se = transfer_cost(cv, tables, scales, grid_lr, grid_val, t_lr)
    warn += [f"{axis} {s} diverges at the transferred LR (log2 {t_lr:g})" for s, d in zip(scales, _diverged_at(cv, scales, t_lr)) if d]

    per = sub.groupby(axis)
    return Group(
        fixed=fixed,
        axis=axis,
        scales=scales,
        best_log2_lr=sub_lr,
        best_loss=grid_val,
        drift=None if ols is None else ols[0],
        curves=cv,
        metric=metric,
        grid_best_log2_lr=grid_lr,
        best_loss_subgrid=sub_val,
        best_log2_lr_ci=ci_scale,
        optimum=kinds,
        n_seeds=[int(per.get_group(s)["run_seed"].nunique()) for s in scales],
        n_runs=[int(len(per.get_group(s))) for s in scales],
        n_diverged=[int(per.get_group(s)["diverged"].sum()) for s in scales],
        drift_ci=None if fit is None or fit.ci is None else list(fit.ci),
        drift_scales=[scales[i] for i in used],
        interval_method=None if fit is None else fit.method,
        verdict=word,
        transfer_log2_lr=t_lr,
        transfer_loss=t_loss,
        transfer_cost=t_cost,
        transfer_cost_se=t_se,
        warnings=warn,
        fit=fit,
        runs=sub,
    )


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


def _diverged_at(cv: pd.DataFrame, scales: list, log2_lr: float | None) -> list[bool]:
    rows = cv[cv["log2_lr"] == log2_lr].set_index("scale")["n_diverged"]
    return [bool(rows.get(s, 0) > 0) for s in scales]


def summarize(root: str | Path, metric: str = "train_loss") -> dict:
    """The `lrtransfer summary --json` document."""
    return summary_doc(groups(load_runs(root), metric), metric)


def summary_doc(gs: list[Group], metric: str) -> dict:
    return {"metric": metric, "tolerance": TOLERANCE, "confidence": CONFIDENCE, "groups": [g.to_json() for g in gs]}


def _num(v) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


def telling_keys(fixeds: list[dict]) -> list[str]:
    """The keys whose values tell these groups apart, in order.

    An option's own key (`param.gain`) counts only where it tells apart groups of
    the same option (`param.name`): a study of param=mup and param=equalized is told
    apart by `param.name`, and `param.gain` matters only between equalized groups.
    """

    def owner(k: str) -> str | None:
        group, _, leaf = k.rpartition(".")
        return f"{group}.name" if group and leaf != "name" else None

    def telling(k: str) -> bool:
        peers: dict[str, set[str]] = {}
        for f in fixeds:
            if k in f:
                peers.setdefault(str(f.get(owner(k))) if owner(k) else "", set()).add(str(f[k]))
        differs = any(len(v) > 1 for v in peers.values())
        return differs or (owner(k) is None and len({str(f.get(k)) for f in fixeds}) > 1)

    return [k for k in dict.fromkeys(k for f in fixeds for k in f) if telling(k)]


def _plain(v):
    """JSON-ready: numpy scalars to Python, NaN to None, recursively."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v

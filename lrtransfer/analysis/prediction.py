"""Prediction: the optimal LR a group's fitted drift gives at a scale not measured, and what
using the smallest scale's best LR would cost there.

Reads analysed groups (`group.Group`), never records or the engine.

**The optimum.** The drift is the least-squares line through the measured optima y_i (sub-grid,
log2 LR) at x_i = log2 scale_i: a constant drift, a power law in the scale. The prediction uses that
line only while it cannot be tested. From five scales on it uses the parabola y_i = a + b x_i +
c x_i^2 + e_i, which holds the line as its case c = 0: measured optima bend (under SP the drift
steepens with width towards Adam's asymptotic -1 per doubling), and a straight line's interval
extrapolated past a bend covers far less than it says, while the parabola's stays at its level for
straight and bent truths alike (`tests/test_prediction.py` counts both; the price is a wider interval
when the truth is straight). Choosing the model by a test of c instead (the line unless c's interval
excludes 0) covers only 53-85% for the mild bends that the test misses with five scales
(`scripts/prediction_models.py`), so the choice is by the number of scales alone: four leave the parabola one degree of freedom, too few.

For either polynomial (p coefficients, the e_i independent with one variance sigma^2: a measured
optimum's seed noise plus its scale's own departure from the model) a new measurement at x0 is
y0 = f(x0) + e0 with e0 independent of the fit, so its error from the prediction is e0 minus the
fit's error at x0, of variance sigma^2 (1 + v0' (D'D)^-1 v0) (D the design, v0 its row at x0;
for the line 1 + 1/n + (x0 - xbar)^2 / Sxx); with s^2 (n - p degrees of freedom) for sigma^2,
(y0 - yhat0) / (s sqrt(...)) is Student's t with n - p df. That is the classical *prediction*
interval. The drift plot's band lacks the 1: it covers the line (where the mean of endless
re-measurements at x0 lies), not the optimum one more job measures.

The same model with the bootstrap the drift's interval uses (seeds resampled, or one seed's curve
noise): each resampled set of optima gives the fit's error at x0, and a new optimum's own error e0 is
drawn independently of it from the resampled optima's deviations at the measured scales (how far
measuring a scale again moves its optimum); the percentiles of their sum bound y0. As for the
drift, the wider of the two intervals is given: the bootstrap misses noise a seed shares across
its LRs, the scatter needs n - p >= 1 and the model's shape (`statistics.drift_fit`).
`tests/test_prediction.py` fabricates studies with a known truth and counts the coverage. The
straight line's own prediction is reported beside the model's, and `curvature` says whether the
optima bend (a warning).

**The penalty.** What a new scale gives up by training at the smallest scale's best grid LR t
instead of its own optimum. If the optimum moves linearly in log2 scale (the drift's model) and
the loss is quadratic in log2 LR near its optimum with a curvature that does not change with
scale, the penalty grows as k (x - x_1)^2. k is fitted by least squares through the origin to
the measured costs of the other scales (u_i = (x_i - x_1)^2); at u0 the prediction interval is
k u0 +- t_{m-1} s sqrt(1 + u0^2 / sum u_i^2) from the scatter of the m costs about the model
(m >= 2), else k's standard error propagated from the costs' standard errors over seeds (a
normal interval, with no term for the new point's own noise, which one cost cannot measure).
A penalty is never negative, so the interval is cut at 0. No penalty is predicted where a
measured scale already diverges at t: the model has nothing finite to extrapolate.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from lrtransfer.analysis.group import Group
from lrtransfer.analysis.statistics import CONFIDENCE, t_quantile
from lrtransfer.errors import UserError

BEYOND = 4.0  # a warning when the new scale exceeds this multiple of the largest measured
_Z = 1.959963984540054  # the normal's 97.5% quantile


@dataclass
class Prediction:
    """One group's prediction at scale `at` of its axis."""

    fixed: dict
    axis: str
    at: float
    scales: list  # the scales measured
    drift: float
    drift_ci: list[float] | None
    model: str  # "parabola" or "line": the optima's model in log2 scale (module docstring)
    log2_lr: float  # the optimum the model gives at `at`
    log2_lr_interval: list[float]  # 95% prediction interval for the optimum measured at `at`
    lr: float
    lr_interval: list[float]
    interval_method: str
    line_log2_lr: float  # the straight line's (a constant drift's) optimum at `at`
    line_interval: list[float]  # and its 95% prediction interval, which assumes the line is the truth
    transfer_log2_lr: float | None  # the smallest scale's best grid LR
    penalty: float | None  # loss given up at `at` by using it
    penalty_interval: list[float] | None
    penalty_method: str | None
    warnings: list[str] = field(default_factory=list)


SCALE_RANGE = (1e-30, 1e30)  # what predict takes as a scale: past it 2.0 ** log2(scale) x drift overflows
BEYOND_RANGE = f"beyond the sane range of a scale, {SCALE_RANGE[0]:g} to {SCALE_RANGE[1]:g}"


def check_scale(at: float, name: str = "the scale") -> None:
    """What any scale must be, asked before a record is read; how far a group's own scales reach is
    `check_reach`'s."""
    if not math.isfinite(at):
        raise UserError(f"{name} must be a finite positive number, got {at:g}")
    if not at > 0:
        raise UserError(f"{name} must be a positive number, got {at:g}")
    if not SCALE_RANGE[0] <= at <= SCALE_RANGE[1]:
        raise UserError(f"{name} {at:g} is {BEYOND_RANGE}")


def check_reach(g: Group, at: float, name: str = "the scale") -> None:
    """Refuse a scale further past the group's measured scales, in doublings, than they span
    (docs/prediction.md, "How far it reaches"): past that the answer is more the model's shape,
    which the study could test only within its range, than the study's measurements."""
    lo, hi = float(g.fit.x.min()), float(g.fit.x.max())  # log2 of the scales the model was fitted to
    span, x0 = hi - lo, math.log2(at)
    past = max(lo - x0, x0 - hi)
    if past > span + 1e-9:
        raise UserError(f"group {g.label}: {name} {at:g} is {_beyond(past, span)} doublings past the measured {g.axis} range "
                        f"{2**lo:g} .. {2**hi:g}, further than it spans ({span:.3g} doublings); valid: "
                        f"{2**(lo - span):g} .. {2**(hi + span):g} (measure a {'larger' if x0 > hi else 'smaller'} "
                        f"{g.axis} to reach further)")


def _beyond(past: float, span: float) -> str:
    """`past` to as many digits as show it more than `span` (3.0004 doublings past a span of 3, not 3)."""
    return next(f"{past:.{p}g}" for p in range(3, 18) if f"{past:.{p}g}" != f"{span:.{p}g}")


def predict_groups(groups: list[Group], at: float, axis: str | None = None, *, name: str = "the scale",
                   where: str = "the results") -> tuple[list[Prediction], list[str]]:
    """Predictions at `at` for the groups on `axis` (every group when None), and a message per group
    skipped for an undetermined verdict. Raises UserError (named `name`, e.g. "--width") for a bad
    scale, an axis no group has, or when no group can be predicted."""
    check_scale(at, name)
    axes = sorted({g.axis for g in groups})
    chosen = [g for g in groups if axis is None or g.axis == axis]
    if not chosen:
        raise UserError(f"no group under {where} has the axis {axis}; its axes: {', '.join(axes)} "
                        f"(--width N, --depth N, or --at N --axis KEY for any)")
    preds, refused = [], []
    for g in chosen:
        try:
            preds.append(predict(g, at, name=name))
        except UserError as e:
            if len(chosen) == 1:
                raise
            refused.append(str(e))
    if not preds:
        more = f" (and {len(refused) - 1} more group(s))" if len(refused) > 1 else ""
        raise UserError(f"no group under {where} can be predicted at {name} {at:g}: {refused[0]}{more}")
    return preds, [f"skipped {r}" for r in refused]


def predict(g: Group, at: float, *, rng: np.random.Generator | None = None, name: str = "the scale") -> Prediction:
    """The optimum and the transfer penalty of group `g` at scale `at` (raises UserError, naming the
    scale `name`, if `g` has no fit or `at` is out of its reach)."""
    check_scale(at, name)
    if g.verdict == "undetermined" or g.fit is None or g.fit.ci is None:
        why = g.warnings[0] if g.warnings else "no drift interval"
        raise UserError(f"group {g.label}: its verdict is undetermined ({why}); nothing to predict from")
    check_reach(g, at, name)
    rng = rng or np.random.default_rng(0)
    x0 = math.log2(at)
    degree = degree_for(len(g.fit.x))
    y0, lo, hi, method = optimum_interval(g.fit, x0, rng, degree)
    line = (y0, lo, hi) if degree == 1 else optimum_interval(g.fit, x0, rng, 1)[:3]
    warn = [w for w in g.warnings if w.startswith("incomplete:")]  # records skipped, jobs failed: left out here too
    top = max(g.scales)
    if at > BEYOND * top:
        warn.append(f"{g.axis} {at:g} is beyond {BEYOND:g}x the largest {g.axis} measured ({top:g}): "
                    f"{math.log2(at / top):.1f} doublings of extrapolation of a {MODELS[degree]} in log2 {g.axis}")
    bend = curvature(g.fit.x, g.fit.y, x0)
    if bend is not None:
        c, (clo, chi), q, (qlo, qhi) = bend
        if clo > 0 or chi < 0:
            said = ("the straight line's interval assumes it does not" if degree == 2 else
                    f"this interval assumes it does not; a parabola gives {q:+.2f} [{qlo:+.2f}, {qhi:+.2f}] "
                    f"(1 df: measure a fifth {g.axis})")
            warn.append(f"the optima bend: curvature {c:+.3f} [{clo:+.3f}, {chi:+.3f}] octaves per doubling^2, so the "
                        f"drift {'falls (turns more negative)' if c < 0 else 'rises (turns more positive)'} with {g.axis}; {said}")
    pen = penalty(g, x0)
    if isinstance(pen, str):
        warn.append(pen)
        pen = None
    return Prediction(
        fixed=g.fixed, axis=g.axis, at=at, scales=list(g.scales), drift=g.fit.slope,
        drift_ci=list(g.fit.ci), model=MODELS[degree], log2_lr=y0, log2_lr_interval=[lo, hi], lr=2.0**y0,
        lr_interval=[2.0**lo, 2.0**hi], interval_method=method, line_log2_lr=line[0], line_interval=[line[1], line[2]],
        transfer_log2_lr=g.transfer_log2_lr,
        penalty=None if pen is None else pen[0], penalty_interval=None if pen is None else [pen[1], pen[2]],
        penalty_method=None if pen is None else pen[3], warnings=warn,
    )


CURVED_FROM = 5  # scales from which the prediction's model is the parabola (module docstring)
MODELS = {1: "line", 2: "parabola"}


def degree_for(n: int) -> int:
    """The polynomial degree in log2 scale the prediction uses with `n` measured scales."""
    return 2 if n >= CURVED_FROM else 1


def optimum_interval(fit, x0: float, rng: np.random.Generator, degree: int = 1) -> tuple[float, float, float, str]:
    """The `degree` polynomial's value at `x0` and the wider of the two 95% prediction intervals
    (module docstring)."""
    name = MODELS[degree]
    y0 = float(_design(np.array([x0]), fit.x.mean(), degree)[0] @ _coefficients(fit.x, fit.y, degree))
    best = None
    scatter = residual_interval(fit.x, fit.y, x0, degree)
    if scatter is not None:
        best = (*scatter, f"least squares on the scatter of the optima about the {name} "
                          f"(t, {len(fit.x) - degree - 1} df)")
    boot = bootstrap_interval(fit.x, fit.y, fit.resampled, x0, rng, degree)
    if boot is not None and (best is None or boot[1] - boot[0] > best[1] - best[0]):
        best = (*boot, f"bootstrap: resampled {name} plus a resampled optimum's own deviation")
    if best is None:  # drift_fit gave an interval, so one of the two exists for the line
        raise UserError(f"no prediction interval for the {name}: too few scales and no resampled optima")
    return (y0, *best)


def _design(x: np.ndarray, centre: float, degree: int) -> np.ndarray:
    """(n, degree + 1) powers 0..degree of x - centre (centred, so the columns are far from collinear)."""
    return np.vander(x - centre, degree + 1, increasing=True)


def _coefficients(x: np.ndarray, y: np.ndarray, degree: int) -> np.ndarray:
    """Least-squares coefficients (degree + 1,) or, for y of shape (n, B), (degree + 1, B)."""
    return np.linalg.lstsq(_design(x, x.mean(), degree), y, rcond=None)[0]


def residual_interval(x: np.ndarray, y: np.ndarray, x0: float, degree: int = 1) -> tuple[float, float] | None:
    """Classical 95% prediction interval for a new y at `x0` under y = polynomial of `degree` + e
    (needs n > degree + 1)."""
    n, p = len(x), degree + 1
    if n <= p:
        return None
    design = _design(x, x.mean(), degree)  # (n, p)
    beta = _coefficients(x, y, degree)
    r = y - design @ beta
    s2 = float(r @ r) / (n - p)
    v = _design(np.array([x0]), x.mean(), degree)[0]  # (p,)
    leverage = float(v @ np.linalg.inv(design.T @ design) @ v)
    half = t_quantile((1 + CONFIDENCE) / 2, n - p) * math.sqrt(s2 * (1 + leverage))
    y0 = float(v @ beta)
    return y0 - half, y0 + half


def bootstrap_interval(x, y, resampled, x0: float, rng: np.random.Generator,
                       degree: int = 1) -> tuple[float, float] | None:
    """95% prediction interval at `x0` from resampled optima `resampled` (B, n): a resampled
    polynomial's value at x0 plus, independently, one resampled optimum's deviation."""
    if resampled is None or len(x) <= degree:
        return None
    ok = np.isfinite(resampled).all(1)
    if ok.sum() < 0.5 * len(resampled):
        return None
    r = resampled[ok]  # (B, n)
    v = _design(np.array([x0]), x.mean(), degree)[0]  # (p,)
    at_x0 = v @ _coefficients(x, r.T, degree)  # (B,) each resampled fit at x0
    b, n = r.shape
    own = (r - y)[rng.permutation(b), rng.integers(0, n, b)]  # (B,) a new optimum's deviation, drawn apart
    q = ((1 - CONFIDENCE) / 2, (1 + CONFIDENCE) / 2)
    lo, hi = np.quantile(at_x0 + own, q)
    return float(lo), float(hi)


def curvature(x: np.ndarray, y: np.ndarray, x0: float):
    """Do the optima bend? The parabola y = a + b x + c x^2 through them (n >= 4): c with its 95%
    interval (t, n - 3 df), and the parabola's value at `x0` with its prediction interval; None
    with fewer than four scales. Under a straight truth the interval excludes 0 in 5% of studies."""
    n = len(x)
    if n < 4:
        return None
    design = _design(x, x.mean(), 2)  # (n, 3)
    beta = _coefficients(x, y, 2)
    r = y - design @ beta
    s2 = float(r @ r) / (n - 3)
    half_c = t_quantile((1 + CONFIDENCE) / 2, n - 3) * math.sqrt(s2 * np.linalg.inv(design.T @ design)[2, 2])
    c = float(beta[2])
    q = float(_design(np.array([x0]), x.mean(), 2)[0] @ beta)
    return c, (c - half_c, c + half_c), q, residual_interval(x, y, x0, 2)


def penalty(g: Group, x0: float) -> tuple[float, float, float, str] | str | None:
    """(penalty, low, high, model) at log2 scale `x0`; a message where none can be given; None
    when the group has no transferred LR."""
    if g.transfer_log2_lr is None:
        return None
    x = np.log2(np.array(g.scales, dtype=float))
    for s, c in zip(g.scales, g.transfer_cost):
        if c is None:
            return (f"no penalty: {g.axis} {s:g} has no finite loss at the smallest {g.axis}'s best LR "
                    f"(log2 {g.transfer_log2_lr:g}); expect the same or worse beyond it")
    u = (x[1:] - x[0]) ** 2  # (m,)
    c = np.array(g.transfer_cost[1:], dtype=float)
    se = np.array([math.nan if v is None else v for v in g.transfer_cost_se[1:]], dtype=float)
    suu = float(u @ u)
    k = float(u @ c) / suu
    u0 = (x0 - x[0]) ** 2
    value = k * u0
    m = len(u)
    model = f"penalty = k (log2 {g.axis} - log2 {g.scales[0]:g})^2, k fitted to {m} measured cost(s)"
    if m >= 2:
        s2 = float(((c - k * u) ** 2).sum()) / (m - 1)
        half = t_quantile((1 + CONFIDENCE) / 2, m - 1) * math.sqrt(s2 * (1 + u0 * u0 / suu))
        how = f"; interval: scatter about the model (t, {m - 1} df)"
    else:
        half = math.nan
        how = ""
    if np.isfinite(se).all():  # k's standard error from the costs' own (seed) standard errors
        half_se = _Z * math.sqrt(float((u * u) @ (se * se))) / suu * u0
        if not half >= half_se:  # NaN (one cost) or narrower
            half, how = half_se, "; interval: the costs' standard errors over seeds, propagated (normal)"
    if not math.isfinite(half):
        return "no penalty interval: one measured cost without a standard error (add seeds or scales)"
    return value, max(0.0, value - half), value + half, model + how


def prediction_dict(p: Prediction) -> dict:
    from lrtransfer.analysis.records import plain

    return {k: plain(getattr(p, k)) for k in p.__dataclass_fields__}

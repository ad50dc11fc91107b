"""One group analysed: its optima, drift with interval, verdict and transfer cost, in a `Group`.

`analyse` composes the statistics in the order a reader checks them: where each
scale's optimum lies (and whether it is on the grid at all), how the located
optima move with scale, what transferring the smallest scale's LR costs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from lrtransfer.analysis.grouping import partition, scale_value
from lrtransfer.analysis.joint import Joint, best_values, joint_dict
from lrtransfer.analysis.joint import warnings_of as joint_warnings
from lrtransfer.analysis.records import Scan, maximizes, plain
from lrtransfer.analysis.resampling import replicates, seed_tables
from lrtransfer.analysis.statistics import (
    EDGE_HIGH,
    EDGE_LOW,
    FLAT,
    LOCATED,
    N_RESAMPLES,
    NONE,
    Fit,
    ScaleOptima,
    curves,
    diverged_at,
    drift_fit,
    inflation,
    replicate_fit,
    scale_intervals,
    scale_optima,
    subgrid_optima,
    transfer_cost,
    widen,
)
from lrtransfer.analysis.verdicts import FIRM_SCALES, FIRM_SEEDS, ruled, verdict


@dataclass
class Group:
    """One family of LR curves and everything `summary` says about it."""

    fixed: dict
    axis: str  # the config key the scales are values of: width, depth, train.steps, ...
    scales: list[int | float]
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
    drift_scales: list[int | float] = field(default_factory=list)
    interval_method: str | None = None
    # "tentative" where the interval's word is firm but the evidence is not (`verdicts.firm_evidence`)
    verdict: str = "undetermined"
    leans: str = "undetermined"  # the interval's own word (`verdicts.verdict`): the verdict, or where a tentative one leans
    transfer_log2_lr: float | None = None
    transfer_loss: list[float | None] = field(default_factory=list)
    transfer_cost: list[float | None] = field(default_factory=list)
    transfer_cost_se: list[float | None] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    copied_scales: list[list[int | float]] = field(default_factory=list)  # scales that trained the same (`copied_scales`)
    fit: Fit | None = field(default=None, repr=False)
    runs: pd.DataFrame | None = field(default=None, repr=False)
    joint: Joint | None = None  # a second inner axis (`grid.<key>`): each scale's best value; the LR fields are at it
    # Records of this group's study that were skipped (damaged, edited), and the runs they held:
    # the numbers above leave them out, so the verdict is of an incomplete study.
    skipped_records: int = 0
    skipped_runs: int = 0
    failed_jobs: int = 0  # jobs of its study whose record says they failed: left out, as skipped ones
    # Jobs left out as built from older versions of this group's data or model files (`versions`)
    superseded_jobs: list[str] = field(default_factory=list)

    @property
    def label(self) -> str:
        return "  ".join(f"{k}={v}" for k, v in self.fixed.items())


def groups(df: pd.DataFrame, metric: str = "train_loss", *, n_resamples: int = N_RESAMPLES, seed: int = 0,
           all_versions: bool = False) -> list[Group]:
    """Every group of `df`, analysed. Deterministic: resampling uses a fixed `seed`.

    A group with a second inner axis (`grid.<key>`) is analysed along the LR at each
    scale's best value, and its `joint` holds the value axis (`joint.best_values`). A group whose
    jobs were built from several versions of its inputs is its newest version's, with a warning
    that names the others' jobs (`versions`); `all_versions`: a group per version."""
    out = []
    for axis, fixed, sub, old in partition(df, all_versions):
        rng = np.random.default_rng(seed)
        if "grid_key" in sub and sub["grid_key"].notna().any():
            joint, at_best = best_values(sub, axis, metric)
            g = analyse(at_best, axis, fixed, metric, rng, n_resamples)
            g.joint = joint
            g.warnings = joint_warnings(joint, axis, g.scales) + g.warnings
        else:
            g = analyse(sub, axis, fixed, metric, rng, n_resamples)
        if old is not None:
            g.superseded_jobs = old.jobs
            g.warnings.insert(0, old.warning())
        out.append(g)
    return out


def scanned_groups(found: Scan, metric: str = "train_loss", all_versions: bool = False) -> list[Group]:
    """The groups of a scanned folder (`records.scan`), each told how many records of its study
    were skipped, with a warning that says so first: a verdict never reads as a whole study's
    when part of it could not be read."""
    out = groups(found.runs, metric, all_versions=all_versions) if not found.runs.empty else []  # searches alone: none
    for g in out:
        g.skipped_records, g.skipped_runs = found.skipped_in(str(g.fixed.get("study")))
        failed = [f for f in found.failed if f["study"] == str(g.fixed.get("study"))]
        g.failed_jobs = len(failed)
        if failed:
            g.warnings.insert(0, f"incomplete: {len(failed)} job(s) of this study failed ({failed[0]['error']}) and "
                                 "these numbers leave them out; `lrtransfer list` names them, and a re-run of the "
                                 "sweep retries them")
        if g.skipped_records:
            g.warnings.insert(0, f"incomplete: {g.skipped_records} record(s) of this study ({g.skipped_runs} runs) were "
                                 "skipped as unreadable or malformed, and these numbers leave them out; a re-run of the "
                                 "sweep recomputes them")
    return out


def analyse(sub: pd.DataFrame, axis: str, fixed: dict, metric: str, rng: np.random.Generator, n_resamples: int) -> Group:
    """Optima, drift with its interval, verdict and transfer cost of one group's runs."""
    maximize = maximizes(metric)
    cv = curves(sub, axis, metric)
    scales = sorted(scale_value(s) for s in cv["scale"].unique())
    seeds, tables = seed_tables(sub, axis, metric, scales)
    window = ADAPTIVE_WINDOW if adaptive_design(sub) else None
    opt = scale_optima(cv, scales, maximize, window)
    warn = grid_warnings(axis, scales, opt, metric) + mixed_design(sub)

    # Drift over the located optima; resampling gives its interval.
    located = [k in LOCATED for k in opt.kind]
    used = [i for i, ok in enumerate(located) if ok]
    x = np.log2(np.array([scales[i] for i in used], dtype=float))
    boot, method = replicates(tables, seeds, maximize, rng, n_resamples, window)
    inflate = inflation(len(seeds))
    resampled = None if boot is None or not used else np.stack([boot[scales[i]] for i in used], 1)  # (B, n)
    if window is not None:  # seeds per scale chosen by the data: weighted, its own interval
        counts, ss, df = seed_spread(tables, [scales[i] for i in used], maximize, window)
        fit = replicate_fit(x, np.array([opt.best[i] for i in used], dtype=float), counts, ss, df)
    else:
        fit = drift_fit(x, [opt.best[i] for i in used], resampled, method, inflate)
        if len(used) == 2 and fit is not None:  # no scatter about a line through two points: the seeds' own spread
            counts, ss, df = seed_spread(tables, [scales[i] for i in used], maximize, window)
            if df >= 1:
                widen(fit, replicate_fit(x, np.array([opt.best[i] for i in used], dtype=float), counts, ss, df,
                                         adaptive=False))
    if fit is not None and fit.ci is None:
        warn.append("no interval: too few finite points to measure the noise; add seeds")
    on_edge = any(k in (EDGE_LOW, EDGE_HIGH) for k in opt.kind)  # the optimum may lie off the grid: no verdict
    copies = copied_scales(tables, scales)
    warn += [f"{axis} {', '.join(f'{s:g}' for s in same)} gave the same {metric} at every LR they share, seed by seed: "
             f"the {axis} changed nothing in training (a script that ignores its {{{axis}}}?); no verdict" for same in copies]

    t_lr = transferred_lr(cv, scales, opt.grid_best[0], maximize) if len(scales) > 1 else None
    t_loss, t_cost, t_se = transfer_cost(cv, tables, scales, opt.grid_best, opt.grid_value, t_lr)
    warn += [f"{axis} {s} diverges at the transferred LR (log2 {t_lr:g})" for s, d in zip(scales, diverged_at(cv, scales, t_lr)) if d]

    per = sub.groupby(axis)
    n_seeds = [int(per.get_group(s)["run_seed"].nunique()) for s in scales]
    leans = "undetermined" if on_edge or copies or fit is None else verdict(fit.ci)
    ruling = ruled(leans, [n_seeds[i] for i in used])
    if fit is not None and fit.ci is not None and max(n_seeds) == 1:
        warn.append(one_seed_warning(axis, len(used), int(sub["run_seed"].iloc[0]), window is not None))
    elif fit is not None and fit.ci is not None and len(used) == 2 and window is None:
        warn.append(f"two {axis}s: the interval comes from the seeds alone (the wider of their bootstrap and a t interval "
                    "from the spread of each seed's own optimum), with no scatter of the optima about a line to check "
                    f"that the optimum moves in a straight line; a third {axis} adds that check")
    if ruling == "tentative":
        short = [f"{scales[i]}" for i in used if n_seeds[i] < FIRM_SEEDS]
        warn.append(f"tentative: the interval says {leans}, but a firm verdict needs {FIRM_SCALES} {axis}s, or "
                    f"{FIRM_SEEDS} seeds at each (docs/studies.md, 'How firm a verdict is'); {axis} "
                    f"{', '.join(short)} {'has' if len(short) == 1 else 'have'} one seed")
    return Group(
        fixed=fixed,
        axis=axis,
        scales=scales,
        best_log2_lr=opt.best,
        best_loss=opt.grid_value,
        drift=None if fit is None else fit.slope,
        curves=cv,
        metric=metric,
        grid_best_log2_lr=opt.grid_best,
        best_loss_subgrid=opt.value,
        best_log2_lr_ci=scale_intervals(scales, opt.best, located, boot, inflate),
        optimum=opt.kind,
        n_seeds=n_seeds,
        n_runs=[int(len(per.get_group(s))) for s in scales],
        n_diverged=[int(per.get_group(s)["diverged"].sum()) for s in scales],
        drift_ci=None if fit is None or fit.ci is None else list(fit.ci),
        drift_scales=[scales[i] for i in used],
        interval_method=None if fit is None else fit.method,
        verdict=ruling,
        leans=leans,
        transfer_log2_lr=t_lr,
        transfer_loss=t_loss,
        transfer_cost=t_cost,
        transfer_cost_se=t_se,
        warnings=warn,
        copied_scales=copies,
        fit=fit,
        runs=sub,
    )


def copied_scales(tables: dict, scales: list) -> list[list]:
    """Scales that trained the same thing: at every LR two scales share (three or more, with a loss),
    each seed's loss equal to the last digit recorded. A script that ignores its `{width}` trains
    one model at every width, whose optimum does not move: a drift of exactly 0, "transfers",
    measured on nothing. Each list is one set of such scales, in scale order."""
    sets: list[list] = []
    for b in scales:
        xb, Vb, _, Mb = tables[b]
        for same in sets:
            xa, Va, _, Ma = tables[same[0]]
            shared, ia, ib = np.intersect1d(xa, xb, return_indices=True)
            seeds = Ma[:, ia].any(1) & Mb[:, ib].any(1)  # the seeds both ran
            pa, pb = Va[seeds][:, ia], Vb[seeds][:, ib]  # (seeds, shared LRs): NaN where diverged or not run
            if (len(shared) >= 3 and np.isfinite(pa).sum() >= 3 and np.array_equal(Ma[seeds][:, ia], Mb[seeds][:, ib])
                    and np.array_equal(pa, pb, equal_nan=True)):
                same.append(b)
                break
        else:
            sets.append([b])
    return [same for same in sets if len(same) > 1]


# An adaptive sweep's estimators (`adaptive_design`): each optimum is the least-squares parabola
# through the LRs within an octave of the best one (the fixed grid's own parabola, where LRs
# are an octave apart), and the drift a weighted regression with replicates.
ADAPTIVE_WINDOW = 1.0


def adaptive_design(sub: pd.DataFrame) -> bool:
    """Runs of an adaptive sweep (`--until-decided`): their records say so (`adaptive.enabled`)."""
    return "adaptive.enabled" in sub and bool(sub["adaptive.enabled"].fillna(False).astype(bool).all())


def mixed_design(sub: pd.DataFrame) -> list[str]:
    """A warning where one group pools an adaptive sweep's records with a fixed grid's (both
    into one study folder): they are read together, by the fixed grid's estimators, so the
    numbers are neither sweep's own."""
    if "adaptive.enabled" not in sub:
        return []
    flags = sub["adaptive.enabled"].fillna(False).astype(bool)
    jobs = flags.groupby(sub["job_id"], sort=False).first() if "job_id" in sub else flags  # a table of runs: per run
    if jobs.all() or not jobs.any():
        return []
    return [f"mixed: {int(jobs.sum())} record(s) of an adaptive sweep (--until-decided) and {int((~jobs).sum())} of a "
            "fixed grid in one group, read together with the fixed grid's estimators (not the adaptive sweep's "
            "verdict); give each sweep its own name=... to keep them apart"]


def seed_spread(tables: dict, scales: list, maximize: bool, window: float) -> tuple[np.ndarray, float, int]:
    """Per scale the number of seeds, and pooled over scales the sum of squares of each seed's own
    optimum about its scale's mean of them, with its degrees of freedom (located optima only)."""
    counts, ss, df = [], 0.0, 0
    for s in scales:
        x, V, D, M = tables[s]
        rows = [k for k in range(len(V)) if M[k].any()]
        counts.append(len(rows))
        own = []
        for k in rows:
            o = subgrid_optima(x[M[k]], V[k][M[k]][None], maximize, window)
            if o.kind[0] in LOCATED:
                own.append(float(o.log2_lr[0]))
        if len(own) > 1:
            ss += float(np.sum((np.array(own) - np.mean(own)) ** 2))
            df += len(own) - 1
    return np.array(counts, dtype=float), ss, df


def transferred_lr(cv: pd.DataFrame, scales: list, best: float | None, maximize: bool) -> float | None:
    """The LR a practitioner who tuned the smallest scale would carry over: its best grid LR, or,
    where the other scales did not all measure that one (an adaptive sweep's refined LRs), its
    best among the LRs every scale measured. On a fixed grid the two are the same."""
    shared = set.intersection(*(set(cv.loc[cv["scale"] == s, "log2_lr"]) for s in scales))
    if best is None or best in shared:
        return best
    if not shared:
        return None
    first = cv[(cv["scale"] == scales[0]) & cv["log2_lr"].isin(shared)].dropna(subset=["mean"])
    if first.empty:
        return None
    pick = first["mean"].idxmax() if maximize else first["mean"].idxmin()
    return float(first.loc[pick, "log2_lr"])


def one_seed_warning(axis: str, located: int, seed: int, adaptive: bool) -> str:
    """What an interval from one seed per scale holds, and how to add seeds: a seed's optimum moves
    from seed to seed, and with one seed that spread is measured at best through the optima's
    scatter about the line, with no degree of freedom at two scales."""
    if located < 3:
        held = (f"the interval holds no seed-to-seed variation (with two {axis}s it measures only the noise "
                "along each LR curve)")
    else:
        held = (f"no seed-to-seed spread was measured: the interval sees it only through the scatter of the "
                f"{located} optima about the line ({located - 2} degree{'s' if located > 3 else ''} of freedom)")
    if adaptive:  # the sweep chose its seeds and stopped here
        return f"one seed per {axis}: {held}"
    return (f"one seed per {axis}: {held}; to measure it, re-run the sweep with seed={seed},{seed + 1},{seed + 2} "
            f"added (its seed-{seed} jobs are kept), or with --until-decided (seeds where the verdict needs them)")


def grid_warnings(axis: str, scales: list[int], opt: ScaleOptima, metric: str = "train_loss") -> list[str]:
    """What the grid does not show: an optimum on its edge, a scale where every LR diverged or none
    changed the loss, one scale only."""
    warn = []
    for s, k, g in zip(scales, opt.kind, opt.grid_best):
        if k == EDGE_LOW:
            warn.append(f"{axis} {s}: best LR is the lowest of the grid (log2 {g:g}); widen the grid down (lr.log2_min)")
        elif k == EDGE_HIGH:
            warn.append(f"{axis} {s}: best LR is the highest of the grid (log2 {g:g}); widen the grid up (lr.log2_max)")
        elif k == NONE:
            warn.append(f"{axis} {s}: every LR diverged; no optimum")
        elif k == FLAT:
            warn.append(f"{axis} {s}: {metric} is the same at every LR, to the last digit recorded: no LR is better "
                        "than another (a script that ignores its {lr}?); no optimum")
    if len(scales) < 2:
        warn.append(f"only one {axis} ({scales[0]}): no drift without a second scale")
    return warn


_NOT_JSON = ("curves", "fit", "runs")  # frames and the fitted band: for figures, not for the document


def group_dict(g: Group) -> dict:
    """A group's numbers as JSON-ready values, in the field order of `Group`; `joint` only
    for a group with a second inner axis (its LR fields are then at each scale's best value)."""
    out = {k: plain(getattr(g, k)) for k in g.__dataclass_fields__ if k not in (*_NOT_JSON, "joint")}
    if g.joint is not None:
        out["joint"] = joint_dict(g.joint)
    return out

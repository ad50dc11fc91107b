"""What an adaptive sweep trains next, decided from what it has measured so far.

A pure policy, no Hydra and no files: given one group's analysis (`analysis.Group`)
and what each of its scales has trained (`ScaleState`: its LR blocks and seeds), it
says which runs the next round adds (`Request`s) and why. The sweep (`adaptive.py`)
turns requests into jobs; the simulation (`scripts/adaptive_coverage.py`) into
fabricated runs, so the procedure whose coverage is measured is this one.

1. Round 1 trains every scale on a coarse grid (`adaptive.coarse_step` octaves apart
   across lr.log2_min .. lr.log2_max) with the first seed.
2. A scale whose optimum sits on the grid's edge (or whose every LR diverged) gets one
   more LR beyond that edge, a coarse step out, within `adaptive.extend` octaves of the
   configured range. A located optimum gets LRs halfway to its neighbours, on the side
   its parabola's vertex lies (both sides when the vertex is at the grid point), until
   the LRs around it are `lr.resolution` apart, or its interval is narrower than
   `lr.resolution` while they are at most `TRUSTED_SPACING` resolutions apart (the
   interval measures noise, not how far a parabola through distant LRs is from the
   curve; one octave, at the default resolution, is the spacing of a fixed grid).
3. Once no scale needs an LR, a group whose drift interval lies inside the transfer band
   (+-`TOLERANCE`) or outside it is decided, if the evidence holds a firm verdict
   (`analysis.verdicts.firm_evidence`: three scales, or two seeds at each); with two scales
   and one seed at either, that scale gets a second seed first. Otherwise the scales where a
   seed narrows the drift's interval most (`_seed_requests`: the extremes of the scale axis, as a rule)
   double their seeds. A new seed trains every LR its scale has; a new LR every seed, so
   each scale's runs stay a full seeds x LRs table. The drift's interval of an adaptive
   study is a weighted regression with replicates (`analysis.statistics.replicate_fit`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from lrtransfer.analysis.statistics import EDGE_HIGH, EDGE_LOW, FLAT, LOCATED, NONE
from lrtransfer.analysis.verdicts import FIRM_SEEDS, TOLERANCE, firm_evidence

EPS = 1e-9  # octaves: two LRs closer than this are the same LR
TRUSTED_SPACING = 4  # resolutions: how far apart LRs may be for a narrow interval to end refining
MAX_ABS_LOG2_LR = 100  # config.validate's bound on any job's grid


@dataclass(frozen=True)
class Block:
    """One job's LR grid: log2_min, log2_min + step, ..., log2_max (a single LR when min == max)."""

    log2_min: float
    log2_max: float
    step: float

    def values(self) -> list[float]:
        n = int(math.floor((self.log2_max - self.log2_min) / self.step + EPS)) + 1
        return [self.log2_min + i * self.step for i in range(n)]


@dataclass
class ScaleState:
    """What one scale has trained: every LR of `blocks` with every seed of `seeds`."""

    blocks: list[Block]
    seeds: list[int]
    stuck: str | None = None  # why its optimum cannot be located on any grid allowed

    def points(self) -> list[float]:
        return sorted({round(v, 9) for b in self.blocks for v in b.values()})


@dataclass(frozen=True)
class Request:
    """Train `block`'s LRs at `scale` with `seed`: one job."""

    scale: float
    block: Block
    seed: int
    why: str  # coarse | extend | refine | seed


@dataclass(frozen=True)
class Settings:
    """The sweep's keys the policy reads (`adaptive.*`, `lr.*`)."""

    log2_min: float
    log2_max: float
    coarse_step: float
    resolution: float
    max_seeds: int
    extend: float
    tolerance: float = TOLERANCE


@dataclass
class Step:
    """The policy's answer for one group: the next round's requests and the lines that explain them."""

    requests: list[Request] = field(default_factory=list)
    state: str = "refining"  # refining | seeding | decided | stuck | out of seeds | seeds copied
    notes: list[str] = field(default_factory=list)


def coarse_block(s: Settings) -> Block:
    """Round 1's grid: coarse steps from lr.log2_min, the last at or below lr.log2_max."""
    n = int(math.floor((s.log2_max - s.log2_min) / s.coarse_step + EPS))
    return Block(s.log2_min, s.log2_min + n * s.coarse_step, s.coarse_step)


def first_round(scales: list[float], seed: int, s: Settings) -> dict[float, ScaleState]:
    return {v: ScaleState([coarse_block(s)], [seed]) for v in scales}


def requests_of(scale: float, state: ScaleState, blocks: list[Block], why: str) -> list[Request]:
    return [Request(scale, b, seed, why) for b in blocks for seed in state.seeds]


def decided(ci, tolerance: float = TOLERANCE) -> bool:
    """An interval inside the transfer band, or wholly outside it, decides the verdict."""
    if ci is None:
        return False
    lo, hi = ci
    return (-tolerance <= lo and hi <= tolerance) or lo > tolerance or hi < -tolerance


COPIED = "its seeds gave the same losses at every LR (a script that ignores its {seed}?)"


def seed_copies(group, states: dict[float, ScaleState]) -> list[float]:
    """The scales that trained more seeds than the analysis counts: seeds whose losses are equal at
    every LR count as one (`analysis.grouping`), so a seed more of them measures nothing."""
    return [sc for sc, n in zip(group.scales, group.n_seeds) if len(states[sc].seeds) > n]


def next_step(group, states: dict[float, ScaleState], s: Settings) -> Step:
    """The next round for one group, from its analysis `group` (`analysis.Group`) and `states`."""
    step = Step()
    for same in group.copied_scales:  # scales that train one model: no LR or seed more measures a drift
        for scale in same[1:]:
            states[scale].stuck = f"it trained what {group.axis} {same[0]:g} did (a script that ignores its {{{group.axis}}}?)"
    if group.copied_scales:
        step.state = "stuck"
        step.notes += [f"{group.axis} {', '.join(f'{sc:g}' for sc in same)}: the same losses at every LR, seed by seed"
                       for same in group.copied_scales]
        return step
    for i, scale in enumerate(group.scales):
        state = states[scale]
        blocks, note = _lr_blocks(group, i, state, s)
        if note:
            step.notes.append(f"{group.axis} {scale:g}: {note}")
        step.requests += requests_of(scale, state, blocks, "extend" if note and blocks else "refine")
    if step.requests:
        return step
    stuck = [sc for sc in group.scales if states[sc].stuck]
    located = [sc for sc in group.scales if sc in group.drift_scales]
    counted = dict(zip(group.scales, group.n_seeds))  # the seeds the analysis counts (`seed_copies`)
    copies = seed_copies(group, states)
    if decided(group.drift_ci, s.tolerance) and firm_evidence([counted[sc] for sc in located]):
        step.state = "decided"
    elif decided(group.drift_ci, s.tolerance) and not stuck:  # a tentative verdict: the seeds a firm one needs
        want = min(FIRM_SEEDS, s.max_seeds)
        step.requests = [Request(sc, b, max(states[sc].seeds) + 1 + k, "seed") for sc in located
                         for k in range(want - len(states[sc].seeds)) for b in states[sc].blocks]
        step.state = "seeding" if step.requests else "out of seeds"
        if not step.requests:
            step.notes.append(f"a firm verdict with two {group.axis}s needs {FIRM_SEEDS} seeds at each; "
                              f"adaptive.max_seeds={s.max_seeds}")
    elif stuck or len(located) < 2:
        step.state = "stuck"
        if not stuck:
            step.notes.append("fewer than two located optima: no drift to measure")
    elif group.drift_ci is None:  # a line through too few points to measure its spread: a seed everywhere
        step.requests = [Request(sc, b, max(states[sc].seeds) + 1, "seed") for sc in located
                         if len(states[sc].seeds) < s.max_seeds for b in states[sc].blocks]
        step.state = "seeding" if step.requests else "out of seeds"
    else:
        step.requests = _seed_requests(group, states, s)
        step.state = "seeding" if step.requests else "out of seeds"
        if not step.requests:
            step.notes.append(f"every scale that widens the interval has adaptive.max_seeds={s.max_seeds} seeds")
    if step.state == "seeding" and copies:  # a seed more of a run that ignores its seed measures nothing
        step.requests = [rq for rq in step.requests if rq.scale not in copies]
        if not step.requests:
            step.state = "seeds copied"
            step.notes.append(f"{group.axis} {', '.join(f'{sc:g}' for sc in copies)}: {COPIED}, so more seeds would "
                              "measure nothing")
    return step


def _lr_blocks(group, i: int, state: ScaleState, s: Settings) -> tuple[list[Block], str | None]:
    """The LRs scale i adds, and a line when it extends the grid or cannot."""
    if state.stuck:
        return [], None
    kind, points = group.optimum[i], state.points()
    if kind == FLAT:  # no LR, here or further out, shows an optimum to a run that ignores its LR
        state.stuck = "its loss is the same at every LR (a script that ignores its {lr}?)"
        return [], state.stuck
    if kind in (EDGE_LOW, EDGE_HIGH, NONE):
        down = kind != EDGE_HIGH  # all diverged: the optimum lies below every LR tried
        x = points[0] - s.coarse_step if down else points[-1] + s.coarse_step
        limit = s.log2_min - s.extend if down else s.log2_max + s.extend
        where = {EDGE_LOW: "the low edge", EDGE_HIGH: "the high edge", NONE: "below every LR tried (all diverged)"}[kind]
        if (x < limit - EPS if down else x > limit + EPS) or abs(x) > MAX_ABS_LOG2_LR:
            state.stuck = (f"its optimum is at {where} and the grid may not extend past log2 {limit:g} "
                           f"(adaptive.extend={s.extend:g} octaves beyond lr.log2_{'min' if down else 'max'})")
            return [], state.stuck
        return [Block(x, x, s.coarse_step)], f"the optimum is at {where} of the grid: it extends to log2 {x:g}"
    if kind not in LOCATED:
        return [], None
    x0 = group.grid_best_log2_lr[i]
    left = max((p for p in points if p < x0 - EPS), default=None)
    right = min((p for p in points if p > x0 + EPS), default=None)
    hl = None if left is None else x0 - left
    hr = None if right is None else right - x0
    bracket = max(h for h in (hl, hr) if h is not None)
    ci = group.best_log2_lr_ci[i]
    narrow = ci is not None and ci[1] - ci[0] < s.resolution and bracket <= TRUSTED_SPACING * s.resolution + EPS
    if bracket <= s.resolution + EPS or narrow:
        return [], None
    vertex = group.best_log2_lr[i] if group.best_log2_lr[i] is not None else x0
    near = 0.25 * min(h for h in (hl, hr) if h is not None)
    add = []
    if hl is not None and hl > s.resolution + EPS and vertex < x0 + near:
        add.append((x0 - hl / 2, hl / 2))
    if hr is not None and hr > s.resolution + EPS and vertex > x0 - near:
        add.append((x0 + hr / 2, hr / 2))
    if len(add) == 2 and abs(add[0][1] - add[1][1]) < EPS:  # symmetric: one job of two LRs
        return [Block(add[0][0], add[1][0], 2 * add[0][1])], None
    return [Block(x, x, h) for x, h in add], None


def spread(xs: dict[float, float], seeds: dict[float, int]) -> float:
    """sum_i n_i (x_i - weighted mean x)^2: the drift's weighted least squares has variance s^2 over it
    (`analysis.statistics.replicate_fit`), so it is what a seed buys."""
    total = sum(seeds.values())
    mean = sum(seeds[sc] * x for sc, x in xs.items()) / total
    return sum(seeds[sc] * (x - mean) ** 2 for sc, x in xs.items())


def _located(group) -> dict[float, float]:
    """log2 of each scale whose optimum the drift is fitted to."""
    return {sc: math.log2(sc) for sc in group.scales if sc in group.drift_scales}


def _seed_requests(group, states: dict[float, ScaleState], s: Settings) -> list[Request]:
    """Seeds for the scales where one more shrinks the drift's variance at least as much as the
    average scale's would (the extremes of the scale axis, as a rule): each such scale doubles its
    seeds (up to adaptive.max_seeds), so a verdict needs few rounds, and few looks at the data."""
    xs = _located(group)
    seeds = {sc: len(states[sc].seeds) for sc in xs}
    base = spread(xs, seeds)
    gain = {sc: spread(xs, {**seeds, sc: seeds[sc] + 1}) - base for sc in xs if seeds[sc] < s.max_seeds}
    if not gain:
        return []
    mean = sum(gain.values()) / len(gain)
    out = []
    for sc in sorted((sc for sc, g in gain.items() if g >= mean - EPS), key=lambda sc: -gain[sc]):
        state = states[sc]
        top = max(state.seeds)
        for seed in range(top + 1, top + 1 + min(len(state.seeds), s.max_seeds - len(state.seeds))):
            out += [Request(sc, b, seed, "seed") for b in state.blocks]
    return out


def units(requests: list[Request]) -> list[list[Request]]:
    """Requests in the pieces a budget may cut between: a new seed of a scale with all its LRs, or
    a new LR block of a scale with all its seeds (each scale's runs stay a full seeds x LRs table)."""
    out: dict[tuple, list] = {}
    for rq in requests:
        key = (rq.scale, "seed", rq.seed) if rq.why == "seed" else (rq.scale, "lr", rq.block)
        out.setdefault(key, []).append(rq)
    return list(out.values())


def trim(requests: list[Request], cost, left: float | None) -> list[Request]:
    """The requests, in their order of priority, whole units at a time, while `cost(unit)` fits in
    `left` (None: no limit)."""
    if left is None:
        return list(requests)
    kept = []
    for unit in units(requests):
        c = cost(unit)
        if c <= left:
            kept += unit
            left -= c
    return kept


def apply(states: dict[float, ScaleState], requests: list[Request]) -> None:
    """Record what a round trains in each scale's state."""
    for r in requests:
        state = states[r.scale]
        if r.block not in state.blocks:
            state.blocks.append(r.block)
        if r.seed not in state.seeds:
            state.seeds.append(r.seed)


def predicted_half_width(group, seeds: dict[float, int], extra: dict[float, int]) -> float:
    """The drift interval's half-width if each scale had extra[sc] more seeds, its noise as now: the
    weighted spread grows (`spread`) and the t quantile falls with the degrees of freedom added."""
    xs = _located(group)
    half = (group.drift_ci[1] - group.drift_ci[0]) / 2
    more = {sc: seeds[sc] + extra.get(sc, 0) for sc in xs}
    df_now, df_then = sum(seeds[sc] for sc in xs) - 2, sum(more.values()) - 2
    return half * math.sqrt(spread(xs, seeds) / spread(xs, more)) * _t(df_then) / _t(df_now)


def _t(df: int) -> float:
    """Student t's two-sided 95% quantile: exact to 30 degrees of freedom, beyond them the
    Cornish-Fisher expansion about the normal's (within 1e-4 there, and quick for the thousands
    of what-ifs `cheapest_decision` asks)."""
    from lrtransfer.analysis.statistics import CONFIDENCE, t_quantile

    if df <= 30:
        return t_quantile((1 + CONFIDENCE) / 2, df)
    z = 1.959963984540054
    return z + (z**3 + z) / (4 * df) + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)


MAX_EXTRA_SEEDS = 10_000  # how far `cheapest_decision` looks


def cheapest_decision(group, states: dict[float, ScaleState], runs_per_seed: dict[float, int], s: Settings,
                      max_extra: int = MAX_EXTRA_SEEDS) -> dict[float, int] | None:
    """The fewest run-steps' worth of extra seeds that would decide the verdict if the drift and its
    noise stayed as they are: seeds added one at a time where they shrink the interval most per run,
    until the predicted interval lies inside the band or outside it. None when no number of seeds
    would (the drift sits on the band's edge) or there is no interval."""
    if group.drift_ci is None or group.drift is None or len(_located(group)) < 2:
        return None
    seeds = {sc: len(states[sc].seeds) for sc in _located(group)}
    if sum(seeds.values()) - 2 < 1:
        return None
    extra: dict[float, int] = {}
    while sum(extra.values()) < max_extra:
        hw = predicted_half_width(group, seeds, extra)
        if decided((group.drift - hw, group.drift + hw), s.tolerance):
            return extra
        gain = {sc: (hw - predicted_half_width(group, seeds, {**extra, sc: extra.get(sc, 0) + 1})) / runs_per_seed[sc]
                for sc in seeds}
        best = max(gain, key=gain.get)
        if gain[best] <= 0:
            return None
        extra[best] = extra.get(best, 0) + 1
    return None

"""What a search at the base scale trains next (`lrtransfer tune`): the policy, pure.

The space is a box: one dimension per searched key (the global LR among them), each a range
[lo, hi] of its *coordinate*: the value itself, or 1 - beta for Adam's betas (the window's
inverse, which is what moves on a log scale). A dimension whose coordinate range is positive at
both ends is searched log-uniformly, any other uniformly. Points live in the unit cube; `Space`
maps them to values and back.

Two policies, each round a batch of points trained as one ensemble:
- `random`: every round uniform over the box;
- `trust_region`: round 1 uniform; then uniform in a box of half-side `radius` (unit
  coordinates) around the incumbent, the best point so far, clipped to the space; a round that
  finds no better point halves the box (x `shrink`), one that does keeps it. The landscape of
  per-module hyperparameters is jagged (Mlodozeniec et al. 2025 search it so): a local box
  spends the later rounds where the good points are.

Everything here is a function of its inputs and of a seeded generator per round, so a re-run
replays the same rounds from the same losses (`sweeps/tuning.py`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import numpy as np

POLICIES = ("random", "trust_region")
LR = "lr"  # the global LR's key in a search (its values are learning rates, not log2)
BETAS = ("beta1", "beta2")


def is_beta(key: str) -> bool:
    """A key whose coordinate is 1 - value (Adam's betas: optim.beta1, hp.hidden.beta2)."""
    return key.rpartition(".")[2] in BETAS


def coordinate(key: str, value: float) -> float:
    return 1.0 - value if is_beta(key) else value


def from_coordinate(key: str, c: float) -> float:
    return 1.0 - c if is_beta(key) else c


@dataclass(frozen=True)
class Dim:
    key: str
    lo: float  # the range of the key's values, as given
    hi: float

    @property
    def span(self) -> tuple[float, float]:
        """The range of the coordinate, low to high."""
        a, b = coordinate(self.key, self.lo), coordinate(self.key, self.hi)
        return (a, b) if a <= b else (b, a)

    @property
    def log(self) -> bool:
        return self.span[0] > 0

    def value(self, u: float) -> float:
        """The key's value at unit coordinate u in [0, 1]."""
        a, b = self.span
        c = math.exp(math.log(a) + u * (math.log(b) - math.log(a))) if self.log else a + u * (b - a)
        return from_coordinate(self.key, c)

    def unit(self, value: float) -> float:
        a, b = self.span
        c = coordinate(self.key, value)
        return (math.log(c / a) / math.log(b / a)) if self.log else (c - a) / (b - a)


@dataclass(frozen=True)
class Space:
    dims: tuple[Dim, ...]

    @property
    def keys(self) -> list[str]:
        return [d.key for d in self.dims]

    def values(self, u: np.ndarray) -> list[list[float]]:
        """(n, d) unit points -> n rows of values, each rounded to 6 significant digits (what a
        record and a job's overrides then say exactly)."""
        return [[_round(d.value(float(x))) for d, x in zip(self.dims, row)] for row in np.atleast_2d(u)]

    def units(self, rows) -> np.ndarray:
        return np.array([[d.unit(v) for d, v in zip(self.dims, row)] for row in rows], dtype=float).reshape(-1, len(self.dims))


def _round(v: float) -> float:
    return float(f"{v:.6g}")


@dataclass(frozen=True)
class State:
    """The search after some rounds: the incumbent (unit coordinates) and its loss, the trust
    region's half-side, and how many rounds ran."""

    incumbent: tuple[float, ...] | None = None
    best: float = math.inf
    radius: float = 0.5
    rounds: int = 0
    history: tuple[float, ...] = field(default=())  # the best loss after each round


def propose(space: Space, policy: str, state: State, n: int, seed: int) -> np.ndarray:
    """Round `state.rounds + 1`'s n points, (n, d) in the unit cube: uniform in the box, or (trust
    region, once there is an incumbent) uniform in the box of half-side `state.radius` around it.
    Seeded by (seed, round), so a re-run proposes the same points."""
    if policy not in POLICIES:
        raise ValueError(f"unknown policy {policy!r}")
    rng = np.random.default_rng([seed, state.rounds + 1])
    d = len(space.dims)
    if policy == "random" or state.incumbent is None:
        return rng.random((n, d))
    centre = np.array(state.incumbent)
    lo, hi = np.clip(centre - state.radius, 0, 1), np.clip(centre + state.radius, 0, 1)
    return lo + rng.random((n, d)) * (hi - lo)


def update(state: State, points: np.ndarray, losses, shrink: float = 0.5, min_radius: float = 1 / 64) -> State:
    """The state after a round of `points` ((n, d) unit) with their `losses` (NaN or inf: diverged,
    never the incumbent): a better point becomes the incumbent; a round without one shrinks the
    region (never below `min_radius`)."""
    losses = np.asarray(losses, dtype=float)
    finite = np.isfinite(losses)
    better = finite.any() and float(np.min(losses[finite])) < state.best
    if better:
        i = int(np.nanargmin(np.where(finite, losses, np.nan)))
        incumbent, best, radius = tuple(float(x) for x in points[i]), float(losses[i]), state.radius
    else:
        incumbent, best = state.incumbent, state.best
        radius = max(min_radius, state.radius * shrink) if state.incumbent is not None else state.radius
    return replace(state, incumbent=incumbent, best=best, radius=radius, rounds=state.rounds + 1,
                   history=(*state.history, best))

"""The search's policy (`sweeps/search.py`), pure: the box, log-uniform where both ends are positive,
1 - beta for the betas, reproducible rounds, and the trust region on a synthetic objective."""

from __future__ import annotations

import math

import numpy as np
import pytest

from lrtransfer.sweeps import search
from lrtransfer.sweeps.search import Dim, Space, State


def test_a_range_positive_at_both_ends_is_searched_log_uniformly():
    d = Dim("hp.hidden.lr_mult", 0.25, 4.0)
    assert d.log and d.value(0.0) == pytest.approx(0.25) and d.value(1.0) == pytest.approx(4.0)
    assert d.value(0.5) == pytest.approx(1.0)  # the geometric middle
    linear = Dim("optim.weight_decay", 0.0, 0.1)
    assert not linear.log and linear.value(0.5) == pytest.approx(0.05)
    for dim in (d, linear):
        for u in (0.0, 0.3, 1.0):
            assert dim.unit(dim.value(u)) == pytest.approx(u)


def test_a_beta_moves_on_one_minus_beta():
    d = Dim("hp.hidden.beta2", 0.9, 0.999)
    assert d.log  # 1 - beta in [0.001, 0.1]
    assert d.value(0.5) == pytest.approx(1 - math.sqrt(0.1 * 0.001))
    assert sorted([d.value(0.0), d.value(1.0)]) == pytest.approx([0.9, 0.999])


def test_rounds_are_reproducible_and_the_trust_region_stays_around_the_incumbent():
    space = Space((Dim("lr", 1e-4, 1e-2), Dim("hp.hidden.lr_mult", 0.25, 4.0)))
    a = search.propose(space, "trust_region", State(), 16, seed=3)
    assert np.array_equal(a, search.propose(space, "trust_region", State(), 16, seed=3))
    assert not np.array_equal(a, search.propose(space, "trust_region", State(), 16, seed=4))
    state = State(incumbent=(0.9, 0.2), best=1.0, radius=0.125, rounds=1)
    b = search.propose(space, "trust_region", state, 200, seed=3)
    assert (b[:, 0] >= 0.775).all() and (b[:, 0] <= 1.0).all() and (b[:, 1] >= 0.075).all() and (b[:, 1] <= 0.325).all()
    assert b[:, 0].max() > 0.95  # it reaches the clipped edge
    wide = search.propose(space, "random", state, 200, seed=3)
    assert wide[:, 0].min() < 0.2  # random ignores the incumbent


def test_a_round_without_a_better_point_shrinks_the_region_and_a_diverged_run_is_never_the_best():
    pts = np.array([[0.1, 0.1], [0.5, 0.5], [0.9, 0.9]])
    s = search.update(State(), pts, [math.inf, 2.0, math.nan])
    assert s.incumbent == (0.5, 0.5) and s.best == 2.0 and s.radius == 0.5 and s.rounds == 1
    s2 = search.update(s, pts, [3.0, math.inf, 2.5])
    assert s2.incumbent == (0.5, 0.5) and s2.radius == 0.25 and s2.history == (2.0, 2.0)
    s3 = search.update(s2, pts, [1.0, 3.0, 3.0])
    assert s3.incumbent == (0.1, 0.1) and s3.best == 1.0 and s3.radius == 0.25
    assert search.update(State(), pts, [math.inf] * 3).incumbent is None


def bowl(u: np.ndarray, rng: np.random.Generator, optimum=(0.71, 0.23, 0.58, 0.4), noise=0.002) -> np.ndarray:
    """A narrow valley with a jagged floor: loss 1 + 4 |u - optimum|^2 + a ripple, plus noise."""
    d = u - np.array(optimum)
    ripple = 0.02 * np.sin(25 * u).sum(1)
    return 1 + 4 * (d**2).sum(1) + ripple + noise * rng.standard_normal(len(u))


def best_after(policy: str, seed: int, rounds: int = 8, n: int = 16) -> float:
    space = Space(tuple(Dim(f"k{i}", 0.0, 1.0) for i in range(4)))
    state, rng = State(), np.random.default_rng(seed + 100)
    for _ in range(rounds):
        u = search.propose(space, policy, state, n, seed)
        state = search.update(state, u, bowl(u, rng))
    return state.best


def test_the_trust_region_beats_random_search_of_the_same_budget_on_a_synthetic_objective():
    """8 rounds of 16 points in 4 dimensions, 20 seeds: the trust region ends lower on average and in
    most seeds (measured: its mean best is closer to the floor by a wide margin)."""
    tr = np.array([best_after("trust_region", s) for s in range(20)])
    rs = np.array([best_after("random", s) for s in range(20)])
    assert tr.mean() < rs.mean() - 0.02
    assert (tr < rs).mean() >= 0.75

"""The adaptive sweep's policy (`sweeps/rounds.py`) on fabricated curves whose optima are known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from lrtransfer import analysis
from lrtransfer.sweeps import rounds

SETTINGS = rounds.Settings(log2_min=-14, log2_max=-4, coarse_step=2.0, resolution=0.25, max_seeds=4, extend=4.0)


def curve(x, optimum, seed=0, noise=0.0):
    """A basin in log2 LR, steeper above the optimum (as real curves are), a little noise per seed."""
    rng = np.random.default_rng(int(1000 * (optimum + 50)) + seed)
    u = np.asarray(x, dtype=float) - optimum
    return 1.0 + 0.03 * u**2 + 0.01 * np.maximum(u, 0) ** 3 + rng.normal(0, noise, u.shape)


def run(optima: dict, settings=SETTINGS, noise=0.0, max_rounds=40):
    """The policy driven to its end on `optima` ({width: log2 LR}): (final group, states, rounds, last step)."""
    states = rounds.first_round(list(optima), 0, settings)
    requests = [rq for w in optima for rq in rounds.requests_of(w, states[w], states[w].blocks, "coarse")]
    rows, n = [], 0
    while requests and n < max_rounds:
        n += 1
        for rq in requests:
            x = np.array(rq.block.values())
            y = curve(x, optima[rq.scale], rq.seed, noise)
            rows += [{"width": rq.scale, "run_seed": rq.seed, "log2_lr": a, "train_loss": b, "diverged": False,
                      "adaptive.enabled": True} for a, b in zip(x, y)]
        rounds.apply(states, requests)
        g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), 300)
        step = rounds.next_step(g, states, settings)
        requests = step.requests
    return g, states, n, step


def test_round_one_is_a_coarse_grid_across_the_configured_range():
    assert rounds.coarse_block(SETTINGS).values() == [-14, -12, -10, -8, -6, -4]
    odd = rounds.Settings(log2_min=-13, log2_max=-4, coarse_step=2.0, resolution=0.25, max_seeds=4, extend=4.0)
    assert rounds.coarse_block(odd).values() == [-13, -11, -9, -7, -5]  # the last at or below log2_max


def test_refining_finds_each_optimum_to_the_resolution_on_the_side_of_the_vertex():
    optima = {64: -8.3, 128: -8.9, 256: -9.6}
    g, states, n, step = run(optima)
    for i, w in enumerate(g.scales):
        assert abs(g.best_log2_lr[i] - optima[w]) < 0.1, (w, g.best_log2_lr[i])
        points = states[w].points()
        x0 = g.grid_best_log2_lr[i]
        # a neighbour at the resolution, or (no noise: a narrow interval) at most TRUSTED_SPACING of them away
        near = [p for p in points if 0 < abs(p - x0) <= rounds.TRUSTED_SPACING * 0.25 + 1e-9]
        assert near, (w, points)
        # one-sided halving: far fewer LRs than a 0.25-octave grid over the range (41)
        assert len(points) <= 6 + 5, points
    assert step.state == "decided" and g.verdict == "drifts down"


def test_an_optimum_on_the_grids_edge_extends_it_with_a_line_and_stops_at_the_limit():
    states = rounds.first_round([64, 128], 0, SETTINGS)
    rows = [{"width": w, "run_seed": 0, "log2_lr": x, "train_loss": float(curve([x], o)[0]), "diverged": False}
            for w, o in ((64, -15.2), (128, -15.6)) for x in rounds.coarse_block(SETTINGS).values()]
    g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), 100)
    step = rounds.next_step(g, states, SETTINGS)
    assert [r.block.values() for r in step.requests] == [[-16.0], [-16.0]]
    assert step.notes == ["width 64: the optimum is at the low edge of the grid: it extends to log2 -16",
                          "width 128: the optimum is at the low edge of the grid: it extends to log2 -16"]
    g, states, n, step = run({64: -15.2, 128: -15.6})  # below lr.log2_min = -14: found all the same
    assert all(k == analysis.INTERIOR for k in g.optimum) and abs(g.best_log2_lr[0] + 15.2) < 0.1
    g, states, _, step = run({64: -25.0, 128: -25.5})  # beyond the 4 octaves the grid may grow
    assert states[64].stuck and "may not extend past log2 -18" in states[64].stuck
    assert step.state == "stuck" and min(states[64].points()) == -18


def test_seeds_go_where_they_narrow_the_drift_most_and_double():
    from types import SimpleNamespace

    scales = [64, 128, 256, 512, 1024]
    states = {w: rounds.ScaleState([rounds.Block(-10, -6, 2), rounds.Block(-9, -9, 1)], [0]) for w in scales}
    g = SimpleNamespace(scales=scales, drift_scales=scales, drift=-0.5, drift_ci=(-0.9, -0.1), axis="width")
    asked = rounds._seed_requests(g, states, SETTINGS)
    # the weighted spread sum n_i (x_i - mean)^2 grows most at the extremes of the axis
    assert {r.scale for r in asked} == {64, 1024} and {r.seed for r in asked} == {1}
    assert len(asked) == 2 * 2  # each new seed trains every LR block its scale has
    rounds.apply(states, asked)
    again = rounds._seed_requests(g, states, SETTINGS)
    assert {r.seed for r in again if r.scale == 64} == {2, 3}  # seeds double: 2 -> 4
    states[64].seeds = states[1024].seeds = list(range(SETTINGS.max_seeds))
    later = rounds._seed_requests(g, states, SETTINGS)
    assert {r.scale for r in later} == {128, 512}  # the extremes are full: the next most useful scales
    for w in scales:
        states[w].seeds = list(range(SETTINGS.max_seeds))
    assert rounds._seed_requests(g, states, SETTINGS) == []


def test_a_decided_interval_is_inside_the_band_or_outside_it():
    assert rounds.decided((-0.2, 0.2)) and rounds.decided((-0.9, -0.3)) and rounds.decided((0.3, 0.5))
    assert not rounds.decided((-0.4, -0.1)) and not rounds.decided((-0.1, 0.3)) and not rounds.decided(None)


def test_a_budget_cuts_whole_seeds_and_whole_lrs():
    a, b = rounds.Block(-8, -8, 2), rounds.Block(-9, -7, 2)
    reqs = [rounds.Request(64, a, 1, "seed"), rounds.Request(64, b, 1, "seed"), rounds.Request(128, a, 1, "seed")]
    cost = lambda unit: sum(len(r.block.values()) for r in unit)  # noqa: E731
    assert rounds.trim(reqs, cost, 3) == reqs[:2]  # seed 1 at width 64: both its blocks, or nothing
    assert rounds.trim(reqs, cost, 2) == [reqs[2]]
    assert rounds.trim(reqs, cost, None) == reqs


def test_the_cheapest_next_step_would_decide_if_the_drift_stayed():
    from types import SimpleNamespace

    scales = [64, 256, 1024]
    states = {w: rounds.ScaleState([rounds.Block(-10, -6, 2)], [0, 1]) for w in scales}
    g = SimpleNamespace(scales=scales, drift_scales=scales, drift=-0.45, drift_ci=(-0.75, -0.15), axis="width")
    per_seed = {64: 300, 256: 300, 1024: 900}  # the largest width's seeds cost most
    extra = rounds.cheapest_decision(g, states, per_seed, SETTINGS)
    hw = rounds.predicted_half_width(g, {w: 2 for w in scales}, extra)
    assert rounds.decided((-0.45 - hw, -0.45 + hw)) and 0 < hw < 0.2
    assert extra.get(256, 0) == 0  # the middle scale does not move the slope
    assert extra[64] >= extra.get(1024, 0)  # the cheap extreme first
    assert rounds.predicted_half_width(g, {w: 2 for w in scales}, {}) == pytest.approx(0.3)
    g.drift = -0.25  # on the band's edge: no number of seeds decides it
    assert rounds.cheapest_decision(g, states, per_seed, SETTINGS) is None

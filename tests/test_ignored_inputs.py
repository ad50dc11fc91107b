"""Runs that ignore what they are given: a training script of the user's that never reads its
`{seed}`, its `{lr}` or its `{width}`.

Seeds that are one run copied count as one seed (`analysis.grouping._copied_seeds`): resampled as
independent seeds they would give the scale's optimum an interval of zero width and a verdict more
certain than anything measured; counted as one seed, the interval comes from the curve's own
noise, the summary says why, and an adaptive sweep stops asking for seeds. A loss that is the same
at every LR has no optimum (`statistics.FLAT`), where the first of equal losses would read as an
optimum on the grid's low edge and ask for a wider grid. Scales that trained the same thing seed by
seed (`group.copied_scales`) give a drift of exactly 0, "transfers", measured on nothing: no
verdict, and an adaptive sweep stops."""

from __future__ import annotations

import shutil

import numpy as np
import pandas as pd
import pytest

from lrtransfer import analysis
from lrtransfer.analysis.statistics import EDGE_LOW, FLAT, INTERIOR, subgrid_optima
from lrtransfer.store import write_record
from lrtransfer.sweeps import rounds

GRID = [float(x) for x in range(-12, -3)]


def record(root, width: int, seed: int, losses: dict[float, float]) -> None:
    """A job at `width` and `seed` whose runs have these losses, by log2 LR."""
    runs = [{"lr": 2.0**x, "log2_lr": x, "seed": seed, "final_loss": v, "eval_loss": v, "diverged": False}
            for x, v in losses.items()]
    config = {"name": "s", "width": width, "depth": 3, "seed": seed, "n_seeds": 1, "model": {"name": "mlp"},
              "param": {"name": "standard"}, "optim": {"name": "adam"}, "data": {"name": "teacher"},
              "lr": {"log2_min": -12, "log2_max": -4, "log2_step": 1}, "train": {"steps": 10}}
    jid = f"w{width}-s{seed}"
    write_record(root / "s" / jid, {"job_id": jid, "status": "complete", "config": config, "runs": runs})


def curve(optimum: float, rng: np.random.Generator, xs=GRID) -> dict[float, float]:
    """A parabola in log2 LR with noise: each point's own draw."""
    return {x: float(1.0 + 0.05 * (x - optimum) ** 2 + rng.normal(0, 0.003)) for x in xs}


def test_seeds_with_the_same_losses_at_a_scale_count_as_one_there(tmp_path):
    rng = np.random.default_rng(0)
    for i, width in enumerate((64, 128, 256)):
        copied = curve(-6.0 - 0.5 * i, rng)
        for seed in range(3):  # 64 and 128: a script that ignores its seed; 256: seeds of their own
            record(tmp_path, width, seed, copied if width < 256 else curve(-7.0, rng))
    with pytest.warns(analysis.SkippedRecordWarning, match=r"study s: at width 64, 128, seeds 0\.\.2 gave the same "
                      r"losses at every LR they share \(a script that ignores its \{seed\}\?\); counted as one seed"):
        (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.n_seeds == [1, 1, 3] and g.n_runs == [9, 9, 27]
    # resampled as three independent seeds, a copied scale's optimum would not move at all
    assert all(hi - lo > 0.02 for lo, hi in g.best_log2_lr_ci[:2]), g.best_log2_lr_ci


def test_a_seed_that_ran_some_of_the_lrs_is_the_same_curve_and_one_that_differs_anywhere_is_a_seed(tmp_path):
    rng = np.random.default_rng(1)
    first = curve(-8.0, rng)
    record(tmp_path, 64, 0, first)
    record(tmp_path, 64, 1, {x: first[x] for x in GRID[3:6]})  # an adaptive round's seed, around the optimum
    other = curve(-8.0, rng)
    record(tmp_path, 128, 0, other)
    record(tmp_path, 128, 1, {**other, GRID[4]: other[GRID[4]] + 1e-9})  # one point apart: a seed of its own
    with pytest.warns(analysis.SkippedRecordWarning, match=r"at width 64, seeds 0, 1 gave the same losses"):
        (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.n_seeds == [1, 2] and g.n_runs == [9, 18]


def test_an_adaptive_sweep_asks_no_seed_of_a_scale_whose_seeds_are_copies():
    """Each width ran seeds 0 and 1, which the analysis counts as one: the interval is open, and a
    seed more would measure nothing, so the sweep ends there and says why."""
    settings = rounds.Settings(log2_min=-12, log2_max=-4, coarse_step=1.0, resolution=1.0, max_seeds=8, extend=2.0)
    grid = rounds.Block(-12, -4, 1.0)
    rng = np.random.default_rng(2)
    rows = [{"width": w, "run_seed": 0, "log2_lr": x, "train_loss": v + rng.normal(0, 0.02), "diverged": False,
             "adaptive.enabled": True}
            for w, o in ((64, -6.0), (128, -6.2), (256, -6.4)) for x, v in curve(o, rng).items()]
    g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), 200)
    assert g.n_seeds == [1, 1, 1] and not rounds.decided(g.drift_ci)
    own = {w: rounds.ScaleState([grid], [0]) for w in (64, 128, 256)}
    assert rounds.next_step(g, own, settings).state == "seeding"  # one seed each, as counted: more will tell
    copied = {w: rounds.ScaleState([grid], [0, 1]) for w in (64, 128, 256)}
    step = rounds.next_step(g, copied, settings)
    assert step.state == "seeds copied" and not step.requests
    assert step.notes == ["width 64, 128, 256: its seeds gave the same losses at every LR (a script that ignores its "
                          "{seed}?), so more seeds would measure nothing"]


# ---------------------------------------------------------------- a script that ignores its LR
def test_a_loss_the_same_at_every_lr_has_no_optimum():
    x = np.array(GRID)
    y = np.array([[1.5] * 9,  # the LR changed nothing
                  [1.5] * 7 + [np.nan, np.nan],  # ... and the two largest diverged
                  [1.5] * 8 + [1.5 + 1e-12],  # one digit apart: the lowest LR is the best measured
                  [1.0 + 0.05 * (v + 8) ** 2 for v in GRID]])
    o = subgrid_optima(x, y)
    assert list(o.kind) == [FLAT, FLAT, EDGE_LOW, INTERIOR]
    assert np.isnan(o.log2_lr[:2]).all() and list(o.grid_index[:2]) == [-1, -1] and o.log2_lr[3] == pytest.approx(-8)
    assert list(subgrid_optima(x[:2], np.array([[1.5, 1.5]])).kind) == [EDGE_LOW]  # two LRs say too little


def test_a_scale_whose_lr_changed_nothing_is_said_and_the_others_keep_their_drift(tmp_path):
    rng = np.random.default_rng(3)
    for width, optimum in ((64, -6.0), (128, -7.0), (256, -8.0)):
        record(tmp_path, width, 0, curve(optimum, rng))
    record(tmp_path, 512, 0, dict.fromkeys(GRID, 1.25))
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.optimum == [INTERIOR, INTERIOR, INTERIOR, FLAT] and g.best_log2_lr[3] is None
    assert g.drift_scales == [64, 128, 256] and g.drift == pytest.approx(-1.0, abs=0.1)
    assert ("width 512: train_loss is the same at every LR, to the last digit recorded: no LR is better than another "
            "(a script that ignores its {lr}?); no optimum") in g.warnings


def test_an_adaptive_sweep_does_not_widen_the_grid_of_a_scale_whose_lr_changed_nothing():
    settings = rounds.Settings(log2_min=-12, log2_max=-4, coarse_step=1.0, resolution=1.0, max_seeds=8, extend=2.0)
    rows = [{"width": w, "run_seed": 0, "log2_lr": x, "train_loss": v, "diverged": False, "adaptive.enabled": True}
            for w, v in ((64, 1.25), (128, 1.5)) for x in GRID]
    g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), 200)
    states = {w: rounds.ScaleState([rounds.Block(-12, -4, 1.0)], [0]) for w in (64, 128)}
    step = rounds.next_step(g, states, settings)
    assert step.state == "stuck" and not step.requests
    assert step.notes[0] == "width 64: its loss is the same at every LR (a script that ignores its {lr}?)"


# ---------------------------------------------------------------- a script that ignores its width
def test_scales_that_trained_the_same_thing_give_no_verdict(tmp_path):
    rng = np.random.default_rng(4)
    same = [curve(-7.0, rng) for _ in range(2)]  # one model, whatever the width: seed by seed
    for width in (64, 128, 256):
        for seed in (0, 1):
            record(tmp_path, width, seed, same[seed])
    for seed in (0, 1):
        record(tmp_path, 512, seed, {**same[seed], GRID[0]: same[seed][GRID[0]] + 1e-9})  # one digit: a width of its own
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.copied_scales == [[64, 128, 256]]
    assert g.drift == pytest.approx(0.0, abs=1e-9) and g.verdict == g.leans == "undetermined"
    assert ("width 64, 128, 256 gave the same train_loss at every LR they share, seed by seed: the width changed "
            "nothing in training (a script that ignores its {width}?); no verdict") in g.warnings
    # seeds apart are no copy: the same curves under other seeds are two runs, not one model
    shutil.rmtree(tmp_path / "s" / "w512-s0")
    shutil.rmtree(tmp_path / "s" / "w512-s1")
    record(tmp_path, 512, 0, same[1])
    record(tmp_path, 512, 1, same[0])
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.copied_scales == [[64, 128, 256]]


def test_an_adaptive_sweep_stops_on_scales_that_trained_the_same_thing():
    settings = rounds.Settings(log2_min=-12, log2_max=-4, coarse_step=1.0, resolution=1.0, max_seeds=8, extend=2.0)
    one = curve(-7.0, np.random.default_rng(5))
    rows = [{"width": w, "run_seed": 0, "log2_lr": x, "train_loss": v, "diverged": False, "adaptive.enabled": True}
            for w in (64, 128) for x, v in one.items()]
    g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), 200)
    states = {w: rounds.ScaleState([rounds.Block(-12, -4, 1.0)], [0]) for w in (64, 128)}
    step = rounds.next_step(g, states, settings)
    assert step.state == "stuck" and not step.requests
    assert step.notes == ["width 64, 128: the same losses at every LR, seed by seed"]
    assert states[128].stuck == "it trained what width 64 did (a script that ignores its {width}?)" and not states[64].stuck

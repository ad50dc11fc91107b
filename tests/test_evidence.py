"""A firm verdict needs the evidence to back it (`analysis.firm_evidence`): three scales, or two
seeds at each; below that a verdict that would say "transfers" or "drifts" is "tentative", and
every reader says which way it leans."""

from __future__ import annotations

import json

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from lrtransfer import analysis
from lrtransfer.reporting import panels, plots
from lrtransfer.sweeps import rounds
from tests.test_analysis import study


def test_the_rule():
    assert not analysis.firm_evidence([1, 1]) and not analysis.firm_evidence([2, 1]) and not analysis.firm_evidence([])
    assert analysis.firm_evidence([1, 1, 1]) and analysis.firm_evidence([2, 2]) and analysis.firm_evidence([3, 2])


@pytest.fixture
def two_widths_one_seed(tmp_path):
    """Two widths of one seed whose optimum halves per doubling: the interval excludes 0 (measured on
    the curves' noise alone), which is no firm evidence of a drift."""
    study(tmp_path, slope=-1.0, seeds=1, noise=0.002, widths=[64, 128])
    return tmp_path


def test_two_scales_of_one_seed_are_tentative_and_say_which_way_they_lean(two_widths_one_seed, cli, tmp_path):
    (g,) = analysis.groups(analysis.load_runs(two_widths_one_seed))
    assert g.drift_ci[1] < 0 and g.verdict == "tentative" and g.leans == "drifts down"
    code, out, err = cli("summary", str(two_widths_one_seed), "--json")
    (doc,) = json.loads(out)["groups"]
    assert code == 0 and doc["verdict"] == "tentative" and doc["leans"] == "drifts down"
    code, out, err = cli("summary", str(two_widths_one_seed))
    assert "-> tentative: drifts down" in out, out
    family = panels.families([g])[0]
    for fig in (plots.lr_figure(family), plots.transfer_figure(family)):
        legends = [*fig.legends, *(ax.get_legend() for ax in fig.axes if ax.get_legend())]
        texts = [ax.get_title() for ax in fig.axes] + [t.get_text() for lg in legends for t in lg.get_texts()]
        assert any("tentative: drifts down" in t for t in texts), texts
        plt.close(fig)
    code, _, err = cli("report", str(two_widths_one_seed), "--out", str(tmp_path / "r.html"))
    assert code == 0 and "tentative: drifts down" in (tmp_path / "r.html").read_text(), err


@pytest.mark.parametrize("widths, seeds", [([64, 128, 256], 1), ([64, 128], 2)])
def test_a_third_scale_or_a_second_seed_at_each_makes_it_firm(tmp_path, widths, seeds):
    study(tmp_path, slope=-1.0, seeds=seeds, noise=0.002, widths=widths)
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.verdict == g.leans == "drifts down"


def test_an_adaptive_sweep_adds_the_seed_a_firm_verdict_needs():
    """Two widths, the interval already outside the band, but one width has one seed (a budget cut its
    second): the sweep is not decided, it trains that width's second seed."""
    settings = rounds.Settings(log2_min=-12, log2_max=-4, coarse_step=1.0, resolution=1.0, max_seeds=4, extend=2.0)
    grid = rounds.Block(-12, -4, 1.0)
    states = {64: rounds.ScaleState([grid], [0, 1]), 128: rounds.ScaleState([grid], [0])}
    x = np.array(grid.values())
    rows = [{"width": w, "run_seed": s, "log2_lr": a, "train_loss": 1.0 + 0.05 * (a - o - 0.05 * s) ** 2,
             "diverged": False, "adaptive.enabled": True}
            for w, o, seeds in ((64, -6.0, (0, 1)), (128, -7.0, (0,))) for s in seeds for a in x]
    g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), 200)
    assert rounds.decided(g.drift_ci) and g.verdict == "tentative"
    step = rounds.next_step(g, states, settings)
    assert step.state == "seeding" and {(r.scale, r.seed) for r in step.requests} == {(128, 1)}
    one = rounds.Settings(**{**vars(settings), "max_seeds": 1})
    states = {64: rounds.ScaleState([grid], [0]), 128: rounds.ScaleState([grid], [0])}
    assert rounds.next_step(g, states, one).state == "out of seeds"

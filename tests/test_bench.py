"""scripts/bench_engine.py: the figures docs/performance.md quotes come from it, so it must run,
and its summaries of noisy rounds (scripts/bench_timing.py) must say what they claim."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "scripts"))
import bench_timing  # noqa: E402


def test_a_ratio_is_the_median_of_the_rounds_own_ratios_with_their_quartiles():
    # two modes timed side by side in 5 rounds: mode a makes 2 run-steps a call, b makes 1
    modes = {"a": lambda: None, "b": lambda: None}
    modes["a"].steps, modes["b"].steps = 2, 1
    t = {"a": [1.0, 1.0, 2.0, 4.0, 1.0], "b": [1.0, 2.0, 1.0, 1.0, 4.0]}
    # rates: a 2 / t_a, b 1 / t_b; a over b per round: 2 t_b / t_a
    assert bench_timing.ratios(t, modes, "a", "b") == [2.0, 4.0, 1.0, 0.5, 8.0]
    assert bench_timing.ratios(t, modes, "a", "b", runs_a=11) == [22.0, 44.0, 11.0, 5.5, 88.0]
    # medians of each mode's times say 2/1 over 1/1 = 2.0x too, but not the spread the load
    # left: the quartiles of the five ratios (statistics.quantiles' default method)
    assert bench_timing.spread([2.0, 4.0, 1.0, 0.5, 8.0]) == "2.00x [0.75, 6.00]"


@pytest.mark.slow  # the whole bench small (20 s); its helpers are checked above
def test_the_bench_runs_and_prints_the_parts_of_a_step_and_their_ceilings():
    """Both sections at the smallest sizes, one round: the figures are meaningless, the lines are not."""
    done = subprocess.run([sys.executable, "scripts/bench_engine.py", "--bf16-widths", "32", "--transformer-width", "16",
                           "--widths", "32", "--rounds", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "0. bf16 products:" in out and "bf16/fp32" in out
    lines = out.splitlines()
    mlp = next(i for i, line in enumerate(lines) if line.split()[:2] == ["mlp", "32"])
    assert "a step, ms: float32" in lines[mlp + 1] and "optimizer" in lines[mlp + 1]
    assert "with an optimizer pass as float32's" in lines[mlp + 2] and "nothing but its products" in lines[mlp + 2]
    transformer = next(i for i, line in enumerate(lines) if line.split()[:2] == ["transformer", "16"])
    assert "with an optimizer pass as float32's" in lines[transformer + 2]
    row = next(line for line in lines if line.split()[:2] == ["32", "11"])  # section 2: width 32, K = 11
    fields = row.split()
    assert fields[-2].replace(".", "").isdigit() and fields[-1].endswith("%"), row  # optimizer ms, ceiling


def test_spread_of_one_or_two_rounds():
    """One round has no spread to give; two have their own quartiles."""
    assert bench_timing.spread([1.5]) == "1.50x [1.50, 1.50]"
    assert bench_timing.spread([2.0, 1.0]) == "1.50x [0.75, 2.25]"


def test_no_rounds_is_refused_in_one_line_before_any_timing():
    done = subprocess.run([sys.executable, "scripts/bench_engine.py", "--rounds", "0"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 2 and done.stdout == ""
    assert done.stderr.strip().splitlines()[-1] == (
        "bench_engine.py: error: --rounds 0: at least 1 (each ratio is taken over the rounds)")

"""Adaptive sweeps (`--until-decided`): rounds end to end, resumed, under every local launcher, refused bad input."""

from __future__ import annotations

import importlib.util
import json
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import lrtransfer_cmd

# Small and quick: three widths, a coarse grid 4 octaves apart refined to 1 octave, two seeds at most.
ADAPT = ["--until-decided", "width=8,16,32", "train.steps=20", "train.batch_size=16", "data.eval_size=64",
         "lr.log2_min=-12", "lr.log2_max=-2", "adaptive.coarse_step=4", "lr.resolution=1", "adaptive.max_seeds=2",
         "engine.progress=false", "engine.threads=1"]
SHORT = [*ADAPT, "--budget", "260"]  # rounds 1-2: the coarse grid, then extensions and a refinement


def records(folder: Path) -> dict[str, list]:
    """job id -> its runs, as written."""
    out = {}
    for p in folder.glob("*/record.json"):
        rec = json.loads(p.read_text())
        assert rec["status"] == "complete"
        out[p.parent.name] = rec["runs"]
    return out


def sweep(*args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    return subprocess.run(lrtransfer_cmd() + ["sweep", *args], capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def short_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("short")
    done = sweep(*SHORT, f"results_dir={root}", "name=s")
    assert done.returncode == 0, done.stderr
    assert "round 2" in done.stdout and "round 3" not in done.stdout, done.stdout
    return root


@pytest.fixture(scope="module")
def short_reference(short_run) -> dict:
    return records(short_run / "s")


def test_an_adaptive_sweep_runs_in_rounds_until_it_ends_and_reads_like_any_study(cli, tmp_path):
    code, out, err = cli("sweep", *ADAPT, f"results_dir={tmp_path}", "name=a")
    assert code == 0, err
    assert "round 1: 180 run-steps spent (a run-step: one training step of one LR run)" in out  # 3 widths x 3 coarse LRs x 20 steps
    assert out.count("a run-step:") == 1  # explained where first shown
    assert "next: width" in out and "extends to log2" in out and "seed 1 on its" in out
    assert "adaptive sweep:" in out and ("decided" in out or "undecided after" in out)
    found = records(tmp_path / "a")
    lrs = {json.loads(p.read_text())["config"]["width"]: set() for p in (tmp_path / "a").glob("*/record.json")}
    for p in (tmp_path / "a").glob("*/record.json"):
        rec = json.loads(p.read_text())
        lrs[rec["config"]["width"]] |= {r["log2_lr"] for r in rec["runs"]}
    assert all(len(v) > 3 for v in lrs.values())  # refined beyond the coarse grid's three
    assert any(0.5 < abs(a - b) < 1.5 for v in lrs.values() for a in v for b in v)  # LRs an octave apart: uneven
    code, summary, err = cli("summary", str(tmp_path / "a"), "--json")
    assert code == 0 and json.loads(summary)["groups"][0]["scales"] == [8, 16, 32]
    code, _, err = cli("plot", str(tmp_path / "a"))
    assert code == 0, err
    # nothing trained twice: the same command replays its rounds from the records
    code, again, err = cli("sweep", *ADAPT, f"results_dir={tmp_path}", "name=a")
    assert code == 0, err
    assert f"0 job(s) ran, {len(found)} already done" in again
    assert records(tmp_path / "a") == found
    assert again.split("adaptive sweep:")[1] == out.split("adaptive sweep:")[1]


def test_an_interrupted_adaptive_sweep_resumes_to_the_same_records(cli, tmp_path, short_reference):
    args = [*SHORT, "engine.checkpoint_s=0.01", f"results_dir={tmp_path}", "name=s"]
    proc = subprocess.Popen(lrtransfer_cmd() + ["sweep", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 120
    while len(list((tmp_path / "s").glob("*/record.json"))) < 4 and time.time() < deadline:  # into round 2 (3 jobs each)
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    assert 4 <= len(records(tmp_path / "s")) < len(short_reference)
    code, _, err = cli("sweep", *args)  # the rerun in-process: what it reads is on disk, not in the cut process
    assert code == 0, err
    assert records(tmp_path / "s") == short_reference  # bit for bit: every job, every run


# submitit's local launcher (35 s) is slow: tests/test_launchers.py checks its records equal the in-process ones
@pytest.mark.parametrize("launcher, module", [("parallel", "hydra_plugins.hydra_joblib_launcher"),
                                              pytest.param("processes", "hydra_plugins.hydra_submitit_launcher",
                                                           marks=pytest.mark.slow)])
def test_each_round_is_a_multirun_under_every_local_launcher(cli, tmp_path, short_reference, launcher, module):
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} not installed")
    code, _, err = cli("sweep", *SHORT, f"hydra/launcher={launcher}", f"results_dir={tmp_path}", "name=s")
    assert code == 0, err
    assert records(tmp_path / "s") == short_reference


def test_the_python_api_runs_it_and_says_how_it_ended(short_run, short_reference):
    import lrtransfer

    args = [a for a in SHORT if not a.startswith("--") and a != "260"]
    result = lrtransfer.sweep([*args, f"results_dir={short_run}", "name=s"], until_decided=True, budget=260)
    assert result["ran"] == 0 and result["skipped"] == len(short_reference)  # replayed from the records
    (g,) = result["adaptive"]["groups"]
    assert result["adaptive"]["rounds"] == 2 and g["end"] == "budget" and "undecided after" in g["undecided"]
    assert sorted(g["seeds"]) == [8, 16, 32] and all(len(v) >= 3 for v in g["lrs"].values())
    with pytest.raises(lrtransfer.UserError, match="limits an adaptive sweep"):
        lrtransfer.sweep(args, budget=100)


def test_the_report_of_an_adaptive_study_shows_its_rounds_and_how_it_ended(cli, short_run, tmp_path):
    """A table of rounds (what each added, its run-steps, the interval after it) and the end; the
    LR blocks each round set are not listed as keys that vary; no "seeds 1..1 per scale"."""
    import html
    import re

    out = tmp_path / "r.html"
    code, _, err = cli("report", str(short_run / "s"), "--out", str(out))
    assert code == 0, err
    text = html.unescape(re.sub(r"<[^>]+>", " ", out.read_text()))
    text = " ".join(re.sub(r"<img[^>]*>", "", text).split())
    assert "adaptive sweep: 2 round(s), 260 run-steps; undecided after 260 run-steps (the budget is spent)" in text
    assert "1 width 8: log2 LR -12, -8, -4 width 16: log2 LR -12, -8, -4 width 32: log2 LR -12, -8, -4 180" in text
    assert re.search(r" 2 width \d+: log2 LR [-\d, ]+.* 80 [\u2212+]\d\.\d\d \[", text), text  # round 2, its drift
    assert "lr.log2_min" not in text and "lr.log2_step" not in text and "chosen round by round" in text
    assert "1..1" not in text and "1 seed per scale" in text
    log = json.loads((short_run / "s" / "adaptive.json").read_text())
    assert [r["run_steps"] for r in log["groups"][0]["rounds"]] == [180, 80]


def test_a_budget_too_small_ends_undecided_with_the_interval_and_the_next_step(cli, tmp_path):
    code, out, err = cli("sweep", *ADAPT, "--budget", "500", f"results_dir={tmp_path}", "name=b")
    assert code == 0, err
    text = " ".join(out.split())  # rich wraps long lines
    assert "undecided after" in text and "the budget is spent" in text
    assert "drift" in text.split("undecided after")[1]
    assert "cheapest next step" in text or "not even" in text or "refines the optima" in text


def test_a_round_the_budget_cut_short_names_the_budget_that_trains_all_of_it(tmp_path):
    """The next step of a sweep whose last round was trained in part is the rest of that round
    (a re-run replays the rounds before it and completes it first), not what its partial records
    would plan next; the budget it names does train that whole round."""
    import re

    import lrtransfer

    args = [a for a in ADAPT if not a.startswith("--")] + [f"results_dir={tmp_path}", "name=c"]
    cut = lrtransfer.sweep(args, until_decided=True, budget=300)["adaptive"]
    (g,) = cut["groups"]
    said = re.search(r"the budget cut round (\d+) short, .* re-run with a budget of ([\d,]+) or more", g["undecided"])
    assert g["end"] == "budget" and said, g["undecided"]
    index, needs = int(said.group(1)), int(said.group(2).replace(",", ""))
    assert cut["run_steps"] < needs
    whole = lrtransfer.sweep(args, until_decided=True, budget=needs)["adaptive"]
    assert whole["rounds"] == index and whole["run_steps"] == needs
    assert "cut round" not in (whole["groups"][0]["undecided"] or "")


def test_a_fixed_sweep_into_an_adaptive_sweeps_folder_is_flagged_as_mixed(cli, short_run, tmp_path):
    """Both kinds of record in one group are read pooled, with the fixed grid's estimators: the
    numbers are neither sweep's own, and the summary says so."""
    shutil.copytree(short_run / "s", tmp_path / "s")
    code, alone, err = cli("summary", str(tmp_path / "s"), "--json")
    assert code == 0 and not any("mixed" in w for w in json.loads(alone)["groups"][0]["warnings"])
    fixed = [a for a in ADAPT if not a.startswith(("--until", "adaptive.", "lr.resolution"))]
    code, out, err = cli("sweep", *fixed, "lr.log2_step=2", f"results_dir={tmp_path}", "name=s")
    assert code == 0, err
    code, mixed, err = cli("summary", str(tmp_path / "s"), "--json")
    (group,) = json.loads(mixed)["groups"]
    assert any(w.startswith("mixed: ") and "of a fixed grid in one group" in w and "name=" in w
               for w in group["warnings"]), group["warnings"]


def test_the_plan_of_an_adaptive_sweep_shows_round_one_and_the_budget(cli, tmp_path):
    code, out, err = cli("sweep", "--plan", *ADAPT, "--budget", "2h", f"results_dir={tmp_path}", "name=p")
    assert code == 0, err
    assert "adaptive sweep: round 1 trains 3 job(s), 180 run-steps" in out and "7200 s" in out
    assert not (tmp_path / "p").exists() or not list((tmp_path / "p").glob("*/record.json"))


@pytest.mark.parametrize("args, fragment", [
    (["--budget", "0"], "--budget must be positive, got '0'"),
    (["--budget", "-5"], "--budget must be positive, got '-5'"),
    (["--budget", "lots"], "--budget 'lots': give run-steps (20000) or a time (600s, 90m, 2h)"),
    (["adaptive.budget=0"], "adaptive.budget must be positive, got 0"),
    (["adaptive.budget_s=-1"], "adaptive.budget_s must be positive, got -1"),
    (["lr.resolution=0"], "lr.resolution must be a positive number of octaves, got 0"),
    (["lr.resolution=-0.5"], "lr.resolution must be a positive number of octaves, got -0.5"),
    (["lr.resolution=0.01"], "lr.resolution=0.01 is finer than 1/64 octave; valid: 0.015625 .. adaptive.coarse_step=4"),
    (["lr.resolution=8"], "lr.resolution=8 is coarser than adaptive.coarse_step=4"),
    (["n_seeds=3"], "n_seeds=3: an adaptive sweep adds seeds itself"),
    (["seed=0,1"], "an adaptive sweep chooses its seeds itself"),
    (["width=16"], "an adaptive sweep needs two or more values of the scale per group"),
    (["grid.optim.weight_decay=[0,0.1]"], "grid.optim.weight_decay: an adaptive sweep refines the LR alone"),
])
def test_bad_adaptive_input_is_one_line_before_anything_trains(cli, tmp_path, args, fragment):
    code, out, err = cli("sweep", *ADAPT, *args, f"results_dir={tmp_path}", "name=bad")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]
    assert not list(tmp_path.rglob("record.json"))


def test_budget_without_until_decided_is_refused(cli, tmp_path):
    code, out, err = cli("sweep", "width=8,16", "--budget", "100", f"results_dir={tmp_path}")
    assert code == 2 and "add --until-decided" in err


@pytest.mark.slow
def test_the_coverage_simulation_runs_and_its_interval_covers(tmp_path):
    """scripts/adaptive_coverage.py at a small size: the procedure itself on fabricated studies."""
    import sys

    done = subprocess.run([sys.executable, "scripts/adaptive_coverage.py", "--studies", "40", "--resamples", "300"],
                          capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stderr
    last = done.stdout.strip().splitlines()[-1]
    coverage = float(last.split("coverage ")[1].split()[0])
    assert coverage >= 0.85, done.stdout  # 40 studies: a binomial spread of about +-3.5% around 95%
    wrong = [float(part.split(": ")[1]) for part in last.split("; ")[1:]]  # truly transfers called drifts, and the reverse
    assert len(wrong) == 2 and max(wrong) <= 0.05, last


def test_the_end_line_says_which_rounds_ran_after_the_one_the_budget_cut():
    """A round cut short need not be the last: later, smaller rounds may fit what the budget left.
    The end line names the cut round and says that they ran."""
    from types import SimpleNamespace

    from lrtransfer.sweeps.outcome import undecided_words

    def group(*ran):
        return SimpleNamespace(analysis=SimpleNamespace(drift=-0.5, drift_ci=[-0.9, -0.1]), settings=SimpleNamespace(max_seeds=10),
                               end="budget", spent=900, axis="width", cost=lambda rqs: 100 * len(rqs),
                               cut=SimpleNamespace(index=6, needs=1000, left_out=[]),
                               history=[SimpleNamespace(index=i) for i in ran])

    assert "cut round 6 short (rounds 7-8 then ran on what it had measured), leaving" in undecided_words(group(5, 6, 7, 8))
    assert "cut round 6 short (round 7 then ran on what it had measured), leaving" in undecided_words(group(6, 7))
    assert "cut round 6 short, leaving" in undecided_words(group(5, 6))


def test_a_budget_below_round_one_is_refused_before_anything_trains(cli, tmp_path):
    """The first round is the coarse grid every later round starts from: it is not cut, so a
    budget it does not fit in is refused instead of spent past."""
    code, out, err = cli("sweep", *ADAPT, "--budget", "100", f"results_dir={tmp_path}", "name=b")
    assert code == 2 and "--budget 100 run-steps is below round 1's 180" in err and "give --budget 180" in err, err
    assert not (tmp_path / "b").exists()

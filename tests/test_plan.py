"""Seeing a sweep before running it: --plan, --cfg job on a sweep, and sweep -h."""

from __future__ import annotations

import fcntl
import re

import pytest
import torch

from tests.conftest import TINY


def test_plan_lists_done_running_and_missing_jobs_and_trains_nothing(cli, tmp_path):
    base = [*TINY, f"results_dir={tmp_path}", "name=p"]
    code, out, err = cli("sweep", "--plan", *base, "width=16,32,48")
    assert code == 0, err
    assert not list(tmp_path.rglob("record.json"))  # nothing trained
    assert "3 job(s): 3 missing" in out
    assert "to run: 3 job(s), 180 run-steps" in out  # 5 LRs x 12 steps per job

    assert cli("sweep", *base, "width=16")[0] == 0
    ids = dict(re.findall(r"missing\s+width=(\d+)\s+[\d,]+ run-steps\s+(\w+)", cli("sweep", "--plan", *base, "width=16,32,48")[1]))
    lock = tmp_path / "p" / ids["32"] / ".lock"
    lock.parent.mkdir(parents=True)
    with open(lock, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)  # as a running job holds it
        code, out, _ = cli("sweep", "--plan", *base, "width=16,32,48")
    assert code == 0
    assert re.search(r"done\s+width=16 ", out) and re.search(r"running\s+width=32 ", out)
    assert re.search(r"missing\s+width=48 ", out)
    assert "to run: 1 job(s), 60 run-steps" in out
    assert re.search(r"~\d+:\d\d:\d\d in-process, at each model's own rate:\n +[\d.]+ ms per run-step \(timed: \d+ "
                     r"step\(s\) here\): width=48\n", out), out
    assert len(list(tmp_path.rglob("record.json"))) == 1


def test_plan_under_rerun_lists_finished_jobs_as_ones_to_run_again(cli, tmp_path):
    """--plan --rerun shows what --rerun does: every finished job runs again."""
    base = [*TINY, f"results_dir={tmp_path}", "name=p"]
    assert cli("sweep", *base, "width=16")[0] == 0
    code, out, _ = cli("sweep", "--plan", *base, "width=16,32")
    assert code == 0 and "1 done, 1 missing" in out and "to run: 1 job(s), 60 run-steps" in out
    code, out, _ = cli("sweep", "--plan", "--rerun", *base, "width=16,32")
    assert code == 0 and "1 reruns, 1 missing" in out, out
    assert re.search(r"reruns\s+width=16 ", out) and "to run: 2 job(s), 120 run-steps" in out
    assert len(list(tmp_path.rglob("record.json"))) == 1  # still nothing trained


def test_plan_prices_each_model_by_its_own_rate(cli, tmp_path):
    """A model with finished jobs by their wall time, another by a few of its own steps timed here:
    never one model's rate for another's (a nanoGPT priced as the MLP)."""
    base = [*TINY, f"results_dir={tmp_path}", "name=p"]
    assert cli("sweep", *base, "width=16")[0] == 0
    code, out, err = cli("sweep", "--plan", *base, "width=16,64", "seed=1")
    assert code == 0, err
    rates = [line for line in out.splitlines() if "ms per run-step" in line]
    assert any("(1 finished job(s) of it): width=16" in line for line in rates), out  # the same model, seed 0
    assert any("(timed: " in line and line.endswith("): width=64") for line in rates), out  # one with no record
    assert len(list(tmp_path.rglob("record.json"))) == 1  # timing writes nothing


def test_plan_refuses_bad_input_like_a_sweep(cli, tmp_path):
    code, out, err = cli("sweep", "--plan", f"results_dir={tmp_path}", "width=64,0")
    assert code == 2 and err.startswith("error: width must be positive, got 0")


def test_cfg_job_of_a_sweep_shows_its_first_job(cli):
    code, out, err = cli("sweep", "--cfg", "job", "width=64,128")
    assert code == 0, err
    assert "\nwidth: 64\n" in out and "first of 2 jobs" in err
    code, out, err = cli("sweep", "--cfg", "job", "study=width")
    assert code == 0, err
    assert "\nwidth: 64\n" in out and "\nname: width\n" in out and "first of 5 jobs" in err
    code, out, err = cli("sweep", "--multirun", "--cfg", "job", "width=32,64")
    assert code == 0 and "\nwidth: 32\n" in out


def test_cfg_job_in_one_argument_is_the_same(cli):
    code, out, err = cli("sweep", "--cfg=job", "width=64,128")
    assert code == 0 and "\nwidth: 64\n" in out and "first of 2 jobs" in err, err


@pytest.mark.parametrize("flags, shown", [(["--info", "config", "--plan"], "metric: train_loss"),
                                          (["--cfg", "hydra", "--plan"], "hydra/launcher"),
                                          (["--hydra-help"], "--cfg hydra"),
                                          (["width=64", "--info"], "Config search path")])
def test_hydras_own_flags_print_and_train_nothing(cli, tmp_path, flags, shown):
    """Hydra prints what they ask for; with --plan too there is no plan to show, and a flag at the
    end whose value is optional (--info) does not take the sweep's internal override as its value."""
    code, out, err = cli("sweep", f"results_dir={tmp_path}", *flags)
    assert code == 0 and shown in out and "Traceback" not in err, (out, err)
    assert not list(tmp_path.rglob("record.json"))


@pytest.mark.parametrize("flag", ["--package", "--config-dir", "-c"])
def test_a_flag_at_the_end_without_its_value_is_one_line_and_trains_nothing(cli, tmp_path, flag):
    code, out, err = cli("sweep", f"results_dir={tmp_path}", flag)
    assert code == 2 and err.count("\n") == 1 and "expected one argument (lrtransfer sweep --help)" in err, (out, err)
    assert not list(tmp_path.rglob("record.json"))


def test_cfg_job_says_how_to_see_the_values_it_prints_as_interpolations(cli):
    code, out, err = cli("sweep", "--cfg", "job")
    assert code == 0 and "log2_min: ${lrt_lr:log2_min}" in out and "--cfg job --resolve shows them" in err
    code, out, err = cli("sweep", "--cfg", "job", "--resolve")
    assert code == 0 and "log2_min: -14.0" in out and "${" not in out + err


def test_sweep_h_lists_the_users_groups_not_the_internal_ones(cli):
    code, out, _ = cli("sweep", "-h")
    assert code == 0
    assert "powered by Hydra" not in out
    assert "schema" not in out and "grid:" not in out  # the LR grid is `lr.*`; `grid.*` is the second inner axis
    assert "grid.*" in out
    groups = dict(re.findall(r"^  (\S+)\s+(.+)$", out, flags=re.M))
    assert "[mlp]" in groups["model"] and "resnet" in groups["model"] and "[adam]" in groups["optim"]
    assert "parallel" in groups["hydra/launcher"] and "depth" in groups["study"]
    assert "--cfg job" in out and "--plan" in out


@pytest.mark.parametrize("args, fragment", [
    (["width=60000"], "width=60000 depth=3 train.batch_size=16: one run needs about"),
    pytest.param(["engine.device=cuda"], "engine.device=cuda but CUDA is not available here",
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")),
    (["results_dir=/proc/x"], "results folder '/proc/x/p' is not writable"),
], ids=["memory", "no CUDA", "unwritable"])
def test_plan_makes_every_check_the_sweep_makes(cli, tmp_path, args, fragment):
    """Issue 40, case 12: what the sweep refuses before training, --plan refuses too (the same
    function), writing nothing."""
    code, out, err = cli("sweep", "--plan", *TINY, "width=16", f"results_dir={tmp_path / 'new' / 'deeper'}", "name=p", *args)
    assert code == 2 and err.startswith("error: ") and fragment in err, (out, err)
    assert not (tmp_path / "new").exists()


def test_plan_counts_a_checkpointed_job_by_the_run_steps_it_has_left(cli, tmp_path, monkeypatch):
    """Issue 40, case 12: after an interrupt, the job that saved a checkpoint resumes: the plan
    counts only what is left of it."""
    from lrtransfer.sweeps.checkpoint import FileCheckpoint
    from lrtransfer.sweeps.job import runs_of
    from lrtransfer.training import build, engine, stop
    from tests.conftest import typed

    over = [*TINY, "width=16", "train.steps=40"]
    base = ["sweep", "--plan", *over, f"results_dir={tmp_path}", "name=p"]
    job = re.search(r"missing .* 200 run-steps\s+(\w{12})", cli(*base)[1]).group(1)
    folder = tmp_path / "p" / job
    folder.mkdir(parents=True)
    cfg = typed(*over)
    seen = []

    def stop_midway(n):
        seen.append(n)
        if sum(seen) >= 100:
            stop.request()

    monkeypatch.setattr(stop, "_requested", False)
    with pytest.raises(engine.Interrupted):  # as a Ctrl-C in the middle of the job
        engine.train(build.job(cfg), runs_of(cfg), progress=stop_midway,
                     checkpoint=FileCheckpoint(folder / "checkpoint.pt", interval_s=1e-9))
    monkeypatch.setattr(stop, "_requested", False)
    code, out, _ = cli(*base)
    left = 200 - sum(seen)
    assert code == 0 and re.search(rf"resumes .* {left} run-steps\s+{job}", out), out
    assert "1 job(s): 1 resumes" in out and f"to run: 1 job(s), {left} run-steps" in out

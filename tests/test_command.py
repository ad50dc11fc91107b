"""trainer=command: studies whose runs are small training scripts written here, run as processes.

The scripts stand in for a user's `train.py`: one prints its loss, one writes a CSV, one
diverges above some LR, one fails at one LR, one ignores its seed, one never prints a loss.
Their losses are a known function of the LR and width, so what the records must say is known.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest

from tests.conftest import compose, lrtransfer_cmd
from tests.test_cluster import SLURM, ray_head, slurm, sweep  # noqa: F401  (ray_head, slurm: fixtures)

PY = sys.executable

# A toy trainer: loss(step) = 1 + 0.05 (log2 lr - opt)^2 + 2 exp(-step/5) + noise(seed); the optimum
# moves by DRIFT octaves per doubling of width. Above log2 lr = opt + 4 its loss explodes; the
# options say how it reports and where it fails.
TRAINER = textwrap.dedent('''
    import argparse, csv, json, math, os, random, sys, time
    p = argparse.ArgumentParser()
    p.add_argument("--lr", type=float); p.add_argument("--width", type=int, default=32)
    p.add_argument("--seed", type=int, default=0); p.add_argument("--steps", type=int, default=20)
    p.add_argument("--out", default="."); p.add_argument("--csv", action="store_true")
    p.add_argument("--jsonl", action="store_true"); p.add_argument("--quiet", action="store_true")
    p.add_argument("--fail-at", type=float, default=None); p.add_argument("--ignore-seed", action="store_true")
    p.add_argument("--sleep", type=float, default=0.0); p.add_argument("--drift", type=float, default=0.0)
    a = p.parse_args()
    calls = os.environ.get("CALLS")
    if calls:
        with open(calls, "a") as f:
            f.write(f"{a.width} {a.lr!r} {a.seed}\\n")
    if a.fail_at is not None and abs(math.log2(a.lr) - a.fail_at) < 1e-9:
        print("loading data", flush=True)
        print("RuntimeError: out of memory at this LR", file=sys.stderr)
        sys.exit(3)
    rng = random.Random(0 if a.ignore_seed else a.seed)
    opt = -6 + a.drift * math.log2(a.width / 32)
    x = math.log2(a.lr) - opt
    rows = []
    for step in range(a.steps):
        loss = 1.0 + 0.05 * x * x + 2.0 * math.exp(-step / 5) + 0.01 * rng.random()
        if x > 4:
            loss = float("nan") if step >= 3 else 3.0 * 30 ** step
        rows.append((step, loss))
        if not (a.quiet or a.csv or a.jsonl):
            print(f"step {step} loss {loss:.6f}", flush=True)
        time.sleep(a.sleep)
    if a.csv:
        with open(os.path.join(a.out, "metrics.csv"), "w") as f:
            w = csv.writer(f); w.writerow(["iter", "train_loss", "val_loss"])
            for s, l in rows: w.writerow([s, repr(l), repr(l + 0.1)])
    if a.jsonl:
        with open(os.path.join(a.out, "log.jsonl"), "w") as f:
            for s, l in rows: f.write(json.dumps({"it": s, "loss": l}) + "\\n")
''')

LRS = ["lr.log2_min=-9", "lr.log2_max=-1", "lr.log2_step=2"]  # -9 -7 -5 -3 -1: -1 diverges (opt -6 + 4 < -1)


@pytest.fixture
def trainer(tmp_path) -> Path:
    path = tmp_path / "train.py"
    path.write_text(TRAINER)
    return path


def command(script: Path, extra: str = "") -> str:
    return f"trainer.command='{PY} {script} --lr={{lr}} --width={{width}} --seed={{seed}} --out={{run_dir}} {extra}'"


def sweep_args(tmp_path, script, extra="", *more):
    return ["trainer=command", command(script, extra), *LRS, "train.steps=20", "engine.progress=false",
            f"results_dir={tmp_path / 'r'}", "name=s", *more]


def records(root: Path) -> dict:
    """Each job's record by its width and seed, less what differs between two runs of it."""
    out = {}
    for path in sorted(root.rglob("record.json")):
        rec = json.loads(path.read_text())
        out[(rec["config"]["width"], rec["config"]["seed"])] = rec
    return out


def test_a_study_of_a_script_that_prints_its_loss(cli, tmp_path, trainer):
    code, out, err = cli("sweep", *sweep_args(tmp_path, trainer, "--drift=0.5"), "width=32,128")
    assert code == 0, err
    recs = records(tmp_path / "r" / "s")
    assert set(recs) == {(32, 0), (128, 0)}
    rec = recs[(32, 0)]
    assert rec["status"] == "complete" and rec["device"] == "command" and "torch" not in rec["versions"]
    assert set(rec["config"]) >= {"trainer", "train", "width"} and not {"model", "param", "optim", "data"} & set(rec["config"])
    runs = {(r["log2_lr"], r["seed"]): r for r in rec["runs"]}
    assert len(runs) == 5
    # the mean of the last 10% of 20 logged steps, as the engine's final window: steps 18 and 19
    best = runs[(-5.0, 0)]
    assert best["history_step"] == list(range(20)) and not best["diverged"]
    assert best["final_loss"] == pytest.approx(sum(best["history_loss"][18:]) / 2)
    assert best["initial_loss"] == best["history_loss"][0] and best["eval_loss"] is None
    high = runs[(-1.0, 0)]  # log2 lr -1 is 5 octaves above the optimum: its loss explodes, then is NaN
    assert high["diverged"] and high["final_loss"] is None and high["diverged_step"] == 1  # 90 > 20 x 3
    assert high["history_step"] == [0, 1]
    # the analysis reads it as any study: the optimum at -5 or -7 (opt -6), moving half an octave per doubling
    code, out, err = cli("summary", str(tmp_path / "r"), "--json")
    assert code == 0, err
    (group,) = json.loads(out)["groups"]
    assert group["axis"] == "width" and group["scales"] == [32, 128]
    assert group["drift"] == pytest.approx(0.5, abs=0.35)  # plot, report and the rest: the test of reading commands below


def test_a_script_that_writes_a_csv_is_read_from_its_run_folder(cli, tmp_path, trainer):
    args = sweep_args(tmp_path, trainer, "--csv", "trainer.metrics_file=metrics.csv", "trainer.loss_column=train_loss",
                      "trainer.step_column=iter", "trainer.eval_column=val_loss", "width=32")
    code, _, err = cli("sweep", *args)
    assert code == 0, err
    (rec,) = records(tmp_path / "r" / "s").values()
    run = next(r for r in rec["runs"] if r["log2_lr"] == -5.0)
    assert run["history_step"] == list(range(20))
    assert run["eval_loss"] == pytest.approx(run["history_loss"][-1] + 0.1)
    # the same losses as the script printing them
    code, _, err = cli("sweep", *sweep_args(tmp_path, trainer, "", "width=32", "name=printed"))
    printed = next(r for r in records(tmp_path / "r" / "printed")[(32, 0)]["runs"] if r["log2_lr"] == -5.0)
    assert printed["history_loss"] == pytest.approx(run["history_loss"], abs=1e-6)


def test_json_lines_with_a_step_key_of_their_own(cli, tmp_path, trainer):
    args = sweep_args(tmp_path, trainer, "--jsonl", "trainer.metrics_file='{run_dir}/log.jsonl'", "trainer.loss_column=loss",
                      "trainer.step_column=it", "width=32", "lr.log2_max=-5")
    code, _, err = cli("sweep", *args)
    assert code == 0, err
    (rec,) = records(tmp_path / "r" / "s").values()
    assert [r["log2_lr"] for r in rec["runs"]] == [-9.0, -7.0, -5.0] and rec["runs"][0]["history_step"][-1] == 19


def test_a_run_that_fails_at_one_lr_is_named_and_the_study_goes_on(cli, tmp_path, trainer):
    code, out, err = cli("sweep", *sweep_args(tmp_path, trainer, "--fail-at=-7"), "width=32,64")
    assert code == 0, err
    assert "run failed width=32 log2_lr=-7 seed=0: exit code 3: RuntimeError: out of memory at this LR" in " ".join(out.split())
    for rec in records(tmp_path / "r" / "s").values():
        assert rec["status"] == "complete" and len(rec["runs"]) == 4
        (failed,) = rec["failed_runs"]
        assert failed["log2_lr"] == -7.0 and failed["exit_code"] == 3 and "out of memory" in failed["error"]
    assert cli("summary", str(tmp_path / "r"))[0] == 0


def test_a_script_that_never_prints_a_loss_fails_its_runs_with_that_reason(cli, tmp_path, trainer):
    code, out, err = cli("sweep", *sweep_args(tmp_path, trainer, "--quiet"), "width=32", "lr.log2_max=-7")
    assert code == 1
    (rec,) = records(tmp_path / "r" / "s").values()
    assert rec["status"] == "failed"
    assert "every run failed (2)" in rec["error"] and "no line of its output matched trainer.loss_pattern" in rec["error"]


def test_a_script_that_ignores_its_seed(cli, tmp_path, trainer):
    """Its two seeds are one run twice: the records keep both as the script gave them, and the
    analysis counts one seed per width and says why (`tests/test_ignored_inputs.py`)."""
    code, _, err = cli("sweep", *sweep_args(tmp_path, trainer, "--ignore-seed"), "width=32,64", "n_seeds=2")
    assert code == 0, err
    for rec in records(tmp_path / "r" / "s").values():
        by_seed = {s: [r["history_loss"] for r in rec["runs"] if r["seed"] == s] for s in (0, 1)}
        assert by_seed[0] and by_seed[0] == by_seed[1]
    code, out, err = cli("summary", str(tmp_path / "r"), "--json")
    assert code == 0, err
    (group,) = json.loads(out)["groups"]
    assert group["n_seeds"] == [1, 1] and group["n_runs"] == [5, 5], group
    assert "at width 32, 64, seeds 0, 1 gave the same losses at every LR they share" in err, err


def test_a_value_of_trainer_vars_swept_is_the_scale_axis_and_a_grid_value_reaches_its_run(cli, tmp_path, trainer):
    args = ["trainer=command", f"trainer.command='{PY} {trainer} --lr={{lr}} --width={{trainer.vars.w * 2}} "
            "--drift={optim.weight_decay}'", *LRS, "lr.log2_step=4", "engine.progress=false", "+trainer.vars.w=16,32",
            "grid.optim.weight_decay=[0.0,0.5]", f"results_dir={tmp_path}", "name=s"]
    code, out, err = cli("sweep", *args)
    assert code == 0, err
    argv = sorted(" ".join(json.loads(p.read_text())["argv"][2:]) for p in tmp_path.rglob("result.json"))
    assert len(argv) == 12 and "--lr=0.001953125 --width=32 --drift=0.5" in argv and "--lr=0.5 --width=64 --drift=0.0" in argv
    code, out, err = cli("summary", str(tmp_path), "--json")
    groups = json.loads(out)["groups"]
    assert code == 0 and {g["axis"] for g in groups} == {"trainer.vars.w"} and groups[0]["scales"] == [16, 32]


def test_a_diverged_pattern_marks_a_run_that_stops_itself(cli, tmp_path):
    script = tmp_path / "nan.py"
    script.write_text("import sys\nprint('step 0 loss 2.0')\nprint('step 1 loss 1.9')\n"
                      "lr = float(sys.argv[1])\nif lr > 0.01:\n    sys.exit('Exception: NaN loss')\nprint('step 2 loss 1.8')\n")
    args = ["trainer=command", f"trainer.command='{PY} {script} {{lr}}'", "trainer.diverged_pattern=NaN loss",
            "lr.log2_min=-8", "lr.log2_max=-4", "lr.log2_step=4", f"results_dir={tmp_path}", "name=s", "engine.progress=false"]
    code, _, err = cli("sweep", *args)
    assert code == 0, err
    (rec,) = records(tmp_path / "s").values()
    low, high = rec["runs"]
    assert not low["diverged"] and low["final_loss"] == pytest.approx(1.8)
    assert high["diverged"] and high["diverged_step"] == 1 and high["final_loss"] is None


def test_runs_share_the_gpus_n_at_a_time(cli, tmp_path, monkeypatch):
    script = tmp_path / "gpu.py"
    script.write_text("import os, sys, time\ntime.sleep(0.3)\n"
                      "open(sys.argv[1] + '/gpus', 'w').write(os.environ.get('CUDA_VISIBLE_DEVICES', '-'))\n"
                      "print('step 0 loss 1.0')\n")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    args = ["trainer=command", f"trainer.command='{PY} {script} {{run_dir}}'", "trainer.parallel=2", "lr.log2_min=-8",
            "lr.log2_max=-5", f"results_dir={tmp_path}", "name=s", "engine.progress=false"]
    code, _, err = cli("sweep", *args)
    assert code == 0, err
    seen = sorted(p.read_text() for p in tmp_path.rglob("gpus"))
    assert len(seen) == 4 and set(seen) == {"0,1", "2,3"}


def test_progress_advances_as_a_runs_losses_arrive(tmp_path, trainer):
    """A job's progress (its bar, its `.progress` file) moves with each loss a run prints, not
    only as runs end: the bar of an hour-long run moves within it."""
    from lrtransfer.sweeps import command_job
    from tests.conftest import typed

    cfg = typed("trainer=command", command(trainer, "--sleep=0.02"), "lr.log2_min=-9", "lr.log2_max=-7", "lr.log2_step=2",
                "train.steps=20", "width=32")
    folder, seen = tmp_path / "job", []  # (steps so far, runs ended then)

    def advance(n: int) -> None:
        seen.append((n + (seen[-1][0] if seen else 0), len(list(folder.rglob("result.json")))))

    command_job.train(cfg, folder, rerun=False, progress=advance)
    assert seen[-1] == (40, 2)  # 2 runs of 20 steps
    assert any(0 < steps < 20 and ended == 0 for steps, ended in seen), seen  # within the first run


# ---------------------------------------------------------------- resuming, identity, plan
def calls(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.exists() else []


def test_kill_9_mid_study_then_rerun_runs_no_finished_run_twice(cli, tmp_path, trainer, monkeypatch):
    """The sweep killed with SIGKILL while runs are going; the re-run keeps every run that ended,
    runs the others whole, and its records equal a study run in one go."""
    log = tmp_path / "calls.log"
    common = [*sweep_args(tmp_path, trainer, "--sleep=0.02"), "width=32"]  # 5 runs of 0.4 s, one after another
    monkeypatch.setenv("CALLS", str(log))  # inherited by the runs, and no part of the jobs' identity
    sweep = subprocess.Popen([*lrtransfer_cmd(), "sweep", *common], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                             start_new_session=True)
    deadline = time.monotonic() + 120
    while len(list((tmp_path / "r").rglob("result.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    finished = [tuple(json.loads(p.read_text())["argv"][2:5]) for p in (tmp_path / "r").rglob("result.json")]
    assert 2 <= len(finished) < 5 and not list((tmp_path / "r").rglob("record.json"))

    code, _, err = cli("sweep", *common)  # the re-run, in this process
    assert code == 0, err
    started = Counter(calls(log))
    assert len(started) == 5  # every run of the study
    for lr, width, seed in finished:  # a run that ended before the kill never ran again
        assert started[f"{width.split('=')[1]} {float(lr.split('=')[1])!r} {seed.split('=')[1]}"] == 1
    assert sum(n - 1 for n in started.values()) <= 1  # the one the kill cut off, if one was, ran again whole

    # the same study in one go (its runs all at once: trainer.parallel is no part of a job, nor of its record's runs)
    monkeypatch.setenv("CALLS", str(tmp_path / "clean.log"))
    code, _, err = cli("sweep", *common, "trainer.parallel=5", f"results_dir={tmp_path / 'clean'}")
    assert code == 0, err
    (rec,), (ref,) = records(tmp_path / "r").values(), records(tmp_path / "clean").values()
    assert rec["runs"] == ref["runs"] and rec["job_id"] == ref["job_id"] and len(rec["runs"]) == 5


def test_a_signal_to_the_sweep_ends_its_runs_and_a_rerun_finishes(cli, tmp_path, trainer, monkeypatch):
    """SIGTERM (as Ctrl-C): the running runs are ended at once (no process of theirs is left), the
    sweep exits 130 saying the ended runs are kept, and the re-run runs only the others."""
    log = tmp_path / "calls.log"
    common = [*sweep_args(tmp_path, trainer, "--sleep=0.1 --steps=10"), "width=32", "lr.log2_step=4"]  # 3 runs
    monkeypatch.setenv("CALLS", str(log))
    sweep = subprocess.Popen([*lrtransfer_cmd(), "sweep", *common], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True)
    deadline = time.monotonic() + 120
    while not list((tmp_path / "r").rglob("result.json")) and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(0.5)  # the next run has started
    sweep.send_signal(signal.SIGTERM)
    _, err = sweep.communicate(timeout=60)
    assert sweep.returncode == 130, err
    assert "1 running job(s) saved a checkpoint: re-run the same command to resume them" in err
    running = subprocess.run(["pgrep", "-f", str(trainer)], capture_output=True, text=True).stdout.split()
    assert not running, running
    kept = len(list((tmp_path / "r").rglob("result.json")))
    assert 1 <= kept < 3 and not list((tmp_path / "r").rglob("record.json"))
    before = len(calls(log))
    code, _, err = cli("sweep", *common)  # the re-run, in this process
    assert code == 0, err
    assert len(calls(log)) - before == 3 - kept


def test_an_edit_of_the_script_retrains_and_a_rerun_does_not(cli, tmp_path, trainer):
    log = tmp_path / "calls.log"
    args = [*sweep_args(tmp_path, trainer), "width=32", "lr.log2_max=-7", f"+trainer.env.CALLS={log}"]
    assert cli("sweep", *args)[0] == 0 and len(calls(log)) == 2
    code, out, _ = cli("sweep", *args)
    assert code == 0 and "0 job(s) ran, 1 already done" in out and len(calls(log)) == 2
    # what says how or where it runs is no part of the job: the same job, not run again
    code, out, _ = cli("sweep", *args, "trainer.label=toy", "trainer.parallel=2", f"trainer.cwd={tmp_path}")
    assert code == 0 and "1 already done" in out and len(calls(log)) == 2
    trainer.write_text(trainer.read_text() + "\n# an edit\n")
    code, out, _ = cli("sweep", *args)
    assert code == 0 and "1 job(s) ran, 0 already done" in out and len(calls(log)) == 4
    assert len(list((tmp_path / "r" / "s").glob("*/record.json"))) == 2
    # the readers tell the two versions of the script apart: the newest is read, the older named
    code, out, err = cli("summary", str(tmp_path / "r"), "--json")
    (group,) = json.loads(out)["groups"]
    assert code == 0 and len(group["superseded_jobs"]) == 1, out
    code, out, err = cli("summary", str(tmp_path / "r"), "--json", "--all-versions")
    assert code == 0 and len(json.loads(out)["groups"]) == 2, out


def test_the_job_id_follows_the_command_and_its_values():
    from lrtransfer.store import job_id

    base = ["trainer=command", "trainer.command='python -c pass --lr={lr}'"]
    ids = {job_id(compose(*base)), job_id(compose(*base, "+trainer.vars.heads=4")),
           job_id(compose("trainer=command", "trainer.command='python -c pass --lr={lr} --x=1'")),
           job_id(compose(*base, "+trainer.env.A=1")), job_id(compose()), job_id(compose(*base, "train.steps=100"))}
    assert len(ids) == 6
    same = {job_id(compose(*base)), job_id(compose(*base, "trainer.label=mine")), job_id(compose(*base, "trainer.parallel=4"))}
    assert len(same) == 1


def test_an_engine_job_reads_as_before_trainers_existed():
    """trainer=engine (the default) is in neither an engine job's record nor its identity (its pinned
    ids: tests/test_store.py); a command job's record leaves out the engine's groups instead."""
    from omegaconf import OmegaConf

    from lrtransfer.config import recorded, semantic

    engine = OmegaConf.to_container(compose(), resolve=True)
    assert "trainer" in engine and "trainer" not in recorded(engine) and "trainer" not in semantic(engine)
    assert {"model", "param", "optim", "data"} <= set(recorded(engine))
    command = OmegaConf.to_container(compose("trainer=command", "trainer.command='python -c pass'"), resolve=True)
    assert not {"model", "param", "optim", "data"} & set(recorded(command))
    assert semantic(command)["trainer"]["command"] == "python -c pass" and "label" not in semantic(command)["trainer"]


def test_plan_lists_the_commands_and_prices_them_from_finished_runs(cli, tmp_path, trainer):
    args = [*sweep_args(tmp_path, trainer), "width=32", "lr.log2_max=-7"]
    code, out, err = cli("sweep", *args, "--plan")
    assert code == 0, err
    assert f"$ {PY} {trainer} --lr=0.001953125 --width=32 --seed=0 --out=" in out
    assert "no time estimate" in out and not (tmp_path / "r").exists()
    assert cli("sweep", *args)[0] == 0
    code, out, err = cli("sweep", *args, "seed=1", "--plan")
    assert code == 0, err
    assert "--seed=1" in out and "1 finished job(s) of it" in out and "in-process" in out


def test_an_adaptive_sweep_launches_only_the_lrs_and_seeds_it_chooses(cli, tmp_path, trainer):
    log = tmp_path / "calls.log"
    args = [*sweep_args(tmp_path, trainer, "--drift=0.1"), "width=32,64,128", "lr.log2_min=-10", "lr.log2_max=-2",
            "lr.log2_step=1", "adaptive.max_seeds=2", f"+trainer.env.CALLS={log}"]
    code, out, err = cli("sweep", *args, "--until-decided", "--budget", "500")
    assert code == 0, err
    started = calls(log)
    trained = sum(len(r["runs"]) + len(r.get("failed_runs", [])) for r in
                  (json.loads(p.read_text()) for p in (tmp_path / "r").rglob("record.json")))
    assert len(started) == len(set(started)) == trained < 3 * 9 * 2
    assert "adaptive sweep:" in out and "of a budget of 500" in out and trained * 20 <= 500  # run-steps: 20 a run
    assert "round 2" in out, out  # past the coarse grid: LRs (or seeds) the sweep chose


# ---------------------------------------------------------------- nothing read from a results folder runs
def test_reading_commands_and_a_rerun_never_run_a_command_from_a_record(cli, tmp_path, trainer):
    args = [*sweep_args(tmp_path, trainer, "--drift=0.5"), "width=32,64"]  # widths apart: `predict` has a drift to read
    assert cli("sweep", *args)[0] == 0
    marker = tmp_path / "ran"
    for path in (tmp_path / "r").rglob("record.json"):  # a record edited to hold another command
        rec = json.loads(path.read_text())
        rec["config"]["trainer"]["command"] = f"touch {marker}"
        path.write_text(json.dumps(rec))
    for path in (tmp_path / "r").rglob("result.json"):
        doc = json.loads(path.read_text())
        doc["argv"] = ["touch", str(marker)]
        path.write_text(json.dumps(doc))
    for name in ("summary", "plot", "report", "list", "export"):
        assert cli(name, str(tmp_path / "r"))[0] == 0
    assert cli("predict", str(tmp_path / "r"), "--width", "128")[0] == 0
    code, out, _ = cli("sweep", *args)
    assert code == 0 and "2 already done" in out
    assert not marker.exists()


# ---------------------------------------------------------------- bad input: one line, exit 2, nothing run
@pytest.mark.parametrize("extra, says", [
    (["trainer.command='{PY} -c pass --n={widht}'"], "trainer.command: {widht} names no key 'widht' (did you mean 'width'?)"),
    (["trainer.command='{PY} -c pass --n={trainer.vars.heads}'"], "names no key 'trainer.vars.heads'"),
    (["trainer.command='{PY} -c pass --n={__import__(\"os\")}'"], "Call is not allowed in a placeholder"),
    (["trainer.command='{PY} -c pass --n={width.__class__}'"], "names no key 'width.__class__'"),
    (["trainer.command='no-such-program-here --lr={lr}'"], "program 'no-such-program-here' not found on PATH"),
    (["trainer.command='./train.sh {lr}'"], "program './train.sh' not found in"),
    (["trainer.command='{PY} -c pass'", "trainer.loss_pattern='step (?P<step>[0-9]+) (?P<l>.*)'"],
     "has no named group 'loss'"),
    (["trainer.command='{PY} -c pass'", "trainer.loss_pattern='step (?P<loss>[0-9]+'"], "does not compile"),
    (["trainer.command='{PY} -c pass'", "trainer.metrics_file=log.csv"], "trainer.metrics_file=log.csv needs trainer.loss_column"),
    (["trainer.command='{PY} -c pass'", "trainer.metrics_format=xml", "trainer.metrics_file=a", "trainer.loss_column=a"],
     "trainer.metrics_format='xml' is not one of"),
    ([], "trainer=command needs trainer.command"),
    (["trainer.command='{PY} -c \"pass'"], "cannot be split into words"),
    (["trainer.command='{PY} -c pass'", "trainer.cwd=/no/such/folder"], "trainer.cwd=/no/such/folder: no such folder"),
    (["trainer.command='{PY} -c pass'", "trainer.parallel=0"], "trainer.parallel=0 is out of range"),
    (["trainer.command='{PY} -c pass'", "model=transformer"], "model: trainer=command runs your own script"),
    (["trainer.command='{PY} -c pass'", "optim.weight_decay=0.1"], "optim.weight_decay: trainer=command runs your own"),
])
def test_bad_input_is_one_line_before_anything_runs(cli, tmp_path, extra, says):
    extra = [e.replace("{PY}", PY) for e in extra]
    code, out, err = cli("sweep", "trainer=command", *extra, f"results_dir={tmp_path / 'r'}")
    assert code == 2, (out, err)
    assert err.startswith("error: ") and says in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "r").exists()


# ---------------------------------------------------------------- the pieces
def test_a_template_renders_floats_as_floats_and_computes_without_eval():
    from lrtransfer.errors import ConfigError
    from lrtransfer.options.trainer.template import render

    values = {"width": 512, "lr": 2.0**-10, "log2_lr": -10.0, "trainer.vars.base": 256, "train.steps": 100, "x": 1.0}
    assert render("--m={width/256} --h={width//64} --lr={lr} --s={train.steps} --x={x}", values, "t") == \
        "--m=2.0 --h=8 --lr=0.0009765625 --s=100 --x=1.0"
    assert render("{width / trainer.vars.base} {2**log2_lr} {-log2_lr} {int(width*0.3)} {max(1, width//1024)}", values, "t") \
        == "2.0 0.0009765625 10.0 153 1"
    assert render("{{literal}} {{{width}}}", values, "t") == "{literal} {512}"
    for bad, says in [("{open('x')}", "Call is not allowed"), ("{width.real}", "names no key 'width.real'"),
                      ("{[1][0]}", "Subscript is not allowed"), ("{lambda: 1}", "Lambda is not allowed"),
                      ("{width/0}", "cannot be computed (ZeroDivisionError"), ("{2**100000}", "beyond 1024"),
                      ("{width", "has no closing"), ("x}", "closes no placeholder"), ("{}", "an empty placeholder"),
                      ("{'a'*3}", "arithmetic on 'a'")]:
        with pytest.raises(ConfigError, match=None) as e:
            render(bad, values, "t")
        assert says in str(e.value), (bad, str(e.value))


def test_the_final_loss_window_and_divergence_follow_the_engines_rules():
    from lrtransfer.options.trainer.curve import run_result, thinned

    points = [(s, 10.0 - s * 0.1) for s in range(100)]
    r = run_result(points, 1.5, log2_lr=-3.0, seed=2, grid={}, final_window=0.1, history_points=11, diverge_factor=20)
    assert r["final_loss"] == pytest.approx(sum(10.0 - s * 0.1 for s in range(90, 100)) / 10)
    assert r["history_step"] == [0, 10, 20, 30, 40, 50, 59, 69, 79, 89, 99]
    assert r["eval_loss"] == 1.5 and r["lr"] == 0.125 and not r["diverged"]
    sparse = [(s, 1.0 + s) for s in range(0, 101, 10)]  # logged every 10 of 101 steps: the last 11 steps hold 90 and 100
    assert run_result(sparse, None, log2_lr=0.0, seed=0, grid={}, final_window=0.1, history_points=100,
                      diverge_factor=1000)["final_loss"] == pytest.approx((91 + 101) / 2)
    boom = run_result([(0, 1.0), (1, 0.9), (2, 25.0), (3, float("nan"))], None, log2_lr=0.0, seed=0, grid={"a.b": 1.0},
                      final_window=0.1, history_points=100, diverge_factor=20)
    assert boom["diverged"] and boom["diverged_step"] == 2 and boom["history_loss"] == [1.0, 0.9, 25.0]
    assert boom["grid"] == {"a.b": 1.0} and boom["final_loss"] is None
    assert thinned(5, 3) == [0, 2, 4] and thinned(1, 100) == [0] and thinned(0, 3) == []


def test_a_csv_is_read_as_it_grows_and_tensorboard_events_once_written(tmp_path):
    from lrtransfer.options.trainer import readers

    path = tmp_path / "log.csv"
    table = readers.metrics_reader(path, "auto", "train/loss", "iter", "val/loss")
    table.poll()  # not there yet: nothing, no error
    path.write_text("step,iter,train/loss,val/loss\n0,0,4.0,4.1\n1,10,3.0")
    table.poll()
    assert table.curve.points == [(0, 4.0)]  # the half-written line waits
    with open(path, "a") as f:
        f.write(",3.2\n2,20,nan,\n")
    table.poll()
    assert table.curve.points[:2] == [(0, 4.0), (10, 3.0)] and table.curve.eval_loss == 3.2
    assert table.finish().points[-1][0] == 20
    with pytest.raises(readers.ReadError, match="has no column 'loss'"):
        readers.metrics_reader(path, "csv", "loss", None, None).finish()

    from torch.utils.tensorboard import SummaryWriter

    with SummaryWriter(log_dir=str(tmp_path / "tb")) as w:
        for step in range(5):
            w.add_scalar("train/loss", 5.0 - step, step)
        w.add_scalar("val/loss", 1.5, 4)
    curve = readers.metrics_reader(tmp_path / "tb", "auto", "train/loss", None, "val/loss").finish()
    assert curve.points == [(s, 5.0 - s) for s in range(5)] and curve.eval_loss == 1.5
    with pytest.raises(readers.ReadError, match="no tag 'loss'.*tags: train/loss, val/loss"):
        readers.metrics_reader(tmp_path / "tb", "auto", "loss", None, None).finish()


def test_the_default_pattern_reads_the_common_forms():
    from lrtransfer.options.trainer import readers
    from lrtransfer.options.trainer.command import DEFAULT_PATTERN

    lines = readers.Lines(readers.compile_pattern(DEFAULT_PATTERN, "p"))
    for text in ["step 0 loss 4.2", "iter 10: loss 3.9876, time 12.3ms, mfu -100.00%", "step=20, loss=nan",
                 "step 30: train loss 3.1, val loss 3.3", "Step 40 | loss: 1e-2", "epoch 1 done", "iteration 7 loss 9"]:
        lines.line(text)
    points = lines.curve.points
    assert points[:2] == [(0, 4.2), (10, 3.9876)] and points[2][0] == 20 and points[2][1] != points[2][1]  # nan
    assert points[3] == (30, 3.1) and lines.curve.eval_loss == 3.3 and len(points) == 4


# ---------------------------------------------------------------- launchers: the same records
def runs_by_job(root: Path) -> dict:
    return {p.parent.name: json.loads(p.read_text())["runs"] for p in root.glob("*/record.json")}


@pytest.fixture(scope="module")
def toy_study(tmp_path_factory):
    """A command study in-process (the reference), and its overrides for other launchers."""
    from lrtransfer.sweeps.launch import launch

    root = tmp_path_factory.mktemp("toy")
    script = root / "train.py"
    script.write_text(TRAINER)
    overrides = ["trainer=command", command(script, "--drift=0.5"), *LRS, "lr.log2_step=4", "train.steps=20",
                 "engine.progress=false", "width=32,64", "name=s"]
    launch([*overrides, f"results_dir={root / 'in'}"])
    found = runs_by_job(root / "in" / "s")
    assert len(found) == 2
    return overrides, found


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("submitit") is None, reason="submitit not installed")
def test_the_processes_launcher_writes_the_same_records(tmp_path, toy_study):
    overrides, reference = toy_study
    done = subprocess.run([*lrtransfer_cmd(), "sweep", *overrides, "hydra/launcher=processes", f"results_dir={tmp_path}"],
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    assert runs_by_job(tmp_path / "s") == reference


@pytest.mark.cluster
def test_a_slurm_cluster_writes_the_same_records(tmp_path, toy_study, slurm):
    overrides, reference = toy_study
    done = sweep(slurm, *overrides, *SLURM, f"results_dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert runs_by_job(tmp_path / "s") == reference


@pytest.mark.slow
def test_the_bench_runs_and_prints_both_figures():
    done = subprocess.run([sys.executable, "scripts/bench_command.py", "--runs", "2", "--repeats", "1"], capture_output=True,
                          text=True, timeout=900, cwd=Path(__file__).resolve().parents[1])
    assert done.returncode == 0, done.stderr
    assert "the runner adds" in done.stdout and "of overhead a round" in done.stdout


@pytest.mark.cluster
def test_a_ray_cluster_writes_the_same_records(tmp_path, toy_study, ray_head):
    overrides, reference = toy_study
    done = sweep(ray_head, *overrides, "hydra/launcher=ray_cluster",
                 f"hydra.launcher.ray.init.address={ray_head['LRT_RAY_ADDRESS']}", f"results_dir={tmp_path}")
    assert done.returncode == 0, done.stderr
    assert runs_by_job(tmp_path / "s") == reference

"""Nothing is lost: interrupted, crashed, concurrent and repeated sweeps."""

from __future__ import annotations

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lrtransfer.training import build, engine, stop
from lrtransfer.training.runs import Run
from lrtransfer.sweeps.checkpoint import FileCheckpoint
from tests.conftest import TINY, lrtransfer_cmd, run_cli, typed


def runs_of(folder: Path) -> dict[str, list]:
    return {p.parent.name: json.loads(p.read_text())["runs"] for p in folder.glob("*/record.json")}


@pytest.mark.parametrize(
    "batched, data, param, optim, extra",
    # modular, spectral: the power iteration's warm start is state too, saved with the checkpoint;
    # muon: its momentum and its AdamW part's moments; bf16: the weights' bfloat16 copies are made
    # again from the float32 masters, through the direction path (modular) and the one pass per
    # run (width 192: hidden matrices past passes.PER_RUN_MIN)
    [(True, "teacher", "standard", "adam", ()), (False, "teacher", "standard", "adam", ()),
     (True, "cifar10", "standard", "adam", ()), (True, "teacher", "modular", "adam", ()),
     (True, "teacher", "spectral", "muon", ()),
     (True, "teacher", "standard", "adam", ("train.dtype=bf16", "width=192")),
     (True, "teacher", "modular", "adam", ("train.dtype=bf16",))],
)
def test_resume_from_checkpoint_equals_uninterrupted(tmp_path, monkeypatch, batched, data, param, optim, extra):
    over = ["width=16", "train.steps=40", "train.batch_size=8", "data.eval_size=32", f"engine.batched={batched}",
            f"param={param}", f"optim={optim}", *extra]
    if data == "cifar10":  # batches drawn from files, augmented: they too must continue exactly
        from tests.datafiles import write_cifar

        write_cifar(tmp_path / "data")
        over += ["data=cifar10", f"data.root={tmp_path / 'data'}", "data.augment=true"]
    cfg = typed(*over)
    runs = [Run(log2_lr=e, seed=0) for e in (-9, -6, 6)]  # the last one diverges
    reference = engine.train(build.job(cfg), runs)

    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)
    seen = []

    def interrupt_midway(n):
        seen.append(n)
        if sum(seen) >= 45:  # past the first run-chunk when one run at a time
            stop.request()

    monkeypatch.setattr(stop, "_requested", False)
    with pytest.raises(engine.Interrupted):
        engine.train(build.job(cfg), runs, progress=interrupt_midway, checkpoint=ckpt)
    assert ckpt.path.exists()
    monkeypatch.setattr(stop, "_requested", False)
    total = []
    resumed = engine.train(build.job(cfg), runs, progress=total.append, checkpoint=ckpt)
    assert sum(total) == 40 * len(runs)  # the progress bar ends full
    assert [vars(r) for r in resumed] == [vars(r) for r in reference]


def test_a_checkpoint_of_other_runs_is_ignored(tmp_path):
    cfg = typed("width=16", "train.steps=10", "train.batch_size=8", "data.eval_size=32")
    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)
    engine.train(build.job(cfg), [Run(log2_lr=-8, seed=0)], checkpoint=ckpt)
    other = [Run(log2_lr=-7, seed=0)]
    assert [vars(r) for r in engine.train(build.job(cfg), other, checkpoint=ckpt)] == [vars(r) for r in engine.train(build.job(cfg), other)]


def test_same_config_same_records(cli, tmp_path):
    assert cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=a")[0] == 0
    assert cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=b")[0] == 0
    a, b = runs_of(tmp_path / "a"), runs_of(tmp_path / "b")
    assert a == b and len(a) == 2


def test_a_crashing_job_is_recorded_and_the_sweep_goes_on(cli, tmp_path, monkeypatch):
    real = build.job

    def flaky(cfg, device=None, **kw):
        if cfg.width == 32 and "data" not in kw:  # when the job builds (planning sizes jobs on a prebuilt task)
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(cfg, device, **kw)

    monkeypatch.setattr(build, "job", flaky)
    code, out, _ = cli("sweep", *TINY, "width=16,32,48", f"results_dir={tmp_path}", "name=s")
    assert code == 1
    assert "3 job(s) ran, 0 already done, 1 failed" in out and "width=32: RuntimeError: CUDA out of memory" in out
    recs = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/record.json")]
    status = {r["config"]["width"]: r["status"] for r in recs}
    assert status == {16: "complete", 32: "failed", 48: "complete"}
    failed = next(r for r in recs if r["status"] == "failed")
    assert "RuntimeError: CUDA out of memory" in failed["error"] and "Traceback" in failed["traceback"]
    # the failed job is retried by a re-run; the others are not
    monkeypatch.setattr(build, "job", real)
    code, out, _ = cli("sweep", *TINY, "width=16,32,48", f"results_dir={tmp_path}", "name=s")
    assert code == 0 and "1 job(s) ran, 2 already done" in out


def test_sigint_then_rerun_computes_exactly_the_missing_jobs(cli, tmp_path):
    """A real process interrupted after its first job; the re-run does the rest, resuming the cut one
    (three jobs: one done, one cut, one not started, when the signal comes as soon as it may)."""
    args = ["sweep", "width=16,24,32", "train.steps=3000", "train.batch_size=16", "data.eval_size=64",
            "lr.log2_min=-9", "lr.log2_max=-7", "engine.threads=1", "engine.checkpoint_s=0.2",
            "engine.progress=false", f"results_dir={tmp_path}", "name=s"]
    proc = subprocess.Popen(lrtransfer_cmd() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    def cut() -> bool:  # one job done, another past a checkpoint (a fixed wait missed it on a loaded machine)
        folders = [p.parent for p in (tmp_path / "s").glob("*/checkpoint.pt")]
        return bool(list((tmp_path / "s").glob("*/record.json"))) and any(not (f / "record.json").exists() for f in folders)

    while not cut() and time.time() < deadline:
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    done = {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "s").glob("*/record.json")}
    assert 1 <= len(done) < 3
    assert list((tmp_path / "s").glob("*/checkpoint.pt")), "the interrupted job saved its state"

    code, out, err = cli(*args)  # the rerun in-process: what it resumes from is on disk
    assert code == 0, err
    assert f"{3 - len(done)} job(s) ran, {len(done)} already done" in out
    after = {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "s").glob("*/record.json")}
    assert len(after) == 3 and all(after[k] == v for k, v in done.items())
    assert not list((tmp_path / "s").glob("*/checkpoint.pt"))
    resumed = [p for p in (tmp_path / "s").glob("*/job.log") if "resuming from" in p.read_text()]
    assert len(resumed) == 1 and resumed[0].parent.name not in done


@pytest.mark.parametrize("widths", [["16,24,32", "40,48,16"],
                                    pytest.param(["16,24,32", "24,32,40", "32,40,16"], marks=pytest.mark.slow)],
                         ids=["2", "3"])  # three sweeps at once: the same mechanism, twice the time (pytest -m slow)
def test_overlapping_sweeps_train_every_job_exactly_once(tmp_path, widths):
    common = ["sweep", "train.steps=300", "train.batch_size=16", "data.eval_size=64", "lr.log2_min=-9",
              "lr.log2_max=-7", "engine.threads=1", "engine.progress=false", f"results_dir={tmp_path}", "name=s"]
    procs = [subprocess.Popen(lrtransfer_cmd() + common + [f"width={w}"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for w in widths]
    for p in procs:
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    recs = runs_of(tmp_path / "s")
    assert len(recs) == len({w for ws in widths for w in ws.split(",")})  # every record readable and complete
    logs = list((tmp_path / "s").glob("*/job.log"))
    assert len(logs) == len(recs)
    for log in logs:  # each job trained once, and its log is its own
        lines = log.read_text().splitlines()
        assert sum("runs on" in line for line in lines) == 1, lines
        assert all(log.parent.name in line for line in lines if "lrtransfer.sweeps.job" in line), lines
    assert not list((tmp_path / "s").rglob("*.tmp"))


class Payload:
    """Whoever unpickles this creates a file: what a hostile checkpoint would do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return open, (str(self.marker), "w")


def test_a_malicious_checkpoint_does_not_run(cli, tmp_path):
    import torch

    args = ("sweep", *TINY, "width=16", f"results_dir={tmp_path}", "name=s")
    assert cli(*args)[0] == 0
    (record,) = (tmp_path / "s").glob("*/record.json")
    expected = json.loads(record.read_text())["runs"]
    record.unlink()
    marker = tmp_path / "pwned"
    torch.save({"chunks": Payload(marker)}, record.parent / "checkpoint.pt")
    code, out, err = cli(*args)
    assert code == 0 and "1 job(s) ran" in out
    assert not marker.exists(), "the checkpoint ran code"
    assert "ignoring checkpoint" in err and "the job starts afresh" in err  # said on screen, not only in job.log
    assert json.loads(record.read_text())["runs"] == expected
    assert not (record.parent / "checkpoint.pt").exists()


def test_a_checkpoint_of_another_layout_is_reported_removed_and_recomputed(tmp_path, capsys):
    import torch

    cfg = typed("width=16", "train.steps=10", "train.batch_size=8", "data.eval_size=32")
    runs = [Run(log2_lr=-8, seed=0)]
    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)
    reference = engine.train(build.job(cfg), runs, checkpoint=ckpt)  # leaves its last checkpoint behind
    state = torch.load(ckpt.path, weights_only=True)  # everything the engine saves loads safely
    del state["ensemble"]["history"]  # a checkpoint of another version: it loads, but does not fit
    torch.save(state, ckpt.path)
    capsys.readouterr()
    again = engine.train(build.job(cfg), runs, checkpoint=FileCheckpoint(ckpt.path, interval_s=0))
    assert [vars(r) for r in again] == [vars(r) for r in reference]
    assert "ignoring checkpoint" in capsys.readouterr().err and not ckpt.path.exists()


def test_a_failed_checkpoint_write_is_reported_and_training_goes_on(tmp_path, monkeypatch, capsys):
    import errno

    import torch

    def disk_full(obj, f, *a, **kw):
        Path(f).write_bytes(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    cfg = typed("width=16", "train.steps=10", "train.batch_size=8", "data.eval_size=32")
    runs = [Run(log2_lr=-8, seed=0)]
    reference = engine.train(build.job(cfg), runs)
    monkeypatch.setattr(torch, "save", disk_full)
    got = engine.train(build.job(cfg), runs, checkpoint=FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9))
    assert [vars(r) for r in got] == [vars(r) for r in reference]
    err = capsys.readouterr().err
    assert err.count("could not save checkpoint") == 1 and "No space left on device" in err
    assert list(tmp_path.iterdir()) == []  # no checkpoint, no .tmp


def test_a_full_disk_when_writing_a_record_keeps_finished_records(cli, tmp_path, monkeypatch):
    import errno

    from lrtransfer.sweeps import job

    real = job.write_record

    def full_for_width_32(folder, record):
        if record["config"]["width"] == 32:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(folder, record)

    monkeypatch.setattr(job, "write_record", full_for_width_32)
    code, out, err = cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=s")
    assert code == 1 and "Traceback" not in err
    assert "could not write its record: No space left on device" in out
    assert len(runs_of(tmp_path / "s")) == 1 and not list((tmp_path / "s").rglob("*.tmp"))
    monkeypatch.setattr(job, "write_record", real)
    code, out, _ = cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=s")
    assert code == 0 and "1 job(s) ran, 1 already done" in out


def test_files_get_the_umask_mode(cli, tmp_path):
    old = os.umask(0o022)
    try:
        assert cli("sweep", *TINY, "width=16", f"results_dir={tmp_path}", "name=s")[0] == 0
    finally:
        os.umask(old)
    for path in [*(tmp_path / "s").glob("*/record.json"), tmp_path / "s" / "multirun.yaml"]:
        assert stat.S_IMODE(path.stat().st_mode) == 0o644, path


def test_the_interrupt_message_says_whether_a_rerun_resumes():
    from lrtransfer.sweeps.multirun import SweepReport, _interrupted_message

    saved = SweepReport(returns=[{"status": "complete"}, {"status": "interrupted", "checkpoint": True}])
    assert "1 running job(s) saved a checkpoint: re-run the same command to resume them" in _interrupted_message(saved)
    unsaved = SweepReport(returns=[{"status": "interrupted", "checkpoint": False}])
    assert "no checkpoint was saved" in _interrupted_message(unsaved)


# ---------------------------------------------------------------- interrupts under worker launchers
LONG = ["width=16,24", "train.steps=3000", "train.batch_size=16", "data.eval_size=64", "lr.log2_min=-9",
        "lr.log2_max=-7", "engine.checkpoint_s=0.2", "engine.progress=false", "name=s"]
LAUNCHERS = {"parallel": ["hydra/launcher=parallel", "hydra.launcher.n_jobs=2"], "processes": ["hydra/launcher=processes"]}


def _start_and_wait_until_training(tmp_path: Path, launcher: str) -> subprocess.Popen:
    args = ["sweep", *LONG, *LAUNCHERS[launcher], f"results_dir={tmp_path}"]
    proc = subprocess.Popen(lrtransfer_cmd() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        logs = [p.read_text() for p in (tmp_path / "s").glob("*/job.log")]
        if sum("runs on" in t for t in logs) == 2:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # past a checkpoint of each job
    assert proc.poll() is None, proc.communicate()
    return proc


# the processes launcher's case is slow (40 s): the parallel one keeps the behaviour in every run of the suite
@pytest.mark.parametrize("launcher, sig", [("parallel", signal.SIGTERM),
                                           pytest.param("processes", signal.SIGINT, marks=pytest.mark.slow)])
def test_a_signal_to_the_sweep_checkpoints_its_workers_and_a_rerun_resumes_bit_for_bit(tmp_path, cli, launcher, sig):
    pytest.importorskip({"parallel": "hydra_plugins.hydra_joblib_launcher",
                         "processes": "hydra_plugins.hydra_submitit_launcher"}[launcher])
    proc = _start_and_wait_until_training(tmp_path / "cut", launcher)
    proc.send_signal(sig)  # to the sweep's process only, as `kill` or a scheduler would
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "2 running job(s) saved a checkpoint" in err and "Traceback" not in err
    assert len(list((tmp_path / "cut" / "s").glob("*/checkpoint.pt"))) == 2
    assert not list((tmp_path / "cut" / "s").glob("*/record.json"))

    code, out, err = cli("sweep", *LONG, *LAUNCHERS[launcher], f"results_dir={tmp_path / 'cut'}")
    assert code == 0 and "2 job(s) ran" in out, err
    assert all("resuming from" in p.read_text() for p in (tmp_path / "cut" / "s").glob("*/job.log"))
    assert cli("sweep", *LONG, f"results_dir={tmp_path / 'whole'}")[0] == 0  # in-process, uninterrupted
    assert runs_of(tmp_path / "cut" / "s") == runs_of(tmp_path / "whole" / "s")


def test_a_killed_sweep_stops_its_workers(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    proc = _start_and_wait_until_training(tmp_path, "parallel")
    workers = [int(p) for p in Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()]
    proc.kill()
    proc.communicate()
    deadline = time.time() + 60
    while time.time() < deadline and len(list((tmp_path / "s").glob("*/checkpoint.pt"))) < 2:
        time.sleep(0.2)
    assert len(list((tmp_path / "s").glob("*/checkpoint.pt"))) == 2  # each worker saved its job
    assert not list((tmp_path / "s").glob("*/record.json"))
    while time.time() < deadline and any(_training(pid) for pid in workers):
        time.sleep(0.2)
    assert not any(_training(pid) for pid in workers), "a worker went on after its sweep died"


def _training(pid: int) -> bool:
    """Whether a loky worker process is still alive (loky's own manager processes are not counted)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return b"popen_loky" in cmd and state != "Z"


ADAPTIVE = ["sweep", *TINY, "width=16,32", "--until-decided", "--budget", "100", "name=s"]  # round 1: two jobs


@pytest.fixture(scope="module")
def adaptive_alone(tmp_path_factory) -> dict[str, list]:
    """The runs of ADAPTIVE's sweep left alone: what each sweep cut or crowded below must end with
    (the same config gives the same records: test_same_config_same_records)."""
    root = tmp_path_factory.mktemp("alone")
    assert run_cli(*ADAPTIVE, f"results_dir={root}") == 0
    found = runs_of(root / "s")
    assert len(found) > 2  # past round 1
    return found


def test_a_full_disk_mid_round_is_one_line_and_a_rerun_ends_as_an_uninterrupted_sweep(cli, tmp_path, monkeypatch,
                                                                                    adaptive_alone):
    """Issue 40, case 4: Hydra cannot write a job's .hydra/config.yaml in an adaptive sweep's second
    round (a full disk leaves it empty). One line, exit 1, no folder without a record; the re-run
    replays the rounds and ends with the records of a sweep never cut."""
    import errno

    from hydra.core import utils

    real, written = utils._save_config, []

    def full_disk(cfg, filename, output_dir):
        written.append(filename)
        if written.count("config.yaml") == 3 and filename == "config.yaml":  # round 1 has two jobs
            output_dir.mkdir(parents=True, exist_ok=True)
            (output_dir / filename).write_text("")
            raise OSError(errno.ENOSPC, "No space left on device", str(output_dir / filename))
        return real(cfg, filename, output_dir)

    args = ADAPTIVE
    monkeypatch.setattr(utils, "_save_config", full_disk)
    code, out, err = cli(*args, f"results_dir={tmp_path / 'cut'}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith("error: could not write ") and "config.yaml (No space left on device)" in lines[0]
    assert "re-run the same command" in lines[0]
    folders = [p for p in (tmp_path / "cut" / "s").iterdir() if p.is_dir()]
    assert len(folders) == 2 and all((p / "record.json").exists() for p in folders)  # round 1's, nothing half-written
    monkeypatch.setattr(utils, "_save_config", real)
    assert cli(*args, f"results_dir={tmp_path / 'cut'}")[0] == 0
    assert runs_of(tmp_path / "cut" / "s") == adaptive_alone


def test_an_adaptive_sweep_waits_for_a_job_another_sweep_is_running(cli, tmp_path, adaptive_alone):
    """Issue 40, case 6: two adaptive sweeps into one folder. The one that meets a job the other is
    running (its lock held, here by this test) waits for it, then trains it when the other stopped
    without a record; it ends as a sweep alone would, never with "a job failed"."""
    import fcntl
    import re
    import threading

    args = ADAPTIVE
    plan = cli(*args[:1], "--plan", *args[1:], f"results_dir={tmp_path / 'shared'}")[1]
    first, second = re.findall(r"missing .* run-steps\s+(\w{12})", plan)  # round 1's jobs, in launch order
    lock = tmp_path / "shared" / "s" / second / ".lock"
    lock.parent.mkdir(parents=True)

    def release_once_the_first_is_done(held) -> None:  # the sweep has then met the second, held
        deadline = time.time() + 120
        while not (tmp_path / "shared" / "s" / first / "record.json").exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(1.0)
        fcntl.flock(held, fcntl.LOCK_UN)

    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the other sweep's running job holds it
        release = threading.Thread(target=release_once_the_first_is_done, args=(held,))
        release.start()
        code, out, err = cli(*args, f"results_dir={tmp_path / 'shared'}")
        release.join()
    assert code == 0 and "no complete record" not in out + err and "failed" not in out, out + err
    assert runs_of(tmp_path / "shared" / "s") == adaptive_alone


def _descendants(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        try:
            kids = [int(c) for c in Path(f"/proc/{p}/task/{p}/children").read_text().split()]
        except OSError:
            kids = []
        out += kids
        todo += kids
    return out


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except OSError:
        return False


@pytest.mark.slow  # three processes that import torch and train: ~20 s
def test_a_python_sweep_killed_under_processes_stops_its_workers_and_leaves_no_submitit_folder(tmp_path):
    """Issue 40, case 10: `lrtransfer.sweep(...)` (no CLI, so no signal handlers) under
    hydra/launcher=processes, killed with -9: its workers save their jobs and exit, and submitit's
    files are not in the study folder."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    script = "import sys, lrtransfer; lrtransfer.sweep(sys.argv[1:])"
    args = [*LONG, *LAUNCHERS["processes"], f"results_dir={tmp_path}"]
    proc = subprocess.Popen([sys.executable, "-c", script, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while time.time() < deadline and proc.poll() is None:
        if sum("runs on" in p.read_text() for p in (tmp_path / "s").glob("*/job.log")) == 2:
            break
        time.sleep(0.2)
    time.sleep(1.0)  # past a checkpoint of each job
    assert proc.poll() is None, proc.communicate()
    workers = _descendants(proc.pid)
    proc.kill()
    proc.communicate()
    deadline = time.time() + 60
    while time.time() < deadline and any(_alive(pid) for pid in workers):
        time.sleep(0.2)
    assert not list((tmp_path / "s").glob("*/record.json")), "a worker trained on to the end after its sweep died"
    assert not any(_alive(pid) for pid in workers), "a worker went on after its sweep died"
    assert len(list((tmp_path / "s").glob("*/checkpoint.pt"))) == 2  # each saved its job on the way out
    assert not (tmp_path / "s" / ".submitit").exists()


FULL_DISK_IN_THE_WORKER = """
import errno
from hydra.core import utils

def full(cfg, filename, output_dir):
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / filename).write_text("")
    raise OSError(errno.ENOSPC, "No space left on device")

utils._save_config = full
"""


@pytest.mark.slow  # two sweeps of submitit workers, each importing torch: ~1.5 min each on a loaded machine
def test_a_full_disk_under_the_submitit_launcher_is_one_line(tmp_path):
    """Hydra cannot write a job's .hydra/ in a submitit worker (hydra/launcher=processes, as slurm's
    workers): it came back as submitit's FailedJobError, a 96-line traceback in the sweep. Now the
    same line as under the in-process launcher (exit 1), no folder without a record left behind; the
    re-run, with room again, computes every job. (The workers' disk fills: a sitecustomize on their
    path, which only processes started after it are given.)"""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "sitecustomize.py").write_text(FULL_DISK_IN_THE_WORKER)
    args = ["sweep", *TINY, "width=16,32", "hydra/launcher=processes", f"results_dir={tmp_path / 'r'}", "name=s"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path / "full"), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(lrtransfer_cmd() + args, capture_output=True, text=True, timeout=300, env=env)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode == 1 and len(lines) == 1, done.stderr
    assert lines[0].startswith(f"error: could not write in {tmp_path / 'r' / 's'} (No space left on device): the sweep "
                               "stopped, every finished record kept (0 of the 2 job(s) it was launching finished)")
    assert [p.name for p in (tmp_path / "r" / "s").iterdir()] == ["multirun.yaml"]  # nothing half-written
    done = subprocess.run(lrtransfer_cmd() + args, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and len(list((tmp_path / "r" / "s").glob("*/record.json"))) == 2, done.stderr


WORKER_TRACE = """Job (task=0) failed during processing with trace:
----------------------
Traceback (most recent call last):
  File ".../hydra/core/utils.py", line 77, in _save_config
    with open(str(output_dir / filename), "w", encoding="utf-8") as file:
OSError: [Errno 28] No space left on device

----------------------
You can check full logs with 'job.stderr(0)' and 'job.stdout(0)'or at paths:
  - /tmp/lrtransfer-submitit/x/1_0_log.err"""


def test_a_worker_that_cannot_write_is_the_sweeps_one_line(cli, tmp_path, monkeypatch):
    """What submitit hands back when a worker's Hydra cannot write (its FailedJobError, the worker's
    traceback as its text), as the in-process sweep says a full disk: one line, exit 1 (the slow test
    above fills a real worker's disk)."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra.core.plugins import Plugins

    Plugins.instance()  # Hydra's scan of its plugins runs their modules again: the class patched is the one it keeps
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
    from submitit.core.utils import FailedJobError

    def fails(self, job_overrides, initial_job_idx):
        raise FailedJobError(WORKER_TRACE)

    monkeypatch.setattr(BaseSubmititLauncher, "launch", fails)
    code, out, err = cli("sweep", *TINY, "width=16,32", "hydra/launcher=processes", f"results_dir={tmp_path / 'r'}", "name=s")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 1 and len(lines) == 1 and "Traceback" not in err, err
    assert lines[0] == (f"error: could not write in {tmp_path / 'r' / 's'} (No space left on device): the sweep stopped, "
                        "every finished record kept (0 of the 2 job(s) it was launching finished); free some space (or "
                        "set results_dir=PATH) and re-run the same command to compute the rest")

"""Nothing is lost: interrupted, crashed, concurrent and repeated sweeps."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from lrtransfer import engine, stop
from lrtransfer.engine import Run
from lrtransfer.checkpoint import FileCheckpoint
from tests.conftest import TINY, lrtransfer_cmd, typed


def runs_of(folder: Path) -> dict[str, list]:
    return {p.parent.name: json.loads(p.read_text())["runs"] for p in folder.glob("*/record.json")}


@pytest.mark.parametrize(
    "batched, data, param",
    # modular: the power iteration's warm start is state too, saved with the checkpoint
    [(True, "teacher", "standard"), (False, "teacher", "standard"), (True, "cifar10", "standard"),
     (True, "teacher", "modular")],
)
def test_resume_from_checkpoint_equals_uninterrupted(tmp_path, monkeypatch, batched, data, param):
    over = ["width=16", "train.steps=40", "train.batch_size=8", "data.eval_size=32", f"engine.batched={batched}",
            f"param={param}"]
    if data == "cifar10":  # batches drawn from files, augmented: they too must continue exactly
        from tests.datafiles import write_cifar

        write_cifar(tmp_path / "data")
        over += ["data=cifar10", f"data.root={tmp_path / 'data'}", "data.augment=true"]
    cfg = typed(*over)
    runs = [Run(lr=2.0**e, seed=0) for e in (-9, -6, 6)]  # the last one diverges
    reference = engine.train(cfg, runs)

    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)
    seen = []

    def interrupt_midway(n):
        seen.append(n)
        if sum(seen) >= 45:  # past the first run-chunk when one run at a time
            stop.request()

    monkeypatch.setattr(stop, "_requested", False)
    with pytest.raises(engine.Interrupted):
        engine.train(cfg, runs, progress=interrupt_midway, checkpoint=ckpt)
    assert ckpt.path.exists()
    monkeypatch.setattr(stop, "_requested", False)
    total = []
    resumed = engine.train(cfg, runs, progress=total.append, checkpoint=ckpt)
    assert sum(total) == 40 * len(runs)  # the progress bar ends full
    assert [vars(r) for r in resumed] == [vars(r) for r in reference]


def test_a_checkpoint_of_other_runs_is_ignored(tmp_path):
    cfg = typed("width=16", "train.steps=10", "train.batch_size=8", "data.eval_size=32")
    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)
    engine.train(cfg, [Run(lr=2.0**-8, seed=0)], checkpoint=ckpt)
    other = [Run(lr=2.0**-7, seed=0)]
    assert [vars(r) for r in engine.train(cfg, other, checkpoint=ckpt)] == [vars(r) for r in engine.train(cfg, other)]


def test_same_config_same_records(cli, tmp_path):
    assert cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=a")[0] == 0
    assert cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path}", "name=b")[0] == 0
    a, b = runs_of(tmp_path / "a"), runs_of(tmp_path / "b")
    assert a == b and len(a) == 2


def test_a_crashing_job_is_recorded_and_the_sweep_goes_on(cli, tmp_path, monkeypatch):
    real = engine.train

    def flaky(cfg, runs, **kw):
        if cfg.width == 32:
            raise RuntimeError("CUDA out of memory (simulated)")
        return real(cfg, runs, **kw)

    monkeypatch.setattr(engine, "train", flaky)
    code, out, _ = cli("sweep", *TINY, "width=16,32,48", f"results_dir={tmp_path}", "name=s")
    assert code == 1
    assert "3 job(s) ran, 0 already done, 1 failed" in out and "width=32: RuntimeError: CUDA out of memory" in out
    recs = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/record.json")]
    status = {r["config"]["width"]: r["status"] for r in recs}
    assert status == {16: "complete", 32: "failed", 48: "complete"}
    failed = next(r for r in recs if r["status"] == "failed")
    assert "RuntimeError: CUDA out of memory" in failed["error"] and "Traceback" in failed["traceback"]
    # the failed job is retried by a re-run; the others are not
    monkeypatch.setattr(engine, "train", real)
    code, out, _ = cli("sweep", *TINY, "width=16,32,48", f"results_dir={tmp_path}", "name=s")
    assert code == 0 and "1 job(s) ran, 2 already done" in out


def test_sigint_then_rerun_computes_exactly_the_missing_jobs(tmp_path):
    """A real process interrupted after its first job; the re-run does the rest, resuming the cut one."""
    args = ["sweep", "width=16,24,32,40", "train.steps=3000", "train.batch_size=16", "data.eval_size=64",
            "lr.log2_min=-9", "lr.log2_max=-7", "engine.threads=1", "engine.checkpoint_s=0.2",
            "engine.progress=false", f"results_dir={tmp_path}", "name=s"]
    proc = subprocess.Popen(lrtransfer_cmd() + args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 240
    while not list((tmp_path / "s").glob("*/record.json")) and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)  # well into the second job, past a checkpoint
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "interrupted" in err and "Traceback" not in err
    done = {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "s").glob("*/record.json")}
    assert 1 <= len(done) < 4
    assert list((tmp_path / "s").glob("*/checkpoint.pt")), "the interrupted job saved its state"

    rerun = subprocess.run(lrtransfer_cmd() + args, capture_output=True, text=True, timeout=600)
    assert rerun.returncode == 0, rerun.stderr
    assert f"{4 - len(done)} job(s) ran, {len(done)} already done" in rerun.stdout
    after = {p.parent.name: p.stat().st_mtime_ns for p in (tmp_path / "s").glob("*/record.json")}
    assert len(after) == 4 and all(after[k] == v for k, v in done.items())
    assert not list((tmp_path / "s").glob("*/checkpoint.pt"))
    resumed = [p for p in (tmp_path / "s").glob("*/job.log") if "resuming from" in p.read_text()]
    assert len(resumed) == 1 and resumed[0].parent.name not in done


def test_two_sweeps_into_one_folder_corrupt_nothing(tmp_path):
    common = ["sweep", "train.steps=300", "train.batch_size=16", "data.eval_size=64", "lr.log2_min=-9",
              "lr.log2_max=-7", "engine.threads=1", "engine.progress=false", f"results_dir={tmp_path}", "name=s"]
    a = subprocess.Popen(lrtransfer_cmd() + common + ["width=16,24,32"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    b = subprocess.Popen(lrtransfer_cmd() + common + ["width=24,32,40"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for p in (a, b):
        _, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
    recs = runs_of(tmp_path / "s")
    assert len(recs) == 4  # widths 16, 24, 32, 40: every record readable and complete
    assert not list((tmp_path / "s").rglob("*.tmp"))

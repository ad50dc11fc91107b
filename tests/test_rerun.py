"""`--rerun` around checkpoints: a rerun recomputes a job from its first step, except where it
resumes itself; the complete record it replaces stays until the new one is written."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lrtransfer.sweeps import job
from lrtransfer.training import engine, stop
from tests.conftest import TINY

JOB = [*TINY, "width=16", "train.steps=40", "name=s"]


@pytest.fixture
def interrupt(monkeypatch):
    """interrupt(after): the next jobs stop (as on Ctrl-C) once `after` run-steps are done, each
    saving its checkpoint; interrupt(None): they train as usual."""
    real = engine.train

    def cut(after):
        def train(built, runs, *, progress=None, checkpoint=None):
            done = []

            def counted(n):
                done.append(n)
                if progress:
                    progress(n)
                if sum(done) >= after:
                    stop.request()

            return real(built, runs, progress=counted, checkpoint=checkpoint)

        monkeypatch.setattr(stop, "_requested", False)
        monkeypatch.setattr(engine, "train", real if after is None else train)

    return cut


def folder_of(root: Path) -> Path:
    (folder,) = (p for p in (root / "s").iterdir() if p.is_dir() and not p.name.startswith("."))
    return folder


def runs_of(folder: Path) -> list:
    return json.loads((folder / "record.json").read_text())["runs"]


def resumed(folder: Path) -> bool:
    return "resuming from" in (folder / "job.log").read_text()


@pytest.fixture
def whole(cli, tmp_path):
    """The runs of the job trained once, uninterrupted."""
    assert cli("sweep", *JOB, f"results_dir={tmp_path / 'whole'}")[0] == 0
    return runs_of(folder_of(tmp_path / "whole"))


def test_a_rerun_starts_afresh_where_an_ordinary_run_left_a_checkpoint(cli, tmp_path, interrupt, whole):
    """An interrupted sweep, then `--rerun`: the rerun recomputes the job from its first step (it is
    asked to recompute; the checkpoint may be of other code), saying so, and ends as uninterrupted."""
    at = [f"results_dir={tmp_path / 'r'}"]
    interrupt(50)
    assert cli("sweep", *JOB, *at)[0] == 130
    folder = folder_of(tmp_path / "r")
    assert (folder / "checkpoint.pt").exists() and not (folder / "record.json").exists()

    interrupt(None)
    code, out, err = cli("sweep", *JOB, *at, "--rerun")
    assert code == 0, err
    assert (f"warning: ignoring checkpoint {folder / 'checkpoint.pt'}: saved by a run without --rerun, and --rerun "
            "recomputes the job; the job starts afresh") in err
    assert not resumed(folder) and not (folder / "checkpoint.pt").exists()
    assert runs_of(folder) == whole


def test_an_interrupted_rerun_keeps_the_record_and_resumes_only_as_a_rerun(cli, tmp_path, interrupt, whole):
    """A complete job, then an interrupted `--rerun`: the record stays, byte for byte; a plain run
    keeps it (the job is done) and leaves the rerun's checkpoint; the same `--rerun` resumes that
    checkpoint and writes the record of an uninterrupted job."""
    at = [f"results_dir={tmp_path / 'r'}"]
    assert cli("sweep", *JOB, *at)[0] == 0
    folder = folder_of(tmp_path / "r")
    first = (folder / "record.json").read_bytes()

    interrupt(50)
    code, _, err = cli("sweep", *JOB, *at, "--rerun")
    assert code == 130 and "1 running job(s) saved a checkpoint: re-run the same command to resume them" in err
    assert (folder / "record.json").read_bytes() == first and (folder / "checkpoint.pt").exists()

    interrupt(None)
    code, out, _ = cli("sweep", *JOB, *at)
    assert code == 0 and "0 job(s) ran, 1 already done" in out
    assert (folder / "record.json").read_bytes() == first and (folder / "checkpoint.pt").exists()

    code, out, err = cli("sweep", *JOB, *at, "--rerun")
    assert code == 0 and "1 job(s) ran" in out and "ignoring checkpoint" not in err, err
    assert resumed(folder) and not (folder / "checkpoint.pt").exists()
    assert runs_of(folder) == whole and (folder / "record.json").read_bytes() != first  # a new record


@pytest.mark.parametrize("change, says", [
    ("versions", "saved under other versions (torch 0.0.1)"),
    ("record", "saved by a --rerun of another record than the one there now"),
])
def test_a_rerun_resumes_no_rerun_checkpoint_of_other_versions_or_another_record(cli, tmp_path, interrupt, whole,
                                                                                monkeypatch, change, says):
    """What an interrupted `--rerun` saved, resumed by a `--rerun` under other versions (an upgrade:
    the reason to recompute) or over another record, would mix two computations: it starts afresh."""
    at = [f"results_dir={tmp_path / 'r'}"]
    assert cli("sweep", *JOB, *at)[0] == 0
    folder = folder_of(tmp_path / "r")
    real = job.versions
    if change == "versions":
        monkeypatch.setattr(job, "versions", lambda: {**real(), "torch": "0.0.1"})
    interrupt(50)
    assert cli("sweep", *JOB, *at, "--rerun")[0] == 130
    monkeypatch.setattr(job, "versions", real)
    if change == "record":
        record = json.loads((folder / "record.json").read_text())
        (folder / "record.json").write_text(json.dumps({**record, "host": "elsewhere"}))

    interrupt(None)
    code, _, err = cli("sweep", *JOB, *at, "--rerun")
    assert code == 0, err
    assert f"warning: ignoring checkpoint {folder / 'checkpoint.pt'}: {says}, and --rerun recomputes the job" in err
    assert not resumed(folder) and runs_of(folder) == whole


def test_plan_under_rerun_counts_only_the_checkpoint_a_rerun_would_resume(cli, tmp_path, interrupt):
    """`--plan --rerun` prices what `--rerun` does: an ordinary run's checkpoint is not resumed (the
    job's every run-step is to do), an interrupted `--rerun`'s is (only what it left)."""
    at = [*JOB, f"results_dir={tmp_path / 'r'}"]
    interrupt(50)
    assert cli("sweep", *at)[0] == 130  # an ordinary run's checkpoint, no record
    interrupt(None)
    code, out, _ = cli("sweep", "--plan", "--rerun", *at)
    assert code == 0 and re.search(r"missing .* 200 run-steps", out) and "resumes" not in out, out

    assert cli("sweep", *at)[0] == 0  # complete; then a --rerun interrupted midway
    interrupt(50)
    assert cli("sweep", *at, "--rerun")[0] == 130
    interrupt(None)
    done = 200 - int(re.search(r"reruns .* (\d+) run-steps", cli("sweep", "--plan", "--rerun", *at)[1]).group(1))
    assert 50 <= done < 200
    code, out, _ = cli("sweep", "--plan", *at)  # without --rerun the job is done
    assert code == 0 and "1 job(s): 1 done" in out, out

"""A checkpoint damaged but still loadable is never a reason for a job to fail, or to be wrong.

`torch.load(weights_only=True)` accepts any tensors, numbers and containers, so a
checkpoint whose fields were edited or corrupted loads fine; what it holds is checked
before anything is restored, and one that does not describe a state the job could
have reached is reported once and the job starts afresh (docs/troubleshooting.md),
ending with the record of a job never interrupted. Unchecked, each of these made the
re-run fail, and kept the checkpoint for every later re-run to fail on, or wrote a
record with wrong numbers.
"""

from __future__ import annotations

import copy
import io
import json
import math
import re
import shutil
import tempfile
from pathlib import Path

import pytest
import torch

from lrtransfer.sweeps.checkpoint import FileCheckpoint
from lrtransfer.training import build, engine, stop
from tests.conftest import TINY, run_cli, typed

# Three runs, the last of which diverges at its second step: a frozen run is state too.
JOB = [*TINY, "width=16", "train.steps=20", "lr.log2_min=-8", "lr.log2_max=6", "lr.log2_step=7"]
STEPS, K = 20, 3


def _interrupted_state(extra: tuple, after: int) -> dict:
    """What a job interrupted after `after` run-steps saves, as it would save it."""
    from lrtransfer.sweeps.job import runs_of

    cfg = typed(*JOB, *extra)
    seen = []

    def interrupt(n):
        seen.append(n)
        if sum(seen) >= after:
            stop.request()

    with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
        mp.setattr(stop, "_requested", False)
        ckpt = FileCheckpoint(Path(tmp) / "checkpoint.pt", interval_s=1e-9)
        with pytest.raises(engine.Interrupted):
            engine.train(build.job(cfg), runs_of(cfg), progress=interrupt, checkpoint=ckpt)
        mp.setattr(stop, "_requested", False)
        return torch.load(ckpt.path, weights_only=True)


# The job as each case saves it: its runs in one ensemble, one at a time (earlier runs' results
# saved as they are), and under a parameterization that carries state of its own (the power
# iteration's warm start).
VARIANTS = {"batched": ("engine.batched=true",), "one-at-a-time": ("engine.batched=false",),
            "spectral": ("engine.batched=true", "param=spectral", "optim=muon")}


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """For each variant: the study folder of an uninterrupted sweep of the job, its record, and
    the state that job saves when interrupted midway (in one ensemble: all 3 runs at step 10;
    one at a time: the first two finished, the diverging one at step 10)."""
    out = {}
    for variant, extra in VARIANTS.items():
        root = tmp_path_factory.mktemp(variant)
        assert run_cli("sweep", *JOB, *extra, f"results_dir={root}", "name=s") == 0
        (record,) = (root / "s").glob("*/record.json")
        after = 50 if variant == "one-at-a-time" else 30
        out[variant] = root, json.loads(record.read_text()), _interrupted_state(extra, after)
    return out


def _at(state, path):
    for key in path:
        state = state[key]
    return state


def _set(*path, value):
    """Replace the field at `path` with `value`, or with `value(field)`."""
    def damage(state):
        outer = _at(state, path[:-1])
        outer[path[-1]] = value(outer[path[-1]]) if callable(value) else value

    return damage


def _ens(field, value):
    return _set("ensemble", field, value=value)


def _poke(*path, value):
    """Write `value` into run 0 (which is still training) of the tensor at `path`."""
    def damage(state):
        _at(state, path)[0] = value

    return damage


# (id, variant, damage, what the warning names)
CASES = [
    ("step_index-str", "batched", _ens("step_index", "x"), "step_index"),
    ("step_index-negative", "batched", _ens("step_index", -100), "step_index"),
    ("step_index-float", "batched", _ens("step_index", 4175.5), "step_index"),
    ("step_index-huge", "batched", _ens("step_index", 10**9), "step_index"),
    ("opt_t-str", "batched", _ens("opt_t", "x"), "opt_t"),
    ("opt_t-negative", "batched", _ens("opt_t", -3), "opt_t"),
    ("opt_t-ahead", "batched", _ens("opt_t", lambda t: t + 5), "opt_t"),
    ("alive-all-false", "batched", _ens("alive", lambda a: torch.zeros_like(a)), "alive"),
    ("alive-short", "batched", _ens("alive", torch.ones(1, dtype=torch.bool)), "alive"),
    ("lr_alive-nan", "batched", _ens("lr_alive", lambda t: torch.full_like(t, math.nan)), "lr_alive"),
    ("lr_alive-doubled", "batched", _ens("lr_alive", lambda t: t * 2), "lr_alive"),
    ("lr_alive-live-run-zero", "batched", _poke("ensemble", "lr_alive", value=0.0), "lr_alive"),
    ("diverged_step-short", "batched", _ens("diverged_step", [None]), "diverged_step"),
    ("diverged_step-moved", "batched", _ens("diverged_step", lambda d: d[:2] + [5]), "diverged_step"),
    ("history-broadcast", "batched", _ens("history", lambda h: h[:, :1].clone()), "history"),
    ("history-nan-live", "batched", _poke("ensemble", "history", value=math.nan), "history"),
    ("opt_state-nan-live", "batched", _poke("ensemble", "opt_state", 0, value=math.nan), "opt_state"),
    ("weights-inf-live", "batched", _poke("ensemble", "tensors", 0, value=math.inf), "tensors"),
    ("done-final_loss-str", "one-at-a-time", _set("done", 0, "final_loss", value="x"), "done"),
    ("done-other-seed", "one-at-a-time", _set("done", 1, "seed", value=7), "done"),
    ("param-nan-live", "spectral", _poke("ensemble", "param", "power", 0, "v", value=math.nan), "param"),
    ("param-short", "spectral", _set("ensemble", "param", "power", value=lambda p: p[:-1]), "param"),
    ("done-history-nan", "one-at-a-time", _set("done", 0, "history_loss", value=lambda h: [math.nan] * len(h)), "done"),
    # one list held many times over: a few kB on disk, megabytes as text (gigabytes, 1000^3 of them:
    # the job was killed for memory writing its reason); the reason shows a few items
    ("diverged_step-many-times-over", "batched", _ens("diverged_step", [[[1.0] * 100] * 100] * 100), "diverged_step"),
    ("step_index-many-times-over", "batched", _ens("step_index", [[[1] * 100] * 100] * 100), "step_index"),
    # a tensor where the runs' keys go: comparing them raised, and every re-run failed on it
    ("chunks-key-tensor", "batched", _set("chunks", 0, 0, value=lambda k: (torch.tensor([k[0]] * 2), *k[1:])), "chunks is not"),
]


def _planted(tmp_path: Path, made, variant: str, damage) -> tuple[Path, dict]:
    """A copy of the reference study with the job's record gone and its interrupted state,
    damaged, in its place: (the record's path, the reference record)."""
    root, expected, state = made[variant]
    shutil.copytree(root / "s", tmp_path / "s")
    (record,) = (tmp_path / "s").glob("*/record.json")
    record.unlink()
    state = copy.deepcopy(state)
    damage(state)
    torch.save(state, record.parent / "checkpoint.pt")
    return record, expected


def _said_once(err: str, names: str) -> None:
    warnings = [line for line in err.splitlines() if "ignoring checkpoint" in line]
    assert len(warnings) == 1 and warnings[0].startswith("warning: ") and "the job starts afresh" in warnings[0], err
    assert names in warnings[0], warnings  # the reason names the field
    assert len(warnings[0]) < 1000, warnings[0][:300]  # one line, whatever the file holds
    assert "Traceback" not in err


@pytest.mark.parametrize("variant, damage, names", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_damaged_checkpoint_is_set_aside_and_the_runs_end_as_uninterrupted(tmp_path, capsys, made, variant, damage,
                                                                             names):
    from lrtransfer.sweeps.job import run_record, runs_of

    record, expected = _planted(tmp_path, made, variant, damage)
    path = record.parent / "checkpoint.pt"
    cfg = typed(*JOB, *VARIANTS[variant])
    capsys.readouterr()
    got = engine.train(build.job(cfg), runs_of(cfg), checkpoint=FileCheckpoint(path, interval_s=0))
    _said_once(capsys.readouterr().err, names)
    assert not path.exists()  # not there for the next re-run to fail on
    assert json.loads(json.dumps([run_record(r) for r in got])) == expected["runs"]


def _holding_itself() -> list:
    loop: list = []
    loop.append(loop)
    return loop


def _many_times_over() -> list:
    """1000^6 values in a few kB: one list held 1000 times by the next, six times over."""
    x = [1]
    for _ in range(6):
        x = [x] * 1000
    return x


@pytest.mark.parametrize("rerun", [torch.tensor([True, True]), torch.tensor([1.0]), [torch.ones(2)], _holding_itself(),
                                   _many_times_over()],
                         ids=["tensor", "one-value", "in-list", "list-holding-itself", "list-many-times-over"])
def test_a_checkpoint_whose_origin_is_not_plain_values_is_set_aside_by_a_rerun(tmp_path, capsys, made, rerun):
    """A --rerun compares the saved origin with its own: a tensor there raised (a tensor of two
    values has no truth value), so the job failed and kept the checkpoint to fail on again; one of
    one value passed as equal, and the forged state was resumed. What it may hold is checked without
    recursion: a list holding itself (or nested past Python's stack) raised RecursionError; and
    within a bound: one list held many times over took for ever."""
    mine = {"rerun": True, "replaces": "ab", "versions": {"torch": str(torch.__version__)}}
    path = tmp_path / "checkpoint.pt"
    torch.save({**made["batched"][2], "origin": {**mine, "rerun": rerun}}, path)
    capsys.readouterr()
    assert FileCheckpoint(path, interval_s=0, origin=mine, only_own=True).load() is None
    _said_once(capsys.readouterr().err, "damaged (origin is not")
    assert not path.exists()


PROBED = ["step_index-str", "step_index-negative", "step_index-float", "step_index-huge", "opt_t-str",
          "alive-all-false", "lr_alive-nan", "done-final_loss-str"]


@pytest.mark.parametrize("variant, damage, names", [c[1:] for c in CASES if c[0] in PROBED], ids=PROBED)
def test_a_rerun_of_the_sweep_reports_a_damaged_checkpoint_once_and_writes_the_uninterrupted_record(
        cli, tmp_path, made, variant, damage, names):
    record, expected = _planted(tmp_path, made, variant, damage)
    code, out, err = cli("sweep", *JOB, *VARIANTS[variant], f"results_dir={tmp_path}", "name=s")
    assert code == 0 and "1 job(s) ran" in out, (out, err)
    _said_once(err, names)
    assert not (record.parent / "checkpoint.pt").exists()
    got = json.loads(record.read_text())
    assert got["status"] == "complete" and got["runs"] == expected["runs"]
    assert "resuming from" in (record.parent / "job.log").read_text()  # it was read, and then set aside


class InMemory:
    """A checkpointer (`engine.Checkpointer`) that keeps every state the engine saves, through
    the file format's round trip, or hands one back; rejecting one is a failure."""

    def __init__(self, state: dict | None = None) -> None:
        self.state, self.saves = state, []

    def load(self):
        return self.state

    def due(self) -> bool:
        return self.state is None

    def save(self, state: dict) -> None:
        buf = io.BytesIO()
        torch.save(state, buf)
        buf.seek(0)
        self.saves.append(torch.load(buf, weights_only=True))

    def reject(self, why: str) -> None:
        raise AssertionError(f"a state the engine saved was rejected: {why}")


@pytest.mark.parametrize("extra", [("engine.batched=true",), ("engine.batched=false",), ("optim=sgd",),
                                   ("param=spectral", "optim=muon"), ("param=modular",),
                                   ("train.dtype=bf16", "width=192")])
def test_every_state_the_engine_saves_passes_the_checks_and_resumes_exactly(extra):
    """The checks hold every saved state (before and after a run diverged and froze, and across
    optimizers, whose step counts and state differ) to what training makes: none is rejected,
    and each resumes to the runs of an uninterrupted job, bit for bit."""
    from lrtransfer.sweeps.job import runs_of

    cfg = typed(*JOB, *extra)
    runs = runs_of(cfg)
    reference = [vars(r) for r in engine.train(build.job(cfg), runs)]
    every = InMemory()
    engine.train(build.job(cfg), runs, checkpoint=every)
    assert len(every.saves) >= STEPS
    for state in every.saves[1::6] + every.saves[-1:]:
        assert [vars(r) for r in engine.train(build.job(cfg), runs, checkpoint=InMemory(state))] == reference


def test_the_plan_does_not_count_steps_a_damaged_checkpoint_claims(cli, tmp_path, made):
    """--plan reads a checkpoint without restoring it: steps it cannot have done are no saving."""
    root, _, state = made["batched"]
    shutil.copytree(root / "s", tmp_path / "s")
    (record,) = (tmp_path / "s").glob("*/record.json")
    record.unlink()
    state = {**state, "ensemble": {**state["ensemble"], "step_index": 10**9}}
    torch.save(state, record.parent / "checkpoint.pt")
    code, out, err = cli("sweep", "--plan", *JOB, *VARIANTS["batched"], f"results_dir={tmp_path}", "name=s")
    assert code == 0, err
    assert re.search(rf"missing .* {K * STEPS} run-steps\s+{record.parent.name}", out), out


def test_the_plan_reads_no_more_of_a_checkpoint_than_a_job_could_have_saved(tmp_path):
    """A few kB that hold one list many times over: the plan made a tuple of each of its 10^6 keys
    (hundreds of MB; a level more, out of memory) before finding they were not the job's."""
    import tracemalloc

    from lrtransfer.sweeps.checkpoint import steps_done

    chunk = [[-8.0, 0, "x", 1.0, "y", 2.0, "z", 3.0, "w", 4.0]] * 1000
    torch.save({"chunks": [chunk] * 1000, "chunk": 0, "done": [], "ensemble": {"step_index": 0}}, tmp_path / "c.pt")
    tracemalloc.start()
    try:
        assert steps_done(tmp_path / "c.pt", [], STEPS) is None
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 20 * 2**20, peak

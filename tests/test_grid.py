"""A second inner axis beside the LR (`grid.<key>=[...]`): each run of a job carries its own
value of one more per-run key, trained in the same ensemble, and computes exactly what a
job with that key set to its value computes."""

from __future__ import annotations

import json

import pytest
import torch

from lrtransfer import build, engine
from lrtransfer.config import inner_grid, semantic
from lrtransfer.engine import Run
from lrtransfer.job import run_record, runs_of
from lrtransfer.store import job_id
from tests.conftest import TINY, compose, typed

SMALL = ["width=24", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu"]
WD = ("optim.weight_decay", [0.0, 0.003, 0.05])


def grid_runs(key: str, values, seeds=(0,), lrs=(-9, -6)) -> list[Run]:
    return [Run(log2_lr=e, seed=s, grid=((key, v),)) for s in seeds for v in values for e in lrs]


def test_an_empty_grid_leaves_the_job_identity_as_it_was():
    for over in ([], ["param=mup"], ["optim=sgd", "width=256"], ["param=modular", "depth=4"]):
        cfg = compose(*over)
        assert "grid" not in semantic(cfg)  # so every existing job keeps its id
    plain, gridded = compose(), compose("grid.optim.weight_decay=[0,1e-3]")
    assert semantic(gridded)["grid"] == {"optim.weight_decay": [0.0, 0.001]}
    assert job_id(plain) != job_id(gridded) != job_id(compose("grid.optim.weight_decay=[0,1e-2]"))


def test_runs_of_a_job_with_a_grid_are_lrs_x_values_x_seeds():
    cfg = typed("grid.optim.weight_decay=[0,1e-3,1e-2]", "n_seeds=2", "lr.log2_min=-10", "lr.log2_max=-6")
    assert inner_grid(cfg) == ("optim.weight_decay", [0.0, 0.001, 0.01])
    runs = runs_of(cfg)
    assert len(runs) == 5 * 3 * 2
    assert {(r.log2_lr, r.seed, r.grid) for r in runs} == {
        (e, s, (("optim.weight_decay", v),)) for e in range(-10, -5) for s in (0, 1) for v in (0.0, 0.001, 0.01)
    }
    assert all(r.grid == () for r in runs_of(typed()))


CASES = {
    "weight decay, independent": ("optim.weight_decay", [0.0, 0.003, 0.05], []),
    "weight decay, with the LR": ("optim.weight_decay", [0.0, 0.003, 0.05], ["optim.decay_scaling=lr"]),
    "weight decay, sgd, cosine": ("optim.weight_decay", [0.01, 0.2], ["optim=sgd", "train.schedule=cosine"]),
    "muP output multiplier": ("param.output_mult", [0.25, 1.0, 3.0], ["param=mup", "param.base_width=8"]),
}


@pytest.mark.parametrize("case", list(CASES))
def test_batched_equals_one_run_at_a_time_in_float64(case):
    key, values, extra = CASES[case]
    over = [*SMALL, *extra, "train.dtype=float64", "train.steps=30", "n_seeds=2"]
    runs = grid_runs(key, values, seeds=(0, 1))
    batched = engine.train(build.job(typed(*over)), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone):
        assert (a.lr, a.seed, a.grid) == (b.lr, b.seed, b.grid)
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


@pytest.mark.parametrize("case", list(CASES))
def test_a_run_with_value_v_equals_a_job_with_the_key_set_to_v(case):
    """Number for number, in the default float32: the per-run value is rounded as the scalar is.

    The job with the scalar trains the same K runs (same LRs, same ensemble layout): in float32
    a batched kernel's rounding may depend on K itself, which is not what is tested here."""
    key, values, extra = CASES[case]
    over = [*SMALL, *extra, "train.steps=30"]
    runs = grid_runs(key, values)
    together = engine.train(build.job(typed(*over)), runs)
    plain = [Run(log2_lr=r.log2_lr, seed=r.seed) for r in runs]
    alone = {v: engine.train(build.job(typed(*over, f"{key}={v}")), plain) for v in values}
    for k, r in enumerate(together):
        v = r.grid[key]
        assert r.grid == {key: runs[k].grid[0][1]}
        ref = alone[v][k]
        assert (r.history_loss, r.final_loss, r.eval_loss) == (ref.history_loss, ref.final_loss, ref.eval_loss)
    # the values matter: the runs at one LR differ (else this test could not fail)
    finals = {r.grid[key]: r.final_loss for r in together if r.log2_lr == -6}
    assert len(set(finals.values())) == len(values)


def test_a_checkpoint_of_other_values_is_not_resumed():
    """The checkpoint key holds each run's values: the same LRs at other values start afresh."""
    built = build.job(typed(*SMALL, "train.steps=4"))
    a, b = grid_runs(*WD), grid_runs("optim.weight_decay", [0.0, 0.003, 0.06])

    class Saved:
        state, rejected = None, None

        def load(self):
            return self.state

        def due(self):
            return True

        def save(self, state):
            self.state = state

        def reject(self, why):
            self.rejected = why

    ck = Saved()
    engine.train(built, a, checkpoint=ck)
    assert ck.state["chunks"][0][1] == (-6, 0, "optim.weight_decay", 0.0)
    ck.state["chunk"] = 0  # as if stopped in the first chunk
    engine.train(built, b, checkpoint=ck)
    assert ck.rejected and "other runs" in ck.rejected


def test_the_record_gives_each_run_its_value(cli, tmp_path):
    out = tmp_path / "r"
    code, _, err = cli("sweep", *TINY, f"results_dir={out}", "width=16,32", "grid.optim.weight_decay=[0,0.1]")
    assert code == 0, err
    records = sorted(out.glob("default/*/record.json"))
    assert len(records) == 2  # a comma list inside brackets is one value, not two jobs
    for path in records:
        rec = json.loads(path.read_text())
        assert rec["config"]["grid"]["optim"]["weight_decay"] == [0.0, 0.1]
        assert len(rec["runs"]) == 5 * 2
        assert sorted({r["grid"]["optim.weight_decay"] for r in rec["runs"]}) == [0.0, 0.1]
    plain = RunResultLike()
    assert "grid" not in run_record(plain)


class RunResultLike:
    def __init__(self):
        self.log2_lr, self.seed, self.grid = -8.0, 0, {}


def test_the_plan_counts_every_run_of_the_grid(cli, tmp_path):
    code, out, err = cli("sweep", "--plan", *TINY, f"results_dir={tmp_path}", "grid.optim.weight_decay=[0,1e-3,1e-2]",
                         "n_seeds=2")
    assert code == 0, err
    # K = 5 LRs x 3 values x 2 seeds = 30 runs of 12 steps
    assert "360 run-steps" in out and "K=30" in out

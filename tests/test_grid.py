"""A second inner axis beside the LR (`grid.<key>=[...]`): each run of a job carries its own
value of one more per-run key, trained in the same ensemble, and computes exactly what a
job with that key set to its value computes."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

import pytest

from lrtransfer.training import build, engine
from lrtransfer.config import inner_grid, semantic
from lrtransfer.training.engine import Run
from lrtransfer.sweeps.job import run_record, runs_of
from lrtransfer.store import job_id
from tests.conftest import TINY, compose, typed

SMALL = ["width=24", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu"]
WD = ("optim.weight_decay", [0.0, 0.003, 0.05])
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"


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
    "weight decay, muon": ("optim.weight_decay", [0.0, 0.05], ["optim=muon"]),
    "adam beta1": ("optim.beta1", [0.5, 0.9, 0.99], []),
    "adam beta2, muP's per-tensor eps": ("optim.beta2", [0.9, 0.999], ["param=mup", "param.base_width=8"]),
    "adam eps, the rule on, wide": ("optim.eps", [1e-8, 1e-3], ["param.sde_rule=sde", "train.steps=30",
                                                                 "param.base_steps=60", "width=200"]),
    "muon beta1": ("optim.beta1", [0.8, 0.95], ["optim=muon"]),
    "muP output multiplier": ("param.output_mult", [0.25, 1.0, 3.0], ["param=mup", "param.base_width=8"]),
    "muP output multiplier, model=custom": ("param.output_mult", [0.25, 1.0, 3.0],
                                            ["param=mup", "param.base_width=8", "model=custom", f"model.target={EXAMPLE}:build"]),
}


ROUNDED = ("optim.beta1", "optim.beta2", "optim.eps")  # equal to a configured job to rounding (below)


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
    a batched kernel's rounding may depend on K itself, which is not what is tested here.

    Adam's per-run betas and epsilon (`ROUNDED`) to rounding, in float64: the fused kernel takes one
    of each per call, so a small tensor's runs are updated one slice at a time where the scalar's
    job updates them all at once, and the kernel's vectorised body and scalar tail round differently
    (1 ulp in float32 here and there)."""
    key, values, extra = CASES[case]
    over = [*SMALL, *extra, "train.steps=30", *(["train.dtype=float64"] if key in ROUNDED else [])]
    runs = grid_runs(key, values)
    together = engine.train(build.job(typed(*over)), runs)
    plain = [Run(log2_lr=r.log2_lr, seed=r.seed) for r in runs]
    alone = {v: engine.train(build.job(typed(*over, f"{key}={v}")), plain) for v in values}
    for k, r in enumerate(together):
        v = r.grid[key]
        assert r.grid == {key: runs[k].grid[0][1]}
        ref = alone[v][k]
        if key in ROUNDED:
            assert r.history_loss == pytest.approx(ref.history_loss, rel=1e-12)
            assert (r.final_loss, r.eval_loss) == pytest.approx((ref.final_loss, ref.eval_loss), rel=1e-12)
        else:
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


# ----------------------------------------------------------------------------- the analysis


def grid_record(root, width, *, lr_opt, wd_opt, values=(0.0, 0.001, 0.01, 0.1), seed=0, name="g"):
    """A record whose loss is a bowl in (log2 LR, log10 weight decay) with its minimum at (lr_opt, wd_opt)."""
    from lrtransfer.store import write_record

    runs = []
    for v in values:
        for log2 in range(-12, -3):
            loss = 1.0 + 0.05 * (log2 - lr_opt) ** 2 + 0.1 * (math.log10(v if v > 0 else 1e-4) - math.log10(wd_opt)) ** 2
            runs.append({"lr": 2.0**log2, "log2_lr": float(log2), "seed": seed, "final_loss": loss, "eval_loss": loss,
                         "diverged": False, "diverged_step": None, "initial_loss": 2.3, "history_step": [0, 9],
                         "history_loss": [2.3, loss], "grid": {"optim.weight_decay": v}})
    config = {"name": name, "results_dir": str(root), "width": width, "depth": 3, "seed": seed, "n_seeds": 1,
              "model": {"name": "mlp"}, "param": {"name": "standard"}, "optim": {"name": "adam", "weight_decay": 0.0},
              "data": {"name": "teacher"}, "lr": {"log2_min": -12, "log2_max": -4, "log2_step": 1},
              "grid": {"optim": {"weight_decay": list(values)}, "param": {"output_mult": None}},
              "train": {"steps": 10}, "engine": {"device": "cpu"}}
    jid = f"{name}-{width}-{seed}"
    write_record(root / name / jid, {"job_id": jid, "status": "complete", "config": config, "runs": runs})


def test_the_joint_optimum_of_each_scale_and_the_drift_of_each_coordinate(tmp_path):
    from lrtransfer import analysis

    # the LR optimum halves per doubling; the best weight decay moves one grid value up per doubling
    for i, (w, wd) in enumerate(zip((64, 128, 256), (0.001, 0.01, 0.1))):
        grid_record(tmp_path, w, lr_opt=-6.3 - i, wd_opt=wd)
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.joint.key == "optim.weight_decay" and g.joint.values == [0.0, 0.001, 0.01, 0.1]
    assert g.joint.best_value == [0.001, 0.01, 0.1]
    assert g.best_log2_lr == pytest.approx([-6.3, -7.3, -8.3], abs=1e-9)  # the parabola at the best value
    assert g.drift == pytest.approx(-1.0, abs=1e-9)
    assert g.joint.value_coordinate == "linear"  # the grid holds 0: no log2
    assert g.joint.value_drift == pytest.approx(np.polyfit(np.log2([64, 128, 256]), [0.001, 0.01, 0.1], 1)[0])
    assert g.joint.best_value_where == ["interior", "interior", "grid edge (high)"]
    assert any("highest of its grid (0.1)" in w for w in g.warnings)
    assert set(g.curves["scale"]) == {64, 128, 256} and len(g.curves) == 3 * 9  # the LR curves at the best value
    doc = analysis.summarize(tmp_path)
    assert doc["groups"][0]["joint"]["best_value"] == [0.001, 0.01, 0.1]


def test_a_grid_of_positive_values_drifts_in_octaves(tmp_path):
    from lrtransfer import analysis

    for i, w in enumerate((64, 128, 256, 512)):
        grid_record(tmp_path, w, lr_opt=-7.5, wd_opt=0.01, values=(0.0025, 0.005, 0.01, 0.02, 0.04))
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.joint.value_coordinate == "log2" and g.joint.best_value == [0.01] * 4
    assert g.joint.value_drift == pytest.approx(0.0, abs=1e-12) and g.drift == pytest.approx(0.0, abs=1e-9)
    assert g.joint.value_drift_ci == pytest.approx([0.0, 0.0], abs=1e-9)


def test_plain_and_grid_jobs_form_separate_groups_and_plain_ones_are_analysed_as_before(tmp_path):
    from lrtransfer import analysis
    from tests.test_analysis import study

    study(tmp_path / "r", slope=-1.0, seeds=1, name="g")
    before = analysis.summarize(tmp_path / "r")
    for i, w in enumerate((64, 128)):
        grid_record(tmp_path / "r", w, lr_opt=-7, wd_opt=0.01)
    after = analysis.summarize(tmp_path / "r")
    plain = [g for g in after["groups"] if "joint" not in g]
    assert plain == before["groups"] and len(after["groups"]) == 2
    gridded = [g for g in after["groups"] if "joint" in g]
    assert gridded[0]["fixed"]["grid"] == "optim.weight_decay"  # what tells it from the plain group


def test_the_joint_figure(tmp_path):
    from lrtransfer import analysis
    from lrtransfer.reporting import plots

    for i, w in enumerate((64, 128, 256)):
        grid_record(tmp_path, w, lr_opt=-6 - i, wd_opt=0.01)
    paths = plots.save_figures(analysis.groups(analysis.load_runs(tmp_path)), tmp_path / "fig")
    joint = [p for p in paths if "-joint-" in p.name]
    assert len(joint) == 1 and joint[0].stat().st_size > 10_000


def test_summary_and_report_show_the_joint_optimum(cli, tmp_path):
    for i, w in enumerate((64, 128, 256)):
        grid_record(tmp_path, w, lr_opt=-6 - i, wd_opt=0.01)
    code, out, err = cli("summary", str(tmp_path))
    assert code == 0, err
    assert "joint optimum over (LR, optim.weight_decay)" in out and "optim.weight_decay drift" in out
    code, out, err = cli("report", str(tmp_path))
    assert code == 0, err
    html = (tmp_path / "report.html").read_text()
    assert "joint optimum over (LR, optim.weight_decay)" in html and "-joint-" in html


def test_a_grid_job_resumes_from_its_checkpoint_file(tmp_path, monkeypatch):
    """The runs' values survive the checkpoint file (torch.save, weights_only load): a job
    stopped half-way resumes to the very numbers of an uninterrupted one."""
    from lrtransfer.training import stop
    from lrtransfer.sweeps.checkpoint import FileCheckpoint

    built = build.job(typed(*SMALL, "train.steps=40"))
    runs = grid_runs(*WD)
    whole = engine.train(built, runs)
    ck = FileCheckpoint(tmp_path / "checkpoint.pt", 1e-9)  # due at every check
    seen = []

    def stop_half_way(n):
        seen.append(n)
        if sum(seen) >= 20 * len(runs):
            stop.request()

    monkeypatch.setattr(stop, "_requested", False)
    with pytest.raises(engine.Interrupted):
        engine.train(built, runs, progress=stop_half_way, checkpoint=ck)
    monkeypatch.setattr(stop, "_requested", False)
    assert ck.load()["chunks"][0][0] == (-9, 0, "optim.weight_decay", 0.0)
    resumed = engine.train(built, runs, checkpoint=ck)
    assert [vars(r) for r in resumed] == [vars(r) for r in whole]


def test_a_drift_that_is_zero_but_for_rounding_reads_zero(cli, tmp_path):
    """The same best value at every scale: the slope through them is 0, or -7.8e-19 in floating point."""
    for w in (64, 128, 256):
        grid_record(tmp_path, w, lr_opt=-7, wd_opt=0.01)
    code, out, err = cli("summary", str(tmp_path))
    line = next(x for x in out.splitlines() if "optim.weight_decay drift:" in x)
    assert code == 0 and "drift: +0 [" in line and "e-" not in line, line


def test_list_tells_a_grid_group_from_a_plain_one_of_the_same_config(cli, tmp_path):
    from tests.test_analysis import study

    study(tmp_path / "r", slope=-1.0, seeds=1, name="g", widths=[64, 128])
    for w in (64, 128):
        grid_record(tmp_path / "r", w, lr_opt=-7, wd_opt=0.01)
    code, out, err = cli("list", str(tmp_path / "r"))
    rows = [line for line in out.splitlines() if line.startswith("│")]
    assert code == 0 and len(rows) == 2 and sum("grid=optim.weight_decay" in r for r in rows) == 1, out

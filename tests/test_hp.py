"""Per-module hyperparameters (`hp.<role>.<name>`), per job and per run: a run that carries a vector
of values computes exactly what a job configured to that vector computes, batched equals one run
at a time, and the keys left unset change no job id and no record."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lrtransfer.config import semantic
from lrtransfer.options.param.tuning import Tuning, roles_of
from lrtransfer.store import job_id
from lrtransfer.training import build, engine
from lrtransfer.training.engine import Run
from tests.conftest import TINY, compose, typed

NANOGPT = Path(__file__).parent / "nanogpt_standin.py"
MLP = ["model=mlp", "width=16", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu"]
TEXT = ["data=text", "data.seq_len=8", "data.eval_size=4", "train.batch_size=4", "width=16", "depth=2",
        "engine.device=cpu", "model.heads=2"]
NANO = ["model=custom", f"model.target={NANOGPT}:GPT", f"model.config={NANOGPT}:GPTConfig", "model.width_key=n_embd",
        "model.depth_key=n_layer", "model.config_kwargs={n_head: 2}", *[o for o in TEXT if o != "model.heads=2"]]

# The ids of three jobs as they were before `hp`, `points` and `search` existed (measured on main at 0f3c99e)
IDS_BEFORE = {(): "873ca84b6e09", ("param=mup", "width=256"): "1a195712e6e8",
              ("model=custom", "model.target=examples/mynets.py:build"): "6a777c87b2ea"}


def test_unset_keys_keep_every_job_id():
    for over, expected in IDS_BEFORE.items():
        cfg = compose(*over)
        assert job_id(cfg) == expected
        assert not {"hp", "points", "search"} & set(semantic(cfg))
    assert job_id(compose("hp.hidden.lr_mult=2")) != IDS_BEFORE[()]
    assert semantic(compose("hp.hidden.lr_mult=2"))["hp"] == {"hp.hidden.lr_mult": 2.0}


def test_unset_keys_leave_the_record_as_it_was(cli, tmp_path):
    code, _, err = cli("sweep", *TINY, f"results_dir={tmp_path}", "width=16")
    assert code == 0, err
    (path,) = tmp_path.glob("default/*/record.json")
    config = json.loads(path.read_text())["config"]
    assert not {"hp", "points", "search"} & set(config) and set(config["grid"]) == {"optim", "param"}


# (overrides, vectors): each run of the ensemble carries one vector; a job configured to it trains alone
V = {
    "mlp, standard": (MLP + ["optim.weight_decay=0.02"], {
        "hp.embedding.lr_mult": [0.5, 2.0, 1.0], "hp.hidden.lr_mult": [2.0, 0.25, 1.0],
        "hp.readout.lr_mult": [1.0, 3.0, 0.5], "hp.vector.lr_mult": [0.1, 4.0, 1.0],
        "hp.embedding.init_mult": [0.5, 1.5, 1.0], "hp.hidden.init_mult": [1.5, 0.7, 1.0],
        "hp.readout.init_mult": [0.3, 2.0, 1.0], "hp.vector.init_mult": [2.0, 0.0, 1.0],
        "hp.hidden.wd_mult": [0.0, 8.0, 1.0], "hp.vector.wd_mult": [5.0, 0.0, 1.0],
        "param.output_mult": [0.5, 2.0, 1.0], "optim.weight_decay": [0.02, 0.05, 0.01]}),
    "mlp, mup, decay with the LR": (MLP + ["param=mup", "param.base_width=8", "param.readout_zero_init=false",
                                           "optim.decay_scaling=lr", "optim.weight_decay=0.5"], {
        "hp.embedding.lr_mult": [0.5, 2.0, 1.0], "hp.hidden.lr_mult": [2.0, 0.25, 1.0],
        "hp.readout.init_mult": [0.3, 2.0, 1.0], "hp.hidden.wd_mult": [0.0, 8.0, 1.0],
        "param.output_mult": [0.5, 2.0, 1.0]}),
    "mlp, sgd": (MLP + ["optim=sgd", "optim.weight_decay=0.01"], {
        "hp.hidden.lr_mult": [2.0, 0.25, 1.0], "hp.readout.lr_mult": [0.5, 3.0, 1.0],
        "hp.embedding.init_mult": [0.5, 1.5, 1.0], "hp.vector.wd_mult": [5.0, 0.0, 1.0]}),
    "mlp, modular": (MLP + ["param=modular"], {
        "hp.hidden.lr_mult": [2.0, 0.25, 1.0], "hp.readout.lr_mult": [0.5, 3.0, 1.0],
        "hp.embedding.init_mult": [0.5, 1.5, 1.0]}),
    "transformer, completep": (["model=transformer", *TEXT, "param=completep", "param.base_width=8",
                                "param.readout_zero_init=false", "optim.weight_decay=0.05"], {
        "hp.attention.lr_mult": [2.0, 0.25, 1.0], "hp.mlp.lr_mult": [0.5, 3.0, 1.0],
        "hp.hidden.init_mult": [0.5, 1.5, 1.0], "hp.attention.init_mult": [1.5, 0.5, 1.0],
        "hp.embedding.lr_mult": [3.0, 0.5, 1.0], "hp.readout.lr_mult": [0.3, 2.0, 1.0],
        "hp.vector.lr_mult": [0.5, 2.0, 1.0], "hp.mlp.wd_mult": [4.0, 0.0, 1.0],
        "param.output_mult": [0.5, 2.0, 1.0]}),
    "nanoGPT as published, standard": (NANO + ["model.group=*.c_fc", "optim.weight_decay=0.05"], {
        "hp.attention.lr_mult": [2.0, 0.25, 1.0], "hp.mlp.init_mult": [0.5, 1.5, 1.0],
        "hp.group.lr_mult": [3.0, 0.5, 1.0], "hp.embedding.lr_mult": [0.5, 2.0, 1.0],
        "hp.vector.wd_mult": [4.0, 0.0, 1.0], "hp.hidden.lr_mult": [0.5, 2.0, 1.0],
        "param.output_mult": [0.5, 2.0, 1.0]}),
}
LRS = (-6.0, -7.0, -5.5)


def vector_runs(vectors: dict, seeds=(0,)) -> list[Run]:
    n = len(next(iter(vectors.values())))
    return [Run(log2_lr=LRS[i], seed=s, grid=tuple((k, float(v[i])) for k, v in vectors.items()))
            for s in seeds for i in range(n)]


def trained(over, runs, *more):
    return engine.train(build.job(typed(*over, *more)), runs)


def configured_alone(over, vectors, steps) -> list:
    """Run i of a job configured to vector i (its keys set as scalars), trained beside the same LRs."""
    n = len(next(iter(vectors.values())))
    plain = [Run(log2_lr=LRS[i], seed=0) for i in range(n)]
    return [trained(over, plain, steps, *[f"{k}={v[i]}" for k, v in vectors.items()])[i] for i in range(n)]


@pytest.mark.parametrize("case", list(V))
def test_a_run_with_vector_v_equals_a_job_configured_to_v(case):
    """Number for number, in float32: each per-run value is rounded once, as the scalar is."""
    over, vectors = V[case]
    together = trained(over, vector_runs(vectors), "train.steps=8")
    alone = configured_alone(over, vectors, "train.steps=8")
    for r, ref in zip(together, alone):
        assert (r.history_loss, r.final_loss, r.eval_loss) == (ref.history_loss, ref.final_loss, ref.eval_loss)
    assert len({r.final_loss for r in together}) == len(together)  # the vectors matter


@pytest.mark.parametrize("case", list(V))
def test_batched_equals_one_run_at_a_time_in_float64(case):
    over, vectors = V[case]
    runs = vector_runs(vectors, seeds=(0, 1))
    batched = trained(over, runs, "train.dtype=float64", "train.steps=8", "n_seeds=2")
    one = trained(over, runs, "train.dtype=float64", "train.steps=8", "n_seeds=2", "engine.batched=false")
    for a, b in zip(batched, one):
        assert a.grid == b.grid
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


def roles_in(vectors: dict) -> list[str]:
    return list(dict.fromkeys(k.split(".")[1] for k in vectors if k.startswith("hp.")))


@pytest.mark.parametrize("case", ["mlp, standard", "transformer, completep",
                                  pytest.param("nanoGPT as published, standard", marks=pytest.mark.slow)])
def test_dropping_one_roles_per_run_values_fails_the_exactness_check(case, monkeypatch):
    """The mutation check: where the code kept one run's value (the first) for every run of a role,
    the runs no longer equal the jobs configured to their vectors, whichever role it is."""
    over, vectors = V[case]
    alone = configured_alone(over, vectors, "train.steps=4")
    honest = Tuning.value
    for role in roles_in(vectors):
        def dropped(self, atom, name, what, role=role):
            for r in roles_of(atom, name):  # as `Tuning.value`, but one role's runs all get the first run's value
                found = self.values.get(r, {}).get(what)
                if found is not None:
                    return float(found[0]) if r == role and not isinstance(found, float) else found
            return None

        monkeypatch.setattr(Tuning, "value", dropped)
        together = trained(over, vector_runs(vectors), "train.steps=4")
        monkeypatch.setattr(Tuning, "value", honest)
        assert any(r.history_loss != ref.history_loss for r, ref in zip(together, alone)), role


def test_inspect_prints_each_tensors_effective_lr_eps_decay_and_init(cli):
    over = ["inspect", "model=transformer", "data=text", "width=32", "depth=1", "engine.device=cpu", "param=completep",
            "param.base_width=32", "optim.weight_decay=0.1", "--json"]
    code, out, err = cli(*over)
    assert code == 0, err
    plain = {r["name"]: r for r in json.loads(out)["tensors"]}
    code, out, err = cli(*over, "hp.attention.lr_mult=2", "hp.mlp.init_mult=3", "hp.vector.wd_mult=0.5",
                         "hp.readout.eps_mult=4", "--log2-lr", "-8")
    assert code == 0, err
    doc = json.loads(out)
    rows = {r["name"]: r for r in doc["tensors"]}
    q = next(n for n in rows if n.endswith(".q.weight"))
    mlp = next(n for n in rows if rows[n]["hp_role"] == "mlp")
    bias = next(n for n in rows if n.endswith(".q.bias"))
    head = next(n for n in rows if rows[n]["hp_role"] == "readout")
    assert rows[q]["hp_role"] == "attention" and rows[q]["lr"] == pytest.approx(2.0**-8 * plain[q]["lr_mult"] * 2)
    assert rows[mlp]["init_std"] == pytest.approx(3 * plain[mlp]["init_std"], rel=1e-6)  # the same draw, x 3
    assert rows[bias]["decay"] == pytest.approx(0.1 * 0.5) and rows[q]["decay"] == pytest.approx(0.1)
    assert rows[head]["eps"] == pytest.approx(1e-8 * 4 * plain[head]["eps_mult"])
    assert rows[mlp]["lr"] == pytest.approx(2.0**-8 * plain[mlp]["lr_mult"])  # hp.attention does not reach the MLP


def test_a_per_run_attention_multiplier_equals_a_job_configured_to_it_in_float64():
    """muP's attn_mult per run (model=transformer): each run's factor multiplies its queries, where a job's own
    factor is the attention's scale; the same numbers up to rounding (float64: rel. 1e-9), not bit for bit."""
    over = ["model=transformer", *TEXT, "param=mup", "param.base_width=8", "train.dtype=float64", "train.steps=8"]
    vectors = {"param.attn_mult": [0.25, 1.0, 4.0]}
    together = trained(over, vector_runs(vectors))
    alone = configured_alone(over, vectors, "train.steps=8")
    for r, ref in zip(together, alone):
        assert r.history_loss == pytest.approx(ref.history_loss, rel=1e-9)
    assert len({r.final_loss for r in together}) == 3
    one = trained(over, vector_runs(vectors), "engine.batched=false")
    for a, b in zip(one, together):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)


def test_a_published_models_attention_takes_one_multiplier_per_job(cli, tmp_path):
    code, out, err = cli("sweep", *NANO, "param=mup", "param.base_width=8", "train.steps=2", "lr.log2_min=-8",
                         "lr.log2_max=-8", f"results_dir={tmp_path}", "grid.param.attn_mult=[0.5,2]")
    assert code == 2 and "param.attn_mult per run: a published model's attention takes one scale per job" in err, err


# Adam's betas and epsilon per role and per run. The fused kernel takes one beta1, beta2 and epsilon
# a call, so runs with their own are updated by the plain formula along the run axis (or a call per
# run) where a job configured to one vector takes the kernel: equal to rounding, in float64
# (as grid.optim.beta1's, tests/test_grid.py)
ADAM = {
    "transformer, completep": (["model=transformer", *TEXT, "param=completep", "param.base_width=8",
                                "param.readout_zero_init=false"], {
        "hp.attention.beta1": [0.5, 0.95, 0.9], "hp.mlp.beta2": [0.9, 0.99, 0.999],
        "hp.embedding.eps_mult": [1e4, 1.0, 1e6], "hp.vector.beta1": [0.8, 0.0, 0.9],
        "hp.readout.beta2": [0.95, 0.5, 0.999], "hp.hidden.eps_mult": [1e5, 1e3, 1.0]}),
    "mlp, mup, the SDE rule on": (MLP + ["param=mup", "param.base_width=8", "param.sde_rule=sde",
                                         "param.base_steps=16"], {
        "hp.hidden.beta1": [0.7, 0.95, 0.9], "hp.readout.beta2": [0.9, 0.99, 0.999],
        "hp.embedding.eps_mult": [1e5, 1.0, 1e6], "hp.vector.beta1": [0.8, 0.99, 0.9]}),
}


@pytest.mark.parametrize("case", [pytest.param(c, marks=[pytest.mark.slow] if c.startswith("transformer") else [])
                                  for c in ADAM])
def test_per_run_betas_and_eps_equal_a_job_configured_to_them_in_float64(case):
    over, vectors = ADAM[case]
    over = [*over, "train.dtype=float64"]
    together = trained(over, vector_runs(vectors), "train.steps=8")
    alone = configured_alone(over, vectors, "train.steps=8")
    for r, ref in zip(together, alone):
        assert r.history_loss == pytest.approx(ref.history_loss, rel=1e-12)
        assert r.eval_loss == pytest.approx(ref.eval_loss, rel=1e-12)
    assert len({r.final_loss for r in together}) == len(together)  # the vectors matter
    one = trained(over, vector_runs(vectors), "train.steps=8", "engine.batched=false")
    for a, b in zip(together, one):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)


def test_dropping_one_roles_per_run_betas_or_eps_fails_the_check(monkeypatch):
    """The mutation check for Adam's settings: each role's per-run values matter to 1e-12."""
    over, vectors = ADAM["mlp, mup, the SDE rule on"]
    over = [*over, "train.dtype=float64"]
    alone = configured_alone(over, vectors, "train.steps=8")
    honest = Tuning.value
    for role in roles_in(vectors):
        def dropped(self, atom, name, what, role=role):
            for r in roles_of(atom, name):
                found = self.values.get(r, {}).get(what)
                if found is not None:
                    return float(found[0]) if r == role and not isinstance(found, float) else found
            return None

        monkeypatch.setattr(Tuning, "value", dropped)
        together = trained(over, vector_runs(vectors), "train.steps=8")
        monkeypatch.setattr(Tuning, "value", honest)
        assert any(r.history_loss != pytest.approx(ref.history_loss, rel=1e-12) for r, ref in zip(together, alone)), role


def test_sps_output_multiplier_reaches_the_logits():
    """param=standard's output_mult (a search's key): the module's own class, not the base class it imports
    under the same name, builds the model, so the multiplier changes the loss, per job and per run."""
    over = ["model=transformer", *TEXT, "param=standard", "train.steps=3"]
    job = {m: trained(over, [Run(log2_lr=-6.0, seed=0)], f"param.output_mult={m}")[0].final_loss for m in (1.0, 4.0)}
    assert job[1.0] != job[4.0]
    per_run = trained(over, [Run(log2_lr=-6.0, seed=0, grid=(("param.output_mult", m),)) for m in (1.0, 4.0)])
    assert [r.final_loss for r in per_run] == [job[1.0], job[4.0]]

"""param.sde_rule: the batch size and the training horizon as transfer axes with a rule (Adam's SDE,
Complete^(d)): kappa = (B / B0) / (D / D0), LR x kappa^e, 1 - beta x kappa, eps x kappa^-e, the
per-step decay x kappa; per-tensor betas in the optimizer; and the fixed-examples study."""

from __future__ import annotations

import copy
import math

import pytest
import torch

from lrtransfer.config import semantic
from lrtransfer.diagnostics import inspect as inspection
from lrtransfer.options.schema import scaled_beta
from lrtransfer.store import job_id
from lrtransfer.training import build, engine
from lrtransfer.training.ensemble import Ensemble
from lrtransfer.training.runs import Run
from tests.conftest import TINY, compose, typed

SMALL = ["width=24", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu"]
# (batch, steps) against the base (64, 300): kappa = (B / 64) / (B x steps / (64 x 300)) = 300 / steps
PAIRS = [(64, 300), (64, 75), (128, 150), (32, 1200), (256, 37)]
RULES = [("sde", 0.5), ("0.31", 0.31), ("-0.25", -0.25)]


def rows(*over: str, cfg=None) -> tuple[float, dict]:
    """(kappa, each tensor's inspect row) of the default MLP's config (32 inputs, 10 classes)."""
    cfg = cfg if cfg is not None else typed(*over)
    return build.parameterization(cfg).sde.kappa, {r["name"]: r for r in inspection.tensors(cfg, (32,), 10)}


def at(cfg, batch: int, steps: int):
    """A typed config at another batch and number of steps."""
    cfg = copy.deepcopy(cfg)
    cfg.train.batch_size, cfg.train.steps = batch, steps
    return cfg


@pytest.mark.parametrize("rule, e", RULES)
def test_the_multipliers_are_the_rules_formulas(rule, e):
    """For every (batch, steps) and both decay modes: each tensor's LR, epsilon, betas and decay factor
    are muP's own times the rule's, and the per-step decay the engine applies moves as kappa."""
    for scaling in ("independent", "lr"):
        base = ["param=mup", "param.base_width=32", "width=64", "optim.weight_decay=0.01",
                f"optim.decay_scaling={scaling}", "param.base_steps=300", "param.base_batch_size=64"]
        plain_cfg, ruled_cfg = typed(*base), typed(*base, f"param.sde_rule={rule}")
        for batch, steps in PAIRS:
            kappa = (batch / 64) / ((batch * steps) / (64 * 300))
            one, plain = rows(cfg=at(plain_cfg, batch, steps))
            got, ruled = rows(cfg=at(ruled_cfg, batch, steps))
            assert one == 1.0 and got == pytest.approx(kappa, rel=1e-15)
            for name, r in ruled.items():
                p = plain[name]
                assert r["lr_mult"] == pytest.approx(p["lr_mult"] * kappa**e, rel=1e-14), name
                assert r["eps_mult"] == pytest.approx(p["eps_mult"] * kappa**-e, rel=1e-14), name
                assert (p["beta1"], p["beta2"]) == (0.9, 0.999)
                assert r["beta1"] == pytest.approx(1 - 0.1 * kappa, rel=1e-14)
                assert r["beta2"] == pytest.approx(1 - 0.001 * kappa, rel=1e-14)
                decay = kappa if scaling == "independent" else kappa ** (1 - e)
                assert r["wd_mult"] == pytest.approx(p["wd_mult"] * decay, rel=1e-14), name
            # what the engine applies: the per-step decay x kappa in both modes (LR x decay ~ kappa)
            lr = torch.tensor([2.0**-8, 2.0**-6], dtype=torch.float64)
            for x, y in zip(_decays(at(plain_cfg, batch, steps), lr), _decays(at(ruled_cfg, batch, steps), lr)):
                torch.testing.assert_close(y, x * kappa, rtol=1e-14, atol=0)


def _decays(cfg, lr):
    param = build.parameterization(cfg)
    slots = param.slots(build.model(cfg, param, runs=2, input_shape=(32,), output_dim=10))
    return param.decays(slots, lr, 1.0, cfg.optim)


def test_sde_is_complete_d_at_a_power_of_two():
    """Four times fewer steps than the base (kappa 4): LR x 2, eps / 2, 1 - beta x 4; AdamW's coupled
    decay x 2 (x sqrt(kappa)), so that LR x decay is x 4."""
    kappa, r = rows("param.sde_rule=sde", "train.steps=75", "optim.decay_scaling=lr")
    x = r["layers.2.weight"]
    assert (kappa, x["lr_mult"], x["eps_mult"], x["wd_mult"]) == (4.0, 2.0, 0.5, 2.0)
    assert (x["beta1"], x["beta2"]) == (pytest.approx(0.6, rel=1e-15), pytest.approx(0.996, rel=1e-15))


def test_the_batch_cancels_at_a_fixed_number_of_steps():
    """kappa = (B / B0) / (D / D0) is 1 at the base's steps whatever the batch: the rule says a batch
    changes nothing at fixed steps."""
    for batch in (8, 64, 1024):
        kappa, r = rows("param.sde_rule=sde", f"train.batch_size={batch}", "train.steps=300", "param.base_batch_size=32")
        assert kappa == 1.0 and all((x["lr_mult"], x["beta1"]) == (1.0, 0.9) for x in r.values())


# Ids lrtransfer gave these jobs before param.sde_rule existed (computed at e6bb463)
BEFORE = [([], "873ca84b6e09"), (["param=mup"], "da65b2926dd3"),
          (["param=completep", "model=transformer", "data=text"], "27b80edcb527"),
          (["optim=sgd", "param=modular"], "5f1fa05e117b"), (["param=spectral", "train.steps=75"], "7389baf4280b"),
          (["param=equalized", "train.batch_size=128"], "dcb2743ce0c0"),
          (["optim=muon", "param=mup", "optim.weight_decay=0.1"], "4286137e0f21")]


@pytest.mark.parametrize("over, before", BEFORE)
def test_without_the_rule_every_job_keeps_its_id(over, before):
    assert job_id(compose(*over)) == before
    assert job_id(compose(*over, "param.sde_rule=none")) == before
    # the bases compute nothing without the rule, and the base batch nothing at all
    assert job_id(compose(*over, "param.base_steps=1000", "param.base_batch_size=7")) == before
    if len(over) > 1:
        return
    ruled = compose(*over, "param.sde_rule=sde")
    assert job_id(ruled) != before and "base_batch_size" not in semantic(ruled)["param"]
    assert job_id(ruled) == job_id(compose(*over, "param.sde_rule=sde", "param.base_batch_size=7"))
    assert job_id(compose(*over, "param.sde_rule=sde", "param.base_steps=150")) != job_id(ruled)


@pytest.mark.parametrize("over", [["param=mup", "param.base_width=8", "optim.weight_decay=0.01"],
                                  ["optim=muon", "optim.weight_decay=0.01", "optim.decay_scaling=lr"],
                                  ["param=modular", "optim.weight_decay=0.01"],
                                  ["optim=sgd", "optim.weight_decay=0.01"]])
def test_at_kappa_one_the_rule_is_the_job_without_it(over):
    """At the base's steps every factor is exactly 1: the same numbers as no rule, bit for bit."""
    common = [*SMALL, *over, "train.steps=20"]
    runs = [Run(log2_lr=e, seed=0) for e in (-9, -7)]
    plain = engine.train(build.job(typed(*common)), runs)
    for rule in ("sde", "0.31"):
        ruled = engine.train(build.job(typed(*common, f"param.sde_rule={rule}", "param.base_steps=20")), runs)
        for a, b in zip(plain, ruled, strict=True):
            assert (a.history_loss, a.final_loss, a.eval_loss) == (b.history_loss, b.final_loss, b.eval_loss)


@pytest.mark.parametrize("over", [["param=mup", "param.base_width=8", "optim.weight_decay=0.01"],
                                  ["param=completep", "param.base_width=8", "optim.weight_decay=0.01",
                                   "optim.decay_scaling=lr", "model=transformer", "data=text", "data.seq_len=8"],
                                  ["optim=muon", "optim.weight_decay=0.02"],
                                  ["param=spectral"], ["optim=sgd", "optim.weight_decay=0.01"]])
def test_batched_equals_one_run_at_a_time_in_float64_with_the_rule(over):
    common = [*SMALL, *over, "train.dtype=float64", "train.steps=15", "param.sde_rule=sde", "param.base_steps=45",
              "n_seeds=2"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]
    batched = engine.train(build.job(typed(*common)), runs)
    alone = engine.train(build.job(typed(*common, "engine.batched=false")), runs)
    for a, b in zip(batched, alone, strict=True):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


@pytest.mark.parametrize("over, scaling", [(["param=mup", "param.base_width=8"], "independent"),
                                           (["param=mup", "param.base_width=8"], "lr"), (["optim=muon"], "lr"),
                                           (["width=256"], "independent")])
def test_a_run_under_the_rule_is_the_job_configured_by_hand(over, scaling):
    """kappa = 4 (75 steps on a base of 300), sde: the LR x 2 (one octave up the grid), 1 - beta x 4,
    eps / 2, the decay x 4 (independent) or x 2 (coupled to the LR): number for number in float32.
    width=256 puts the hidden matrix on the run-by-run fused pass (`passes.PER_RUN_MIN`)."""
    common = [*SMALL, *over, "train.steps=75", "optim.weight_decay=0.01", f"optim.decay_scaling={scaling}"]
    optim = typed(*common).optim
    eps = optim.eps
    by_hand = [f"optim.beta1={scaled_beta(optim.beta1, 4.0)!r}", f"optim.beta2={scaled_beta(optim.beta2, 4.0)!r}",
               f"optim.eps={eps / 2!r}", f"optim.weight_decay={0.01 * (4 if scaling == 'independent' else 2)!r}"]
    lrs = (-9, -7, -5)
    ruled = engine.train(build.job(typed(*common, "param.sde_rule=sde")), [Run(log2_lr=e, seed=0) for e in lrs])
    hand = engine.train(build.job(typed(*common, *by_hand)), [Run(log2_lr=e + 1, seed=0) for e in lrs])
    for a, b in zip(ruled, hand, strict=True):
        assert (a.history_loss, a.final_loss, a.eval_loss) == (b.history_loss, b.final_loss, b.eval_loss)
    plain = engine.train(build.job(typed(*common)), [Run(log2_lr=-7, seed=0)])
    assert plain[0].final_loss != ruled[1].final_loss  # the rule moved something


def test_the_fixed_examples_preset_halves_the_steps_as_the_batch_doubles():
    for batch, steps in ((16, 1200), (32, 600), (64, 300), (128, 150), (256, 75)):
        cfg = typed("study=batch_examples", f"train.batch_size={batch}")
        assert (cfg.name, cfg.train.batch_size, cfg.train.steps) == ("batch_examples", batch, steps)
    assert semantic(compose("study=batch_examples", "train.batch_size=64"))["train"]["steps"] == 300


# (case, sweep arguments, the fragment of the one-line error)
BAD = [
    ("a rule that is neither a name nor a number", ["param.sde_rule=sqrt"],
     "param.sde_rule='sqrt' is neither a rule nor a finite number; valid: none, sde"),
    ("an infinite exponent", ["param.sde_rule=inf"], "param.sde_rule='inf' is neither a rule nor a finite number"),
    ("a base of no steps", ["param.sde_rule=sde", "param.base_steps=0"], "param.base_steps must be a positive number of steps, got 0"),
    ("a negative base batch", ["param=mup", "param.base_batch_size=-64"],
     "param.base_batch_size must be a positive number of examples, got -64"),
    ("a kappa that breaks beta1", ["param.sde_rule=sde", "train.steps=25", "train.batch_size=32"],
     "param.sde_rule=sde at train.batch_size=32, train.steps=25: kappa = 12 (base: 300 steps of batch 64) pushes beta1=0.9 to -0.2"),
    ("a kappa that puts beta1 at 0", ["param.sde_rule=sde", "train.steps=30"], "pushes beta1=0.9 to 0 (it stays in (0, 1) while train.steps > 30)"),
    ("a kappa that breaks a beta of the grid", ["param.sde_rule=1", "train.steps=150", "grid.optim.beta1=[0.9,0.4]"],
     "kappa = 2 (base: 300 steps of batch 64) pushes beta1=0.4 to -0.2"),
    ("a kappa that breaks Muon's beta2", ["optim=muon", "optim.beta1=0.99", "param.sde_rule=sde", "train.steps=12"],
     "kappa = 25 (base: 300 steps of batch 64) pushes beta2=0.95 to -0.25"),
]


@pytest.mark.parametrize("case, args, fragment", [pytest.param(*c, id=c[0]) for c in BAD])
def test_bad_rule_input_is_one_line(cli, tmp_path, case, args, fragment):
    code, out, err = cli("sweep", *TINY, *args, f"results_dir={tmp_path}", "name=bad")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, (out, err)
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]
    assert not list(tmp_path.rglob("record.json"))


def test_under_sgd_the_rule_scales_the_lr_and_decay_and_says_so_once(cli, tmp_path):
    code, out, err = cli("sweep", *TINY, "optim=sgd", "param.sde_rule=sde", "train.steps=12", "param.base_steps=48",
                         f"results_dir={tmp_path}", "name=sgd")
    assert code == 0, err
    said = [line for line in (out + err).splitlines() if "param.sde_rule under optim=sgd" in line]
    assert len(said) >= 1 and len(set(said)) == 1, out + err
    assert "only its LR (x kappa^0.5) and decay parts apply" in said[0]
    kappa, r = rows("optim=sgd", "param.sde_rule=sde", "train.steps=75", "optim.weight_decay=0.1")
    assert kappa == 4.0 and all((x["lr_mult"], x["wd_mult"], x["beta1"]) == (2.0, 4.0, None) for x in r.values())


def test_inspect_json_gives_kappa_and_each_tensors_settings(cli):
    import json

    code, out, err = cli("inspect", "param=mup", "param.sde_rule=0.5", "train.steps=1200", "width=256", "--json")
    doc = json.loads(out)
    assert code == 0 and doc["kappa"] == 0.25
    for r in doc["tensors"]:
        assert r["beta1"] == pytest.approx(1 - 0.1 / 4) and r["beta2"] == pytest.approx(1 - 0.001 / 4)
        assert {"lr_mult", "eps_mult", "wd_mult"} <= set(r)
    code, out, _ = cli("inspect", "optim=muon", "param.sde_rule=sde", "train.steps=150", "--json")
    betas = {r["name"]: r["beta1"] for r in json.loads(out)["tensors"]}  # Muon's hidden matrix has none
    assert betas["layers.2.weight"] is None and betas["layers.2.bias"] == pytest.approx(0.8)
    code, text, _ = cli("inspect", "param.sde_rule=sde", "train.steps=1200")
    assert "sde_rule=sde kappa=0.25" in text and "beta1" in text
    code, text, _ = cli("inspect")
    assert "kappa" not in text and "beta1" not in text  # without the rule: the table as it was


def test_the_optimizer_gets_each_tensors_betas():
    """The slots' beta multipliers reach Adam's pass: each tensor's own betas, float where shared."""
    cfg = typed(*SMALL, "param.sde_rule=sde", "train.steps=150")
    built = build.job(cfg)
    ens = Ensemble(built, [Run(log2_lr=-8, seed=0)])
    assert ens.opt.beta1 == [pytest.approx(0.8)] * len(ens.slots)
    assert ens.opt.beta2 == [pytest.approx(0.998)] * len(ens.slots)
    assert all(isinstance(b, float) for b in ens.opt.beta1)
    assert math.isclose(ens.opt.eps[0], 1e-8 / math.sqrt(2), rel_tol=1e-15)


@pytest.mark.parametrize("param", ["standard", "equalized", "mup", "completep", "modular", "spectral", "umup"])
def test_every_parameterization_takes_the_rule(param):
    """The rule is every parameterization's (their options derive from `SdeOptions`): at kappa = 4 each
    tensor's LR moves by 4^0.5 against the rule off, whatever the parameterization's own rules."""
    from lrtransfer import options
    from lrtransfer.options.param.sde import SdeOptions

    assert issubclass(options.of("param")[param], SdeOptions)
    model = ["model=resnet"] if param == "completep" else []  # CompleteP's depth rule needs residual blocks
    base = [f"param={param}", *model, "train.steps=75", "param.base_steps=300"]
    _, plain = rows(*base)
    kappa, ruled = rows(*base, "param.sde_rule=sde")
    assert kappa == 4.0
    for name, r in ruled.items():
        assert r["lr_mult"] == pytest.approx(plain[name]["lr_mult"] * 2.0, rel=1e-14), name

"""muP: the role table at two widths, SP exactly at the base width, and an SP that is really SP."""

from __future__ import annotations

import hashlib
import json
import math
import runpy
from pathlib import Path

import pytest
import torch

from lrtransfer.training import build
from lrtransfer.training import engine
from lrtransfer.training.runs import Run
from lrtransfer.training.build import model as build_model
from lrtransfer.nn import Linear
from lrtransfer.training.build import parameterization as build_param
from tests.conftest import typed

CPU = ["engine.device=cpu"]
SP_STD = lambda fan_in: 1.0 / math.sqrt(3 * fan_in)  # noqa: E731  (U(-1/sqrt(fan_in), 1/sqrt(fan_in)))


def built(*over, seeds=(0,)):
    cfg = typed(*CPU, *over)
    param = build_param(cfg)
    model = build_model(cfg, param, runs=len(seeds), input_shape=(32,), output_dim=10)
    param.initialize(model, list(seeds))
    model.requires_grad_(False)
    return param, {a.role: a for a in model.atoms()}


# The table, written out independently of the implementation: m = width / base_width.
# role -> (init std of the weight, forward weight multiplier, Adam LR (w, b), SGD LR (w, b)).
def table(role: str, m: float, fan_in: int):
    return {
        "input": (SP_STD(fan_in), 1.0, (1.0, 1.0), (m, m)),
        "hidden": (SP_STD(fan_in), 1.0, (1.0 / m, 1.0), (1.0, m)),
        "output": (SP_STD(fan_in) * math.sqrt(m), 1.0 / m, (1.0, 1.0), (m, 1.0)),
    }[role]


@pytest.mark.parametrize("width", [512, 2048])
def test_role_table_at_two_widths(width):
    base = 128
    m = width / base
    over = ["param=mup", f"width={width}", f"param.base_width={base}", "param.readout_zero_init=false"]
    adam, atoms = built(*over)
    sgd, _ = built(*over, "optim=sgd")
    for role, atom in atoms.items():
        std, mult, lr_adam, lr_sgd = table(role, m, atom.fan_in)
        assert float(atom.weight[0].std()) == pytest.approx(std, rel=0.05), role
        assert (atom.weight_mult, atom.bias_mult) == (pytest.approx(mult), 1.0), role
        assert (adam.lr_multiplier(atom, "weight"), adam.lr_multiplier(atom, "bias")) == pytest.approx(lr_adam), role
        assert (sgd.lr_multiplier(atom, "weight"), sgd.lr_multiplier(atom, "bias")) == pytest.approx(lr_sgd), role
    # output bias: SP's draw times sqrt(m), as mup's MuReadout rescales it
    bound = 1.0 / math.sqrt(width) * math.sqrt(m)
    assert float(atoms["output"].bias.abs().max()) <= bound and float(atoms["output"].bias.abs().max()) > 0.5 * bound


def test_readout_zero_init_is_the_default_and_zeroes_only_the_readout():
    mup, atoms = built("param=mup", "width=256", seeds=(4,))
    _, sp_atoms = built("width=256", seeds=(4,))
    assert torch.count_nonzero(atoms["output"].weight) == 0 and torch.count_nonzero(atoms["output"].bias) == 0
    for role in ("input", "hidden"):  # the same draws as SP for everything else
        torch.testing.assert_close(atoms[role].weight, sp_atoms[role].weight, rtol=0, atol=0)


@pytest.mark.parametrize("optim", ["adam", "sgd"])
def test_mup_is_sp_number_for_number_at_the_base_width(optim):
    over = [*CPU, f"optim={optim}", "width=48", "depth=4", "train.steps=25", "train.batch_size=16",
            "data.eval_size=64", "train.dtype=float64"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-8, -5)]
    sp = engine.train(build.job(typed(*over)), runs)
    mup = engine.train(build.job(typed(*over, "param=mup", "param.base_width=48", "param.readout_zero_init=false")), runs)
    for a, b in zip(sp, mup):
        assert a.history_loss == b.history_loss and a.eval_loss == b.eval_loss
    # ... and away from it they differ (the test can tell them apart)
    other = engine.train(build.job(typed(*over, "param=mup", "param.base_width=24", "param.readout_zero_init=false")), runs)
    assert any(a.final_loss != b.final_loss for a, b in zip(sp, other))


def test_standard_is_really_standard_at_any_width():
    """The `mup` pitfall: an "SP" that silently keeps muP's readout. SP has no multipliers,
    one LR, and PyTorch's readout, whatever the width."""
    sp, atoms = built("width=1024")
    for atom in atoms.values():
        assert (atom.weight_mult, atom.bias_mult) == (1.0, 1.0)
        assert sp.lr_multiplier(atom, "weight") == sp.lr_multiplier(atom, "bias") == 1.0
    assert float(atoms["output"].weight[0].std()) == pytest.approx(SP_STD(1024), rel=0.05)


def test_attention_rules_for_the_transformer():
    """Logits scale like 1/d_head, equal to SP's 1/sqrt(d_head) at the base width; queries start at zero."""
    sp = build_param(typed(*CPU, "width=256"))
    base = build_param(typed(*CPU, "param=mup", "width=128", "param.base_width=128"))
    wide = build_param(typed(*CPU, "param=mup", "width=512", "param.base_width=128"))
    assert base.attention_scale(32) == pytest.approx(sp.attention_scale(32)) == pytest.approx(1 / math.sqrt(32))
    assert wide.attention_scale(128) == pytest.approx(base.attention_scale(32) / 4)  # d_head x4 -> 1/4
    q = Linear(512, 512, role="hidden", runs=1, tag="query")
    gen = torch.Generator().manual_seed(0)
    assert torch.count_nonzero(wide.init_weight(q, gen)) == 0
    assert torch.count_nonzero(sp.init_weight(q, gen)) > 0


def test_depth_exponent_scales_residual_branches():
    assert build_param(typed(*CPU, "param=mup")).residual_scales(16) == (1.0, 1.0)
    depth_mup = build_param(typed(*CPU, "param=mup", "param.depth_exponent=0.5"))
    assert depth_mup.residual_scales(16) == (1.0, 0.25)
    stack = depth_mup.residual_stack([Linear(8, 8, role="hidden", runs=1) for _ in range(4)])
    assert [(r.skip, r.branch) for r in stack.layers] == [(1.0, 0.5)] * 4


@pytest.mark.parametrize("model", ["mlp", "transformer"])
def test_every_bias_starts_at_sp_draw_times_sqrt_fan_in_multiplier(model):
    """mup's set_base_shapes rescales the bias of every nn.Linear and conv by sqrt(fan-in
    width multiplier): input biases stay SP's, hidden ones (the transformer's Q, K, V, O and
    MLP Linears too) and the readout's are SP's draw x sqrt(m), the same draw as SP's."""
    over = ["width=256", "model=transformer", "data=text", "depth=1"] if model == "transformer" else ["width=256"]
    m = 256 / 64
    cfg_sp, cfg_mup = typed(*CPU, *over), typed(*CPU, *over, "param=mup", "param.base_width=64",
                                                   "param.readout_zero_init=false")
    shape = ((16,), 40) if model == "transformer" else ((32,), 10)
    atoms = {}
    for name, cfg in (("sp", cfg_sp), ("mup", cfg_mup)):
        p = build_param(cfg)
        net = build_model(cfg, p, runs=1, input_shape=shape[0], output_dim=shape[1])
        p.initialize(net, [3])
        atoms[name] = [a for a in net.atoms() if isinstance(a, Linear)]
    hidden = 0
    for sp, mu in zip(atoms["sp"], atoms["mup"]):
        factor = 1.0 if sp.role == "input" else math.sqrt(m)
        torch.testing.assert_close(mu.bias, sp.bias * factor, rtol=1e-6, atol=0)
        hidden += sp.role == "hidden"
    assert hidden == (6 if model == "transformer" else 1)


def test_the_rule_revision_changes_mup_ids_only():
    """Records made under muP's old rules (revision 1: the bias rule; 2: epsilon / m, the tied table,
    the fused queries) must not be reused: the schema's REVISION joins the job identity when
    non-zero, so SP's and equalized's ids stay as they were."""
    from lrtransfer.config import semantic
    from lrtransfer.store import job_id
    from tests.conftest import compose

    assert semantic(compose("param=mup"))["param"]["revision"] == 2
    for p in ("standard", "equalized", "modular"):
        assert "revision" not in semantic(compose(f"param={p}"))["param"]
    # a pre-revision id: the hash of the same semantic config without the revision
    old = semantic(compose("param=mup"))
    del old["param"]["revision"]
    old_id = hashlib.sha1(json.dumps(old, sort_keys=True, default=str).encode()).hexdigest()[:12]
    assert job_id(compose("param=mup")) != old_id
    sp = semantic(compose())
    assert job_id(compose()) == hashlib.sha1(json.dumps(sp, sort_keys=True, default=str).encode()).hexdigest()[:12]


def test_a_models_own_init_is_rescaled_as_mups_rule_rescales_pytorchs():
    """model.init=own: a user's nn.Linear layers start from their own draws, each times its layer's
    factor: the weight's RMS at the base width over its RMS here (sqrt(fan-in multiplier) for PyTorch's
    1/sqrt(fan_in) init) times muP's variance rule. So with nn.Linear's own init a bias ends as mup's
    set_base_shapes puts it (x1 on the input layer, x sqrt(m) after), the hidden weight keeps its
    draw and the readout's is x sqrt(m), as `init_weight` has them for PyTorch's draws."""
    example = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"
    users_build = runpy.run_path(str(example))["build"]
    width, base = 256, 64
    m = width / base
    _, atoms = built("model=custom", f"model.target={example}:build", f"width={width}", "param=mup",
                     f"param.base_width={base}", "param.readout_zero_init=false")
    torch.manual_seed(0)
    own = [layer for layer in users_build(width, 3, (32,), 10) if isinstance(layer, torch.nn.Linear)]
    # role -> (weight factor, bias factor) over the module's own draw
    want = {"input": (1.0, 1.0), "hidden": (1.0, math.sqrt(m)), "output": (math.sqrt(m), math.sqrt(m))}
    for (role, atom), layer in zip(atoms.items(), own, strict=True):
        for name, factor in zip(("weight", "bias"), want[role]):
            ours, theirs = getattr(atom, name)[0].flatten().double(), getattr(layer, name).detach().flatten().double()
            c = float(ours.norm() / theirs.norm())
            torch.testing.assert_close(ours, c * theirs)  # the module's own draw, times one factor
            assert c == pytest.approx(factor, rel=0.1), (role, name)  # RMS ratios of draws: within 10%


def test_under_muon_the_hidden_matrix_keeps_its_lr_and_the_rest_follow_adams_rule():
    """Muon's orthogonalised hidden update has spectral norm ~1 at every width, what muP asks of a
    hidden matrix: LR x 1 there (Adam's would be 1/m); every tensor Muon hands to its AdamW part
    (input, readout, biases) takes the Adam column of the table."""
    width, base = 512, 128
    m = width / base
    over = ["param=mup", f"width={width}", f"param.base_width={base}", "param.readout_zero_init=false"]
    muon, atoms = built(*over, "optim=muon")
    for role, atom in atoms.items():
        _, _, (w, b), _ = table(role, m, atom.fan_in)
        assert muon.lr_multiplier(atom, "weight") == pytest.approx(1.0 if role == "hidden" else w), role
        assert muon.lr_multiplier(atom, "bias") == pytest.approx(b), role

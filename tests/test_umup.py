"""`param=umup` against Graphcore's `unit-scaling` 0.3.5, and u-muP's defining property.

tests/reference/umup.json is written by scripts/make_umup_fixture.py from the package itself (its
MLP made of its layers and its TransformerDecoder at widths 64 and 256, depths 2 and 4, and its
functions); these tests read only its numbers. Per tensor: init std within 5%, forward and Adam LR
multipliers exact, one AdamW step from the same tensors (its RMS, and its dot products with the
gradient and the tensor) to 1e-9; the residual taus, the GELU and attention gains to 1e-12; the MLP's
loss on given tensors and inputs, and the direction of each gradient (the package rescales gradients
in its backward by a constant per tensor, which Adam ignores but for epsilon).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from lrtransfer.diagnostics.inspect import tensors
from lrtransfer.nn import HIDDEN, OUTPUT, Activation, Embedding, Linear, Residual, Sequential
from lrtransfer.options.data import Task
from lrtransfer.options.param import umup
from lrtransfer.training import build
from tests.conftest import typed
from tests.test_nanogpt_mup import step_of

REF = json.loads((Path(__file__).parent / "reference" / "umup.json").read_text())
ADAMW, GIVEN, SHAPES = REF["adamw"], REF["given"], REF["shapes"]
OPTIM = ["optim.eps=1e-8", f"optim.weight_decay={ADAMW['weight_decay']}", "optim.beta1=0.9", "optim.beta2=0.999",
         "train.dtype=float64"]
MLP = ["model=mlp", "model.activation=gelu", "model.bias=true", "param=umup", *OPTIM]
CASES = list(REF["mlp"])  # "w64 d2", ...
STEP_KEYS = ("step_rms", "step_dot_grad", "step_dot_param")


def built(cfg, input_shape, output_dim):
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=1, input_shape=input_shape, output_dim=output_dim)
    return param, net


def mlp_cfg(case: str, *more: str):
    c = REF["mlp"][case]
    return typed(*MLP, f"width={c['width']}", f"depth={c['depth']}", *more)


def as_ours(t: torch.Tensor, slot) -> torch.Tensor:
    """A tensor in the package's (torch's) layout, (out, in) for a Linear's weight, in lrtransfer's
    storage: (in, out), a bias (1, out); a table (num, dim) as it is."""
    t = t.t() if slot.name == "weight" and slot.atom.kind == "linear" else t
    return t.reshape(slot.tensor.shape[1:])


def as_theirs(t: torch.Tensor, slot) -> torch.Tensor:
    return t.t() if slot.name == "weight" and slot.atom.kind == "linear" else t.reshape(-1) if slot.name == "bias" else t


def one_step(cfg, param, slots, rows) -> list[dict]:
    """One step of lrtransfer's optimizer per tensor, from the fixture's tensors and gradients (drawn in
    the package's layout, seeded by the tensor's index in its named_parameters order)."""
    lr = torch.tensor([ADAMW["lr"]], dtype=torch.float64)
    out = []
    for i, (slot, row) in enumerate(zip(slots, rows, strict=True)):
        draw = lambda seed, std: torch.randn(row["shape"], generator=torch.Generator().manual_seed(seed + i),  # noqa: E731
                                             dtype=torch.float64) * std
        before = as_ours(draw(ADAMW["param_seed"], ADAMW["param_std"]), slot)
        grad = as_ours(draw(ADAMW["grad_seed"], ADAMW["grad_std"]), slot)
        out.append(step_of(cfg, param, slot, before, grad, lr))
    return out


def check_steps(ours: list[dict], rows: list[dict], suffix: str = "") -> None:
    for o, r in zip(ours, rows, strict=True):
        for key in STEP_KEYS:
            assert o[key] == pytest.approx(r[key + suffix], rel=1e-9), (r["name"], key + suffix)


# ---------------------------------------------------------------- the package's MLP, tensor by tensor
@pytest.mark.parametrize("case", CASES)
def test_the_mlp_gets_the_packages_numbers(case):
    cfg = mlp_cfg(case)
    rows, theirs = tensors(cfg, (SHAPES["mlp_in"],), SHAPES["mlp_classes"]), REF["mlp"][case]["tensors"]
    assert len(rows) == len(theirs)
    for ours, ref in zip(rows, theirs):
        assert math.prod(ours["shape"]) == math.prod(ref["shape"]), ref["name"]
        assert ours["init_std"] == pytest.approx(ref["init_std"], rel=0.05, abs=1e-12), ref["name"]
        assert ours["forward_mult"] == ref["forward_mult"], ref["name"]  # exact
        assert ours["lr_mult"] == ref["lr_mult"], ref["name"]  # exact
        assert ours["eps_mult"] == 1.0 and ours["wd_mult"] == 1.0
    for scaling, suffix in (("independent", ""), ("lr", "_lr_decay")):
        c = mlp_cfg(case, f"optim.decay_scaling={scaling}")
        param, net = built(c, (SHAPES["mlp_in"],), SHAPES["mlp_classes"])
        check_steps(one_step(c, param, param.slots(net.double()), theirs), theirs, suffix)


@pytest.mark.parametrize("case, given", [(c, i) for c in CASES for i in range(len(REF["mlp"][c]["given"]))])
def test_the_mlp_computes_the_packages_loss_and_gradient_directions(case, given):
    """Its tensors, inputs and labels given, in float64: the same loss, and each gradient parallel to the
    package's (which its backward multiplies by a constant of the tensor's own)."""
    ref = REF["mlp"][case]["given"][given]
    cfg = mlp_cfg(case, f"param.act_mult={ref['act_mult']}", f"param.loss_mult={ref['loss_mult']}")
    param, net = built(cfg, (SHAPES["mlp_in"],), SHAPES["mlp_classes"])
    net = net.double()
    slots = param.slots(net)
    names = list(ref["grads"])
    with torch.no_grad():
        for i, (slot, row) in enumerate(zip(slots, REF["mlp"][case]["tensors"], strict=True)):
            t = torch.randn(row["shape"], generator=torch.Generator().manual_seed(GIVEN["tensor_seed"] + i), dtype=torch.float64)
            slot.tensor.copy_(as_ours(t, slot).unsqueeze(0))
    x = torch.randn(GIVEN["batch"], SHAPES["mlp_in"], generator=torch.Generator().manual_seed(GIVEN["data_seed"]),
                    dtype=torch.float64)
    y = torch.randint(0, SHAPES["mlp_classes"], (GIVEN["batch"],), generator=torch.Generator().manual_seed(GIVEN["data_seed"]))
    loss = Task.losses(net(x), y)[0]
    assert float(loss.detach()) == pytest.approx(ref["loss"], rel=1e-12)
    loss.backward()
    for i, (slot, name) in enumerate(zip(slots, names, strict=True)):
        shape = REF["mlp"][case]["tensors"][i]["shape"]
        probe = torch.randn(shape, generator=torch.Generator().manual_seed(GIVEN["probe_seed"] + i), dtype=torch.float64)
        g = as_theirs(slot.tensor.grad[0], slot)
        cos = float((g * probe).sum() / (g.norm() * probe.norm()))
        assert cos == pytest.approx(ref["grads"][name]["grad_cos_probe"], rel=1e-9, abs=1e-12), name


# ---------------------------------------------------------------- the package's transformer decoder
def decoder_atom(row: dict) -> Linear | Embedding:
    """An atom of lrtransfer's of the shape and kind the package's tensor is."""
    out, *rest = row["shape"]
    if row["name"].startswith("embedding"):
        atom = Embedding(out, rest[0], runs=1)
    else:
        atom = Linear(rest[0], out, role=OUTPUT if row["mup_type"] == "output" else HIDDEN, runs=1, bias=False)
    atom.in_branch = row["depth"] is not None
    return atom


@pytest.mark.parametrize("case", CASES)
def test_the_decoders_tensors_get_the_packages_numbers(case):
    ref = REF["decoder"][case]
    cfg = typed("param=umup", *OPTIM, f"width={ref['width']}", f"depth={ref['depth']}", "model=transformer",
                "data=text", f"data.seq_len={SHAPES['context']}", f"model.heads={SHAPES['heads']}")
    param = build.parameterization(cfg)
    net = Sequential([decoder_atom(r) for r in ref["tensors"]])
    param.set_multipliers(net)
    net = net.double()
    param.initialize(net, [0])
    slots = param.slots(net)
    for slot, row in zip(slots, ref["tensors"], strict=True):
        assert row["depth"] in (None, ref["depth"])  # a TransformerStack counts layers, not branches
        assert float(slot.tensor.detach().std()) == pytest.approx(row["init_std"], rel=0.05), row["name"]
        assert slot.atom.weight_mult == row["forward_mult"], row["name"]
        assert slot.lr_mult == row["lr_mult"], row["name"]
    for scaling, suffix in (("independent", ""), ("lr", "_lr_decay")):
        c = typed(*cfg_overrides(ref), f"optim.decay_scaling={scaling}")
        check_steps(one_step(c, param, slots, ref["tensors"]), ref["tensors"], suffix)


def cfg_overrides(ref: dict) -> list[str]:
    return ["param=umup", *OPTIM, f"width={ref['width']}", f"depth={ref['depth']}", "model=transformer", "data=text",
            f"data.seq_len={SHAPES['context']}", f"model.heads={SHAPES['heads']}"]


@pytest.mark.parametrize("case", CASES)
def test_the_built_in_transformer_gets_the_decoders_rules(case):
    """Each tensor of the built-in transformer has the package decoder's rule for a tensor of its kind
    and fan-in (Q, K, V and O its fused QKV's and its O's; the MLP's two Linears its linear_1/gate and
    linear_2 of the same shapes; both tables its embedding's; the head its projection's); its residual
    adds are the package's residual_add at the decoder's taus."""
    ref = REF["decoder"][case]
    cfg = typed(*cfg_overrides(ref))
    param, net = built(cfg, (SHAPES["context"],), SHAPES["vocab"])
    theirs = {}
    for r in ref["tensors"]:
        kind = "embedding" if r["name"].startswith("embedding") else r["mup_type"]
        theirs[(kind, r["shape"][-1], r["depth"] is not None)] = r  # (kind, fan_in or width, in a branch)
    seen = 0
    for slot in param.slots(net):
        a = slot.atom
        if slot.name != "weight":
            assert slot.lr_mult == (ref["depth"] ** -0.5 if a.in_branch else 1)  # biases and norms: the depth rule only
            continue
        kind = "embedding" if a.kind == "embedding" else "output" if a.role == OUTPUT else "weight"
        r = theirs[(kind, a.fan_out if kind == "embedding" else a.fan_in, a.in_branch)]
        assert (a.weight_mult, slot.lr_mult) == (r["forward_mult"], r["lr_mult"]), (a, r["name"])
        seen += 1
    assert seen == 2 + 6 * ref["depth"] + 1  # two tables, Q K V O and two MLP Linears a block, the head
    mixes = [(m.skip, m.branch) for m in net.modules() if isinstance(m, Residual)]
    taus = [t for layer in ref["taus"] for t in layer]
    assert len(mixes) == len(taus)
    for (skip, branch), tau in zip(mixes, taus):
        assert (skip, branch) == pytest.approx((1 / (1 + tau**2) ** 0.5, tau / (1 + tau**2) ** 0.5), rel=1e-12)


@pytest.mark.parametrize("case", CASES)
def test_resnet_blocks_get_the_packages_depth_rules(case):
    """ResNet-S's blocks (with layer norm) against the package's DepthSequential of (LayerNorm with
    gain and bias, Linear with a bias) blocks: each tensor kind's forward and LR multipliers inside a
    depth container (x depth^-1/2 on every LR, norms and biases too); outside them (the input layer,
    the readout) no depth factor."""
    ref = REF["blocks"][case]
    theirs = {}
    for r in ref["tensors"]:
        kind = {"norm": "gain", "weight": "weight", "bias": "bias"}[r["mup_type"]]
        kind = "norm bias" if r["name"].endswith(".0.bias") else kind
        theirs.setdefault(kind, r)
    cfg = typed("model=resnet", "model.layer_norm=true", "model.activation=gelu", "param=umup", f"width={ref['width']}",
                f"depth={ref['depth']}")
    param, net = built(cfg, (16,), 10)
    inside = 0
    for slot in param.slots(net):
        a = slot.atom
        if not a.in_branch:
            assert slot.lr_mult == (1.0 if a.role == OUTPUT or slot.name != "weight" else 16**-0.5), slot.name
            continue
        kind = "gain" if slot.name == "gain" else "norm bias" if a.kind == "gain" else slot.name
        r = theirs[kind]
        assert slot.lr_mult == r["lr_mult"], (kind, r["name"])
        if a.kind == "linear":
            assert (a.weight_mult if kind == "weight" else a.bias_mult) == r["forward_mult"], kind
        inside += 1
    assert inside == 6 * ref["depth"]  # a block: the norm's gain and bias, two Linears' weight and bias


# ---------------------------------------------------------------- the package's functions
def test_the_gelu_gain_is_the_packages_and_relus_is_its_limit():
    gains = REF["functions"]["gelu_gain"]
    for mult, gain in gains.items():
        assert umup.gelu_gain(float(mult)) == pytest.approx(gain, rel=1e-12), mult
    assert umup.RELU_GAIN == pytest.approx(gains["1000"], rel=1e-6)  # the package's GELU as its mult grows
    z = torch.randn(2_000_000, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    assert float(torch.relu(z).std()) * umup.RELU_GAIN == pytest.approx(1.0, abs=2e-3)


@pytest.mark.parametrize("act, mult", [("gelu", 1.0), ("gelu", 4.0), ("gelu", 0.25), ("relu", 1.0)])
def test_the_models_nonlinearities_are_unit_scaled(act, mult):
    cfg = typed("model=mlp", f"model.activation={act}", "param=umup", f"param.act_mult={mult}", "width=32")
    _, net = built(cfg, (16,), 10)
    acts = [m for m in net.modules() if isinstance(m, Activation)]
    gain = REF["functions"]["gelu_gain"][f"{mult:g}"] if act == "gelu" else umup.RELU_GAIN
    assert acts and all((m.mult, m.out) == pytest.approx((mult, gain / mult), rel=1e-12) for m in acts)


def test_the_attention_gain_is_the_packages():
    for row in REF["functions"]["attention_gain"]:
        assert row["gain_spread"] < 1e-12  # one factor on the whole output
        assert umup.attention_gain(row["d_head"], row["seq_len"], row["mult"]) == pytest.approx(row["gain"], rel=1e-12)


@pytest.mark.parametrize("mult", [0.5, 2.0])
def test_the_built_in_attention_computes_with_the_packages_scales(mult):
    row = next(r for r in REF["functions"]["attention_gain"] if (r["d_head"], r["seq_len"], r["mult"]) == (16, 64, mult))
    cfg = typed("model=transformer", "data=text", "data.seq_len=64", "model.heads=4", "width=64", "depth=1",
                "param=umup", f"param.attn_mult={mult}")
    _, net = built(cfg, (64,), 20)
    attn = next(m for m in net.modules() if hasattr(m, "out_at_context"))
    assert attn.scale == mult / 16
    assert attn.out_at_context == pytest.approx(row["gain"], rel=1e-12)
    assert attn.out_mult(8) == pytest.approx(next(r["gain"] for r in REF["functions"]["attention_gain"]
                                                  if (r["d_head"], r["seq_len"], r["mult"]) == (16, 8, mult)), rel=1e-12)


def test_the_residual_rule_is_the_packages():
    for tau, f in REF["functions"]["residual_add"].items():
        t = float(tau)
        assert (1 / (1 + t**2) ** 0.5, t / (1 + t**2) ** 0.5) == pytest.approx((f["skip"], f["branch"]), rel=1e-12)
    assert REF["functions"]["add"] == pytest.approx(2**-0.5, rel=1e-15)
    for key, layers in REF["taus"].items():
        rm, ratio, n = (float(p.split("=")[1]) for p in key.split())
        ours = umup.taus(["attention", "mlp"] * int(n), rm, ratio)
        assert ours == pytest.approx([t for layer in layers for t in layer], rel=1e-12), key


@pytest.mark.parametrize("rm, ratio", [(0.5, 2.0), (2.0, 0.5)])
def test_the_transformers_residual_adds_follow_the_multipliers(rm, ratio):
    ref = REF["taus"][f"residual_mult={rm:g} residual_attn_ratio={ratio:g} layers=4"]
    cfg = typed("model=transformer", "data=text", "data.seq_len=8", "width=32", "depth=4", "param=umup",
                f"param.residual_mult={rm}", f"param.residual_attn_ratio={ratio}")
    _, net = built(cfg, (8,), 20)
    mixes = [x for m in net.modules() if isinstance(m, Residual) for x in (m.skip, m.branch)]
    taus = [t for layer in ref for t in layer]
    assert mixes == pytest.approx([x for t in taus for x in (1 / (1 + t**2) ** 0.5, t / (1 + t**2) ** 0.5)], rel=1e-12)


def test_the_loss_multiplier_is_the_packages_cross_entropy():
    ce = REF["functions"]["cross_entropy"]
    logits = torch.randn((ce["rows"], ce["classes"]), generator=torch.Generator().manual_seed(ce["logits_seed"]),
                         dtype=torch.float64)
    labels = torch.randint(0, ce["classes"], (ce["rows"],), generator=torch.Generator().manual_seed(ce["logits_seed"]))
    for mult, loss in ce["loss"].items():
        assert float(Task.losses((float(mult) * logits).unsqueeze(0), labels)[0]) == pytest.approx(loss, rel=1e-12)


# ---------------------------------------------------------------- a published model (model=custom)
LLAMA = ["model=custom", "model.target=transformers:LlamaForCausalLM", "model.config=transformers:LlamaConfig",
         "model.width_key={hidden_size: 1, intermediate_size: 4}", "model.depth_key=num_hidden_layers",
         "model.config_kwargs={num_attention_heads: 4, num_key_value_heads: 4}", "data=text", "data.seq_len=16"]


@pytest.mark.parametrize("case", ["w64 d2", "w64 d4"])
def test_a_published_llama_gets_the_decoders_rules(case):
    """Llama (transformers, untied, as the package's decoder: RMSNorm, SwiGLU MLP 4x wide) under umup:
    each weight has the package decoder's forward and LR multipliers for its kind and fan-in, its norm
    gains u-muP's vector rule, its blocks' tensors the depth rule (their branch outputs found by name)."""
    pytest.importorskip("transformers", reason="transformers is in the hf extra")
    ref = REF["decoder"][case]
    cfg = typed(*LLAMA, "param=umup", f"width={ref['width']}", f"depth={ref['depth']}")
    rows = tensors(cfg, (16,), 64)
    # the embedding, each layer's q, k, v, o, gate, up, down and two norms, the final norm, the readout
    assert len(rows) == 9 * ref["depth"] + 3, [r["name"] for r in rows]
    theirs = {("embedding" if r["name"].startswith("embedding") else r["mup_type"], r["shape"][-1], r["depth"] is not None): r
              for r in ref["tensors"]}
    for r in rows:
        in_branch = ".layers." in r["name"]
        if r["role"] == "vector":
            assert (r["init_std"], r["forward_mult"], r["lr_mult"]) == (0.0, 1.0, ref["depth"] ** -0.5 if in_branch else 1)
            continue
        kind = "embedding" if "embed_tokens" in r["name"] else "output" if "readout" in r["role"] else "weight"
        t = theirs[(kind, r["shape"][-1], in_branch)]  # torch's (out, in) layout: its last dimension is the fan-in
        assert (r["forward_mult"], r["lr_mult"]) == (t["forward_mult"], t["lr_mult"]), r["name"]
        assert r["init_std"] == pytest.approx(1.0, rel=0.05), r["name"]

"""`param=completep` on nanoGPT's model.py as published, against nanoGPT-mup's corrected model.py; the same
rules on the built-in transformer, GPT-2 and Llama.

tests/reference/completep.json is written by scripts/make_completep_fixture.py from nanoGPT-mup's model.py
with the epsilon fix (`mup_enabled`, `depth_alpha_enabled`): these tests read only its numbers. With
nanoGPT-mup's constants (`tests/test_nanogpt_mup.CONSTANTS`) and torch's AdamW as it sets it up
(`decay_scaling=lr`, no decay on biases and norms), per tensor: init std within 5%, the branch's, the
readout's and the attention's multipliers, LR, epsilon and weight decay exact, one AdamW step from the
same tensors at float64 precision.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lrtransfer.diagnostics.inspect import branch_mult, tensors
from lrtransfer.training import build
from tests.conftest import typed
from tests.test_nanogpt_mup import CONSTANTS, INPUT, OPTIM, decay_per_step, forward_mults, one_step
from tests.test_nanogpt_mup import nanogpt  # noqa: F401  (the fixture: nanoGPT's model.py as published)
from tests.test_published import FAMILIES, SMALL, batched_equals_alone, family  # noqa: F401

REF = json.loads((Path(__file__).parent / "reference" / "completep.json").read_text())
CASES = REF["cases"]


def completep(over, case: dict, *more: str):
    return typed(*over, "param=completep", f"param.base_width={case['base_width']}", f"width={case['width']}",
                 f"param.base_depth={case['base_depth']}", f"depth={case['layers']}", f"param.alpha={case['alpha']}",
                 *OPTIM, *CONSTANTS, "train.dtype=float64", *more)


def model_of(cfg):
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=1, input_shape=INPUT[0], output_dim=INPUT[1])
    return param, net


@pytest.mark.parametrize("name", [pytest.param(n, marks=[pytest.mark.slow] if n.startswith("1024") else [])
                                  for n in CASES])  # 1024x8: 100M parameters in float64, ~1 min
def test_completep_gives_nanogpt_mups_numbers(nanogpt, name):
    case = CASES[name]
    cfg = completep([a for a in nanogpt if not a.startswith("depth=")], case)
    rows, theirs = tensors(cfg, *INPUT), case["tensors"]
    for ours, ref in zip(rows, theirs, strict=True):
        key = ref["name"]
        assert ours["name"] == key
        assert ours["init_std"] == pytest.approx(ref["init_std"], rel=0.05, abs=1e-12), key
        assert (ours["lr_mult"], ours["eps_mult"]) == pytest.approx((ref["lr_mult"], ref["eps_mult"]), rel=1e-15), key
        assert decay_per_step(cfg, ours) == pytest.approx(decay_per_step(cfg, ref), rel=1e-15, abs=0), key
    want = {k: case["forward"][k] for k in ("readout", "attention")}
    assert forward_mults(cfg) == pytest.approx(want, rel=1e-15)
    assert branch_mult(model_of(cfg)[1]) == pytest.approx(case["forward"]["branch"], rel=1e-15)
    for ours, ref in zip(one_step(cfg, theirs), theirs):
        for key in ("step_rms", "step_dot_grad", "step_dot_param"):
            assert ours[key] == pytest.approx(ref[key], rel=1e-10), (ref["name"], key)


def test_the_fixture_holds_the_depth_rules():
    """The fixture is not muP's alone: the branch, the hidden LR and the hidden epsilon move with depth."""
    one, half = CASES["128x4 alpha=1"], CASES["128x4 alpha=0.5"]
    assert (one["forward"]["branch"], half["forward"]["branch"]) == (0.5, pytest.approx(2**-0.5))
    hidden = lambda c: next(r for r in c["tensors"] if r["name"].endswith("h.0.mlp.c_fc.weight"))  # noqa: E731
    assert hidden(one)["lr_mult"] == 0.5 and hidden(half)["lr_mult"] == pytest.approx(0.5 * 2**-0.5)
    assert hidden(one)["eps_mult"] == 0.25 and hidden(one)["wd_mult"] == 2


BUILT_IN = ["model=transformer", "data=text", "data.seq_len=8", "engine.device=cpu", "param.base_width=16", "width=32"]


@pytest.mark.parametrize("alpha", [1.0, 0.5])
def test_the_built_in_transformer_gets_the_same_rules(alpha):
    """Depth 8 on base 2 (L = 4): branches x L^-alpha; inside them LR x L^(alpha-1), eps x L^-alpha
    over muP's; outside (embeddings, final norm, readout) muP's own."""
    cfg = typed(*BUILT_IN, "depth=8", "param=completep", f"param.alpha={alpha}")
    mup = {r["name"]: r for r in tensors(typed(*BUILT_IN, "depth=8", "param=mup"), (8,), 20)}
    param, net = model_of(cfg)
    assert branch_mult(net) == 4**-alpha
    inside = outside = 0
    for r in tensors(cfg, (8,), 20):
        m = mup[r["name"]]
        if ".block." in r["name"]:
            inside += 1
            assert r["lr_mult"] == pytest.approx(m["lr_mult"] * 4 ** (alpha - 1), rel=1e-15)
            assert r["eps_mult"] == pytest.approx(m["eps_mult"] * 4**-alpha, rel=1e-15)
        else:
            outside += 1
            assert (r["lr_mult"], r["eps_mult"]) == (m["lr_mult"], m["eps_mult"]), r["name"]
        assert r["wd_mult"] == (2.0 if r["role"] == "hidden" else 1.0), r["name"]
    assert inside == 8 * 16 and outside == 6  # 16 tensors a block; tok, pos, final LN gain and bias, head


def test_at_its_base_depth_completep_is_mup():
    at_base = tensors(typed(*BUILT_IN, "depth=2", "param=completep"), (8,), 20)
    mup = tensors(typed(*BUILT_IN, "depth=2", "param=mup"), (8,), 20)
    for a, b in zip(at_base, mup, strict=True):
        assert {k: v for k, v in a.items() if k != "wd_mult"} == {k: v for k, v in b.items() if k != "wd_mult"}


@pytest.mark.parametrize("scaling, hidden_decay", [("lr", 0.5 * 0.1 * 2 * 1e-2), ("independent", 0.1)])
def test_weight_decay_times_m_keeps_lr_times_wd(scaling, hidden_decay):
    """nanoGPT-mup's x m on hidden weights undoes their LR's 1/m in torch's lr x wd (decay_scaling=lr);
    under `independent` the decay is wd per step already and is left so."""
    cfg = typed(*BUILT_IN, "depth=2", "param=completep", "optim.weight_decay=0.1", f"optim.decay_scaling={scaling}")
    param, net = model_of(cfg)
    slots = param.slots(net)
    decays = param.decays(slots, torch.tensor([1e-2], dtype=torch.float64), 1.0, cfg.optim)
    hidden = [float(d) for s, d in zip(slots, decays) if s.atom.role == "hidden" and s.name == "weight"]
    assert hidden and hidden == pytest.approx([hidden_decay] * len(hidden), rel=1e-12)


@pytest.mark.parametrize("width, depth", [(16, 2), (32, 4)])  # each width and depth once: the suite's budget
def test_gpt2_and_llama_batched_equal_one_at_a_time(family, depth, width):  # noqa: F811
    """A completep sweep on a published family (tiny configs, base width 8, base depth 2: m 2 and 4,
    branch multiplier 1 and 1/2): the branch outputs found by name, K runs at once equal to one at
    a time in float64."""
    name, over = family
    if name == "nanogpt":
        pytest.skip("nanoGPT: test_completep_gives_nanogpt_mups_numbers")
    cfg = [*over, *[a for a in SMALL if a != "depth=1"], f"depth={depth}", f"width={width}", "param=completep",
           "param.base_width=8"]
    param, net = build_small(cfg)
    outs = [a.path for a in net.atoms() if a.branch_output]
    assert len(outs) == 2 * depth and branch_mult(net) == 2 / depth, outs
    batched_equals_alone(*cfg)


def build_small(cfg):
    c = typed(*cfg)
    param = build.parameterization(c)
    return param, build.model(c, param, runs=1, input_shape=(8,), output_dim=20)


def test_mup_depth_exponent_reaches_a_published_model(nanogpt):
    """mup's L^-depth_exponent through the same branch outputs, L the number of branches (2 a block)."""
    cfg = typed(*nanogpt, "param=mup", "param.base_width=256", "width=256", "param.depth_exponent=0.5")
    assert branch_mult(model_of(cfg)[1]) == pytest.approx(4**-0.5)


def test_a_published_models_branch_is_multiplied_in_its_forward(nanogpt):
    """What c_proj computes in nanoGPT's own forward is b x (y W^T + c) with the stored W and c,
    b = nanoGPT-mup's branch multiplier: the whole branch multiplied, seen from inside the module."""
    case = CASES["128x4 alpha=0.5"]
    cfg = completep([a for a in nanogpt if not a.startswith("depth=")], case)
    param, net = model_of(cfg)
    param.initialize(net, [0])
    seen = {}
    proj = net.net.transformer.h[1].mlp.c_proj
    hook = proj.register_forward_hook(lambda m, i, o: seen.update(y=i[0].detach(), out=o.detach()))
    with torch.no_grad():
        net(torch.randint(0, INPUT[1], (2, 16)))
    hook.remove()
    atom = next(a for a in net.atoms() if getattr(a, "path", "") == "transformer.h.1.mlp.c_proj")
    plain = torch.nn.functional.linear(seen["y"], atom.weight.detach()[0], atom.bias.detach()[0])
    assert case["forward"]["branch"] == pytest.approx(2**-0.5)
    assert seen["out"] == pytest.approx(case["forward"]["branch"] * plain, rel=1e-5, abs=1e-7)  # float32


def test_inspect_shows_the_branch_multiplier_and_the_attention_scale(family, cli):  # noqa: F811
    """`inspect --json`: at its top the branches' multiplier and the factor on q.k a forward computes
    with; in its notes, the published model's branch outputs."""
    name, over = family
    code, out, err = cli("inspect", *over, *[a for a in SMALL if a != "depth=1"], "depth=4", "width=32",
                         "param=completep", "param.base_width=16", "param.alpha=0.5", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["branch_mult"] == pytest.approx(2**-0.5)
    assert doc["attention_scale"] == pytest.approx(8**0.5 / 16)  # muP's sqrt(d_base) / d, 2 heads of 16
    outs = {"nanogpt": "transformer.h.0.attn.c_proj, transformer.h.0.mlp.c_proj", "gpt2": "transformer.h.0.attn.c_proj",
            "llama": "model.layers.0.self_attn.o_proj, model.layers.0.mlp.down_proj"}[name]
    assert any(n.startswith("note: residual branches end in ") and outs in n and "(8 in all)" in n for n in doc["notes"])


def test_inspect_of_the_built_in_transformer(cli):
    code, out, err = cli("inspect", *BUILT_IN, "depth=8", "param=completep", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert (doc["branch_mult"], doc["attention_scale"]) == (0.25, pytest.approx(4**0.5 / 8))  # 4 heads: d 8, d_base 4


# Each built-in model, with data of a kind it reads (its input shape) and the overrides that choose it
EACH_MODEL = {"mlp": ((32,), []), "resnet": ((32,), []), "cnn": ((1, 8, 8), ["data=mnist"]),
            "resnet_cnn": ((1, 8, 8), ["data=mnist"]), "cnn1d": ((1, 40), ["data=mnist1d"]),
            "transformer": ((8,), ["data=text"])}


@pytest.mark.parametrize("model", list(EACH_MODEL))
@pytest.mark.parametrize("rule", [["param=completep"], ["param=mup", "param.depth_exponent=0.5"]],
                         ids=["completep", "depth-muP"])
def test_a_depth_rule_is_refused_on_a_built_in_model_without_residual_branches(model, rule):
    """param=completep on the MLP was muP, said nowhere: a depth study under it measured muP. A model
    without branches is refused, as a custom one is; those with branches build."""
    shape, over = EACH_MODEL[model]
    cfg = typed(f"model={model}", *over, *rule, "depth=4", "width=16")
    param = build.parameterization(cfg)
    if model in ("resnet", "resnet_cnn", "transformer"):
        net = build.model(cfg, param, runs=1, input_shape=shape, output_dim=10)
        assert any(a.in_branch for a in net.atoms())
        return
    with pytest.raises(build.ConfigError) as e:
        build.model(cfg, param, runs=1, input_shape=shape, output_dim=10)
    assert str(e.value) == (f"param={cfg.param.name} multiplies residual branches by its depth rule, and model={model} has "
                            "none (its layers are one chain): a depth study under it would measure the rule without its "
                            "depth part; models with residual branches: resnet, resnet_cnn, transformer, and custom where "
                            "they are found or named (model.branch_outputs)")


@pytest.mark.parametrize("glob, fragment", [
    ("*", "model.branch_outputs=* gives the branch transformer.h.0.attn 2 output layers (transformer.h.0.attn.c_attn, "
          "transformer.h.0.attn.c_proj), which would multiply it 2 times; it matched transformer.h.0.attn.c_attn, "
          "transformer.h.0.attn.c_proj, transformer.h.0.mlp.c_fc, transformer.h.0.mlp.c_proj, transformer.h.1.attn.c_attn, "
          "transformer.h.1.attn.c_proj, ...: match one Linear a branch, its last (e.g. '*.c_proj')"),
    ("*.mlp.*", "model.branch_outputs=*.mlp.* gives the branch transformer.h.0.mlp 2 output layers"),
    ("*.c_attn", "model.branch_outputs=*.c_attn matches transformer.h.0.attn.c_attn, which is not the last Linear of its "
                 "branch transformer.h.0.attn (transformer.h.0.attn.c_proj follows it); it matched "
                 "transformer.h.0.attn.c_attn, transformer.h.1.attn.c_attn: match each branch's last Linear (e.g. '*.c_proj')"),
    ("*.attn.c_proj", "model.branch_outputs=*.attn.c_proj leaves the branch transformer.h.0.mlp (its Linears: "
                      "transformer.h.0.mlp.c_fc, transformer.h.0.mlp.c_proj) with no output layer, so a depth rule would "
                      "scale the other branches and not it"),
    ("transformer.h.0.*.c_proj", "model.branch_outputs=transformer.h.0.*.c_proj names the branches of 1 of 2 blocks and "
                                 "not those of transformer.h.1"),
    ("*.c_proj", None),  # each branch's last Linear, once: as the known families' default finds them
])
def test_a_branch_glob_must_name_each_branchs_last_linear_once(nanogpt_over, cli, glob, fragment):
    """A glob matching several Linears of a branch multiplied the branch once per match (only an inspect
    note listed them); one matching a Linear before its branch's end multiplied no branch output; one
    missing some branches (the MLP's, a block's) scaled the rest alone."""
    code, out, err = cli("inspect", *nanogpt_over, *SMALL, "depth=2", "param=completep", f"model.branch_outputs={glob}")
    if fragment is None:
        assert code == 0 and "residual branches end in transformer.h.0.attn.c_proj, transformer.h.0.mlp.c_proj, " in out, err
        return
    assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: {fragment}"), err


@pytest.fixture
def nanogpt_over():
    from tests.test_published import NANOGPT

    return ["model=custom", *(o.format(path=NANOGPT) for o in FAMILIES["nanogpt"])]

"""lrtransfer's `mup` on nanoGPT's model.py as published, against nanoGPT-mup's own model.py; `standard`
against nanoGPT and GPT-2 as published.

tests/reference/nanogpt_mup.json is written by scripts/make_nanogpt_mup_fixture.py from their code
(nanoGPT-mup's model.py with the epsilon fix, karpathy's nanoGPT, transformers' GPT-2): these tests
read only its numbers. lrtransfer trains tests/nanogpt_standin.py (karpathy's names, draws and
init; LRTRANSFER_NANOGPT runs the original).

- How muP changes each tensor from width 256 (the base) to 1024 is nanoGPT-mup's: init std (within
  5%: both are random draws), the readout's and the attention's multipliers, LR, epsilon and weight
  decay (exact), with `mup`'s defaults.
- Where the two differ by a constant, not a rule (nanoGPT-mup's hidden weights all N(0, 0.02^2/m),
  dropping nanoGPT's 1/sqrt(2 n_layer) on c_proj; its attention 1/d with no base-width constant; its
  queries not zeroed), options give its absolute numbers, and one AdamW step from the same tensors
  in float64 lands where its own does.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lrtransfer.diagnostics.inspect import tensors
from lrtransfer.training import build
from lrtransfer.training.ensemble import apply_updates
from tests.conftest import typed
from tests.test_published import NANOGPT, Recorder

REF = json.loads((Path(__file__).parent / "reference" / "nanogpt_mup.json").read_text())
SHAPES, ADAMW = REF["shapes"], REF["adamw"]
THEIRS = REF["nanogpt_mup"]
INPUT = ((SHAPES["context"],), SHAPES["vocab"])
# torch's AdamW as nanoGPT-mup's configure_optimizers and train.py set it up: decay lr x wd, none on biases and norms
OPTIM = ["optim=adam", f"optim.eps={ADAMW['eps']}", f"optim.beta1={ADAMW['betas'][0]}", f"optim.beta2={ADAMW['betas'][1]}",
         f"optim.weight_decay={ADAMW['weight_decay']}", "optim.decay_scaling=lr", "optim.decay_1d=false"]
# nanoGPT-mup's constants where they differ from muP's rules by a constant
CONSTANTS = ["param.hidden_std=0.02", "param.attn_mult=1", "param.zero_query=false"]


@pytest.fixture(scope="module")
def nanogpt() -> list[str]:
    path = NANOGPT
    return ["model=custom", f"model.target={path}:GPT", f"model.config={path}:GPTConfig", "model.width_key=n_embd",
            "model.depth_key=n_layer", f"model.config_kwargs={{n_head: {SHAPES['heads']}}}", f"depth={SHAPES['layers']}",
            "data=text", "engine.device=cpu"]


def mup(nanogpt, width: int, *more: str):
    return typed(*nanogpt, "param=mup", f"param.base_width={SHAPES['base_width']}", f"width={width}", *OPTIM, *more)


def forward_mults(cfg) -> dict:
    """The readout's multiplier (on its tied use) and the scale attention is computed with, on a forward."""
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=1, input_shape=INPUT[0], output_dim=INPUT[1])
    param.initialize(net, [0])
    with torch.no_grad(), Recorder() as seen:
        net(torch.randint(0, INPUT[1], (2, SHAPES["context"])))
    assert len(set(seen.scales)) == 1, seen.scales
    tied = next(a for a in net.atoms() if a.tied is not None)
    return {"readout": tied.tied.weight_mult, "attention": seen.scales[0]}


def decay_per_step(cfg, row: dict) -> float:
    """The factor a step multiplies the tensor by, 1 - decay, as lr x lr_mult x wd x wd_mult (torch's AdamW)."""
    return ADAMW["lr"] * row["lr_mult"] * ADAMW["weight_decay"] * row["wd_mult"]


def test_mup_changes_each_tensor_from_width_256_to_1024_as_nanogpt_mup(nanogpt):
    ours = {w: tensors(mup(nanogpt, w), *INPUT) for w in (256, 1024)}
    theirs = {w: THEIRS[str(w)]["tensors"] for w in (256, 1024)}
    assert [r["name"] for r in ours[256]] == [r["name"] for r in theirs[256]]
    for i, name in enumerate(r["name"] for r in theirs[256]):
        a, b, x, y = ours[256][i], ours[1024][i], theirs[256][i], theirs[1024][i]
        if x["init_std"]:
            assert b["init_std"] / a["init_std"] == pytest.approx(y["init_std"] / x["init_std"], rel=0.05), name
        else:
            assert a["init_std"] == b["init_std"] == 0, name
        for key in ("lr_mult", "eps_mult"):
            assert b[key] / a[key] == y[key] / x[key], (name, key)
        assert (a["wd_mult"] == 0) == (x["wd_mult"] == 0) and (b["wd_mult"] == 0) == (y["wd_mult"] == 0), name
        if x["wd_mult"]:
            assert b["wd_mult"] / a["wd_mult"] == y["wd_mult"] / x["wd_mult"], name
    mults = {w: forward_mults(mup(nanogpt, w)) for w in (256, 1024)}
    for key in ("readout", "attention"):
        assert mults[1024][key] / mults[256][key] == THEIRS["1024"]["forward"][key] / THEIRS["256"]["forward"][key], key


@pytest.mark.parametrize("width", [256, pytest.param(1024, marks=pytest.mark.slow)])  # 1024: 25M parameters, ~10 s
def test_mup_with_nanogpt_mups_constants_gives_its_numbers(nanogpt, width):
    """Init std (5%), multipliers, LR, epsilon and weight decay (exact), and one AdamW step in float64."""
    cfg = mup(nanogpt, width, *CONSTANTS, "train.dtype=float64")
    rows, theirs = tensors(cfg, *INPUT), THEIRS[str(width)]["tensors"]
    for ours, ref in zip(rows, theirs, strict=True):
        name = ref["name"]
        assert ours["name"] == name
        assert ours["init_std"] == pytest.approx(ref["init_std"], rel=0.05, abs=1e-12), name
        assert (ours["lr_mult"], ours["eps_mult"]) == (ref["lr_mult"], ref["eps_mult"]), name
        assert decay_per_step(cfg, ours) == pytest.approx(decay_per_step(cfg, ref), rel=1e-15, abs=0), name
    want = {k: THEIRS[str(width)]["forward"][k] for k in ("readout", "attention")}
    assert forward_mults(cfg) == pytest.approx(want, rel=1e-15)
    for ours, ref in zip(one_step(cfg), theirs):
        for key in ("step_rms", "step_dot_grad", "step_dot_param"):
            assert ours[key] == pytest.approx(ref[key], rel=1e-10), (ref["name"], key)


def one_step(cfg, theirs: list[dict] = THEIRS["256"]["tensors"]) -> list[dict]:
    """One step of lrtransfer's optimizer, from the fixture's tensors and gradients, tensor by tensor
    (Adam acts elementwise: each tensor's step depends on its own numbers and multipliers only).
    theirs: the reference's rows, in its named_parameters order (which seeds each tensor)."""
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=1, input_shape=INPUT[0], output_dim=INPUT[1]).double()
    names = net.user_names()
    order = {r["name"]: i for i, r in enumerate(theirs)}
    lr = torch.tensor([ADAMW["lr"]], dtype=torch.float64)
    out = {}
    for slot in param.slots(net):
        name = names[id(slot.tensor)]
        i = order[name]
        shape = slot.tensor.shape[1:]
        before = torch.randn(shape, generator=torch.Generator().manual_seed(ADAMW["param_seed"] + i), dtype=torch.float64)
        grad = torch.randn(shape, generator=torch.Generator().manual_seed(ADAMW["grad_seed"] + i), dtype=torch.float64)
        before, grad = before * ADAMW["param_std"], grad * ADAMW["grad_std"]
        out[name] = step_of(cfg, param, slot, before, grad, lr)
        slot.tensor.grad = None
    return [out[r["name"]] for r in theirs]


def step_of(cfg, param, slot, before, grad, lr) -> dict:
    """One step of lrtransfer's optimizer on one tensor set to `before` with gradient `grad` (storage
    shape, one run): the step d = after - before as RMS(d), sum(d * grad) and sum(d * before)."""
    with torch.no_grad():
        slot.tensor.copy_(before.unsqueeze(0))
    opt = build.optimizer(cfg, [slot])
    updates = param.updates([slot], opt.directions([grad.unsqueeze(0)]), lr)
    with torch.no_grad():
        apply_updates([slot], updates, param.decays([slot], lr, 1.0, cfg.optim))
    d = slot.tensor.detach()[0] - before
    return {"step_rms": float(d.pow(2).mean().sqrt()), "step_dot_grad": float((d * grad).sum()),
            "step_dot_param": float((d * before).sum())}


@pytest.mark.parametrize("width", [256, 1024])
def test_standard_is_nanogpt_as_published(nanogpt, width):
    rows = tensors(typed(*nanogpt, "param=standard", f"width={width}"), *INPUT)
    for ours, ref in zip(rows, REF["nanogpt"][str(width)], strict=True):
        assert ours["name"] == ref["name"]
        assert ours["init_std"] == pytest.approx(ref["init_std"], rel=0.05, abs=1e-12), ref["name"]


@pytest.mark.parametrize("width", [256, 1024])
def test_standard_is_gpt2_as_published(width):
    pytest.importorskip("transformers")
    over = ["model=custom", "model.target=transformers:GPT2LMHeadModel", "model.config=transformers:GPT2Config",
            "model.width_key=n_embd", "model.depth_key=n_layer", f"model.config_kwargs={{n_head: {SHAPES['heads']}}}",
            f"depth={SHAPES['layers']}", "data=text", "engine.device=cpu", "param=standard", f"width={width}"]
    rows = tensors(typed(*over), *INPUT)
    for ours, ref in zip(rows, REF["gpt2"][str(width)], strict=True):
        assert ours["name"] == ref["name"]
        assert ours["init_std"] == pytest.approx(ref["init_std"], rel=0.05, abs=1e-12), ref["name"]

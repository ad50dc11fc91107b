"""lrtransfer against numbers the reference packages produced themselves.

tests/reference/*.json are written by scripts/make_reference_fixtures.py, which
builds the models with `mup` 1.0.0 and `modula` 0.0.0.0.0.2; these tests read only
the JSON. Every number is compared, so a silent drift from either package fails here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from lrtransfer.diagnostics.inspect import tensors
from lrtransfer.nn.compounds import Standardize
from lrtransfer.training.build import model as build_model
from lrtransfer.training.build import optimizer as build_optimizer
from lrtransfer.training.build import parameterization as build_param
from tests.conftest import typed

TESTS = Path(__file__).resolve().parent
REFERENCE = TESTS / "reference"
MUP = json.loads((REFERENCE / "mup.json").read_text())
MODULA = json.loads((REFERENCE / "modula.json").read_text())
DATA = {"model=cnn": "data=cifar10", "model=transformer": "data=text",
        "model=custom": "data=text"}  # data of the model's kind (not loaded)
CPU = ["engine.device=cpu"]


@pytest.fixture(scope="module")
def nanogpt() -> str:
    """The nanoGPT model file that the fixture's `{nanogpt}` stands for (tests/nanogpt_standin.py, or the original: tests/test_published.NANOGPT)."""
    from tests.test_published import NANOGPT

    return str(NANOGPT)


def mup_cfg(model: dict, width: str, optim: str, nanogpt: str):
    overrides = [o.replace("{nanogpt}", nanogpt).replace("{tests}", str(TESTS)) for o in model["overrides"]]
    data = [] if any(o.startswith("data=") for o in overrides) else [DATA[o] for o in overrides if o in DATA]
    cfg = typed(*CPU, *overrides, *data, "param=mup", f"width={width}",  # mup's MuAdam keeps one epsilon
                f"param.base_width={MUP['base_width']}", f"optim={optim}", "param.eps_by_width=false")
    assert optim == "adam" or cfg.optim.momentum == MUP["sgd_momentum"]
    return cfg


def one_step(cfg, model: dict, lr: float) -> list[tuple[float, float]]:
    """(RMS, dot with the gradient) of one step from seed 0's weights with the fixtures' gradients."""
    param = build_param(cfg)
    net = build_model(cfg, param, runs=1, input_shape=tuple(model["input_shape"]), output_dim=model["output_dim"])
    param.initialize(net, [0])
    slots = param.slots(net)
    grads = [torch.randn(s.tensor.numel(), generator=torch.Generator().manual_seed(1000 + i)).view(s.tensor.shape)
             for i, s in enumerate(slots)]
    opt = build_optimizer(cfg, slots)
    ups = param.updates(slots, opt.directions(grads), torch.tensor([lr]))
    return [(float(u.double().pow(2).mean().sqrt()), float(-(u.double() * g.double()).sum())) for u, g in zip(ups, grads)]


CASES = [(name, width) for name, m in MUP["models"].items() for width in m["widths"]]


@pytest.mark.parametrize("name, width", CASES)
def test_mup_tensor_by_tensor(name, width, nanogpt):
    """Init std (the draws are PyTorch's, in mup's order: they agree to float precision, ~1e-14),
    forward multiplier (a table tied to the readout: 1, and the readout's on its readout use,
    as MuSharedReadout), Adam and SGD LR multipliers, and one Adam and one SGD step."""
    model = MUP["models"][name]
    ref = model["widths"][width]
    shape = (tuple(model["input_shape"]), model["output_dim"])
    for optim, lr in (("adam", MUP["adam_lr"]), ("sgd", MUP["sgd_lr"])):
        cfg = mup_cfg(model, width, optim, nanogpt)
        rows = tensors(cfg, *shape)
        assert len(rows) == len(ref)
        steps = one_step(cfg, model, lr)
        for ours, theirs, (rms, dot) in zip(rows, ref, steps, strict=True):
            where = f"{name} width {width} {optim}: {ours['name']} vs mup's {theirs['name']}"
            assert torch.Size(ours["shape"]).numel() == torch.Size(theirs["shape"]).numel(), where
            assert ours["init_std"] == pytest.approx(theirs["init_std"], rel=1e-9, abs=1e-12), where
            assert ours["forward_mult"] == pytest.approx(theirs["forward_mult"], rel=1e-12), where
            assert (ours["readout_mult"] is None) == ("readout_mult" not in theirs), where
            if ours["readout_mult"] is not None:
                assert ours["readout_mult"] == pytest.approx(theirs["readout_mult"], rel=1e-12), where
            assert ours["lr_mult"] == pytest.approx(theirs[f"{optim}_lr_mult"], rel=1e-12), where
            assert rms == pytest.approx(theirs[f"{optim}_step_rms"], rel=1e-5), where
            assert dot == pytest.approx(theirs[f"{optim}_step_dot"], rel=1e-5), where


@pytest.mark.parametrize("name", list(MODULA["models"]))
def test_modula_target_norms(name):
    """Each atom's target norm at total target 1, as Modula's own normalize hands it out
    (Modula's LayerNorm has no weights: lrtransfer's LN gains, of mass 0, are left out)."""
    model = MODULA["models"][name]
    data = [DATA[o] for o in model["overrides"] if o in DATA]
    cfg = typed(*CPU, *model["overrides"], *data, "param=modular")
    rows = [r for r in tensors(cfg, tuple(model["input_shape"]), model["output_dim"]) if r["role"] != "vector"]
    assert [sorted(r["shape"]) for r in rows] == [sorted(a["shape"]) for a in model["atoms"]]
    assert [r["target_norm"] for r in rows] == pytest.approx([a["target_norm"] for a in model["atoms"]], rel=1e-5)


def given_weight(shape: list[int], i: int) -> torch.Tensor:
    """The fixture's weights for a forward (scripts/make_reference_fixtures.given_weight): atom i's, in
    Modula's shape, N(0, 1 / shape[1]) in float64 from a generator seeded forward_seed + i."""
    gen = torch.Generator().manual_seed(MODULA["forward_seed"] + i)
    return torch.randn(shape, generator=gen, dtype=torch.float64) * shape[1] ** -0.5


@pytest.mark.parametrize("name", [n for n, m in MODULA["models"].items() if "forward" in m])
def test_modula_forward_multipliers_and_outputs(name):
    """Each atom's forward multiplier is Modula's atom's `scale`, and the whole network, given Modula's
    weights, computes Modula's output (the GPT: its embeddings' sqrt(dim), (tok + pos) / 2, attention
    on (q, k, v) / 3 with logits / d_head, the convex residual, ScaledGELU, weightless layer norms:
    LN-S here, its eps set to Modula's 0)."""
    model = MODULA["models"][name]
    data = [DATA[o] for o in model["overrides"] if o in DATA]
    cfg = typed(*CPU, *model["overrides"], *data, "param=modular")
    param = build_param(cfg)
    net = build_model(cfg, param, runs=1, input_shape=tuple(model["input_shape"]), output_dim=model["output_dim"]).double()
    param.initialize(net, [0])
    atoms = [a for a in net.atoms() if a.mass > 0]  # Modula's atoms (its LayerNorm has no weights)
    for m in net.modules():
        if isinstance(m, Standardize):
            m.eps = 0.0  # Modula's LayerNorm: (z - mean) / RMS, nothing added under the root
    assert [a.weight_mult for a in atoms] == pytest.approx([a["forward_mult"] for a in model["atoms"]], rel=1e-12)
    with torch.no_grad():
        for i, (atom, ref) in enumerate(zip(atoms, model["atoms"], strict=True)):
            w = given_weight(ref["shape"], i)  # a Linear's (out, in), an Embedding's (num, dim): as (fan_in, fan_out)
            atom.weight[0].copy_(atom.from_matrix(w if ref["kind"] == "Embedding" else w.t()))
        x = torch.from_numpy(np.array(model["forward"]["input"]))  # token ids (int64), or inputs (float64)
        out = net(x)[0]
    torch.testing.assert_close(out, torch.tensor(model["forward"]["output"], dtype=torch.float64), rtol=1e-10, atol=1e-12)


def test_modula_conv2d_forward():
    """A Conv2D atom: Modula's sqrt(c_out / c_in) / k^2 on the convolution, taps of its weight as they are."""
    from lrtransfer.nn import HIDDEN, Conv

    ref = MODULA["conv"]
    param = build_param(typed(*CPU, "param=modular"))
    conv = Conv(ref["c_in"], ref["c_out"], ref["kernel"], dims=2, role=HIDDEN, runs=1, bias=False).double()
    param.set_multipliers(conv)
    assert conv.weight_mult == pytest.approx(ref["forward_mult"], rel=1e-12)
    with torch.no_grad():
        conv.weight[0].copy_(given_weight([ref["c_out"], ref["c_in"], ref["kernel"], ref["kernel"]], 0))
        out = conv(torch.tensor(ref["input"], dtype=torch.float64))[0]
    torch.testing.assert_close(out, torch.tensor(ref["output"], dtype=torch.float64), rtol=1e-12, atol=1e-12)


def test_inspect_json_matches_mup_at_width_256(cli):
    """The issue's check, through the command: `inspect param=mup width=256 param.base_width=64 --json`."""
    ref = MUP["models"]["mlp"]["widths"]["256"]
    for optim in ("adam", "sgd"):
        code, out, err = cli("inspect", "param=mup", "width=256", "param.base_width=64", f"optim={optim}", "--json")
        assert code == 0, err
        doc = json.loads(out)
        assert doc["config"]["param"]["name"] == "mup" and doc["config"]["width"] == 256
        assert [r["init_std"] for r in doc["tensors"]] == pytest.approx([r["init_std"] for r in ref], rel=1e-9)
        assert [r["lr_mult"] for r in doc["tensors"]] == [r[f"{optim}_lr_mult"] for r in ref]
        assert all(r["target_norm"] is None for r in doc["tensors"])


@pytest.mark.parametrize("act, expected", [("relu", [2 / 3, 0.4714, 1 / 3]), ("scaled_relu", [1 / 3] * 3)])
def test_inspect_json_gives_modulas_mlp_targets(cli, act, expected):
    code, out, err = cli("inspect", "model=mlp", "depth=3", "param=modular", f"model.activation={act}",
                         "model.bias=false", "--json")
    assert code == 0, err
    assert [r["target_norm"] for r in json.loads(out)["tensors"]] == pytest.approx(expected, abs=1e-4)


def test_inspect_tables_at_several_widths_show_the_ratios(cli):
    code, out, err = cli("inspect", "param=mup", "width=64,256", "param.base_width=64")
    assert code == 0, err
    assert out.count("== model=mlp param=mup") == 2 and "== ratios to the first width" in out
    hidden_weight = next(line for line in out.splitlines()[out.splitlines().index("== ratios to the first width"):]
                         if line.startswith("layers.2.weight"))
    std, fwd, lr, eps = (float(x) for x in hidden_weight.split()[1:])
    assert (std, fwd, lr, eps) == (pytest.approx(0.5, rel=0.02), 1.0, 0.25, 0.25)  # init std halves, Adam LR and eps / 4


def test_inspect_refuses_a_list_of_other_than_numbers(cli):
    code, _, err = cli("inspect", "param=mup,standard")
    assert code == 2 and err.strip().splitlines() == [
        "error: inspect runs one config per scale: only width or another key of numbers (depth=2,4) may list values, "
        "not 'param=mup,standard'"]

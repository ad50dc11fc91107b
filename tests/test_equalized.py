"""Equalized learning rate: N(0,1) storage, the He constant at every forward, and what follows."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from lrtransfer.training.build import model as build_model
from lrtransfer.training.build import optimizer as build_optimizer
from lrtransfer.training.build import parameterization as build_param
from tests.conftest import typed

CPU = ["engine.device=cpu"]


def model_of(*over, seeds=(0,)):
    cfg = typed(*CPU, "param=equalized", *over)
    param = build_param(cfg)
    model = build_model(cfg, param, runs=len(seeds), input_shape=(32,), output_dim=10)
    param.initialize(model, list(seeds))
    return cfg, param, model


def test_stored_weights_are_unit_normal_and_the_effective_std_is_the_he_constant():
    _, _, model = model_of("width=512", "depth=3")
    for atom in model.atoms():
        w = atom.weight[0].detach()
        assert abs(float(w.mean())) < 0.02
        assert float(w.std()) == pytest.approx(1.0, rel=0.03)
        c = math.sqrt(2.0) / math.sqrt(atom.fan_in)
        assert atom.weight_mult == pytest.approx(c, rel=1e-12)
        assert float((w * atom.weight_mult).std()) == pytest.approx(c, rel=0.03)
        assert torch.count_nonzero(atom.bias) == 0


@pytest.mark.parametrize("scale, bias_is_scaled", [("output", True), ("weight", False)])
def test_seed_form_scales_the_whole_output_progan_form_the_weight_only(scale, bias_is_scaled):
    _, _, model = model_of("width=64", f"param.scale={scale}", "param.gain=1.5")
    for atom in model.atoms():
        c = 1.5 / math.sqrt(atom.fan_in)
        assert atom.weight_mult == pytest.approx(c)
        assert atom.bias_mult == (pytest.approx(c) if bias_is_scaled else 1.0)
    # the forward really applies them: y = c * x W + bias_mult * b
    atom = next(model.atoms())
    with torch.no_grad():
        atom.bias.fill_(1.0)
    x = torch.randn(4, 32)
    expected = atom.weight_mult * (x @ atom.weight[0]) + atom.bias_mult
    torch.testing.assert_close(atom(x)[0], expected)


def test_forward_statistics_match_he_normal_init():
    """Same draws: the equalized net computes what a He-normal net computes; the layer
    statistics also match an independent He-normal (kaiming_normal_) network."""
    _, _, model = model_of("width=256", "depth=4", seeds=(7,))
    x = torch.randn(4096, 32, generator=torch.Generator().manual_seed(1))
    he = torch.nn.Sequential()
    for i, atom in enumerate(model.atoms()):
        lin = torch.nn.Linear(atom.fan_in, atom.fan_out)
        torch.nn.init.zeros_(lin.bias)
        with torch.no_grad():  # He-normal with the same draws: std sqrt(2 / fan_in)
            lin.weight.copy_(atom.weight[0].t() * math.sqrt(2.0 / atom.fan_in))
        he.append(lin)
        if i < 3:
            he.append(torch.nn.ReLU())
    torch.testing.assert_close(model(x)[0], he(x), rtol=1e-4, atol=1e-5)

    torch.manual_seed(3)
    ref = [torch.nn.Linear(a.fan_in, a.fan_out) for a in model.atoms()]
    for lin in ref:
        torch.nn.init.kaiming_normal_(lin.weight, nonlinearity="relu")
        torch.nn.init.zeros_(lin.bias)
    h_eq, h_ref = x, x
    for i, (atom, lin) in enumerate(zip(model.atoms(), ref)):
        h_eq, h_ref = atom(h_eq)[0].detach(), lin(h_ref).detach()
        assert float(h_eq.std()) == pytest.approx(float(h_ref.std()), rel=0.1), f"layer {i}"
        if i < 3:
            h_eq, h_ref = torch.relu(h_eq), torch.relu(h_ref)


def effective_first_step(param_name: str, width: int) -> float:
    """RMS change of the hidden layer's *effective* weight (weight_mult * W) after one Adam step."""
    cfg = typed(*CPU, f"param={param_name}", f"width={width}", "depth=3", "train.dtype=float64")
    param = build_param(cfg)
    model = build_model(cfg, param, runs=1, input_shape=(32,), output_dim=10).double()
    param.initialize(model, [0])
    slots = param.slots(model)
    hidden = next(a for a in model.atoms() if a.role == "hidden")
    before = hidden.weight.detach().clone() * hidden.weight_mult
    opt = build_optimizer(cfg, slots)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(64, 32, generator=gen, dtype=torch.float64)
    y = torch.randint(0, 10, (64,), generator=gen)
    loss = torch.nn.functional.cross_entropy(model(x)[0], y)
    grads = torch.autograd.grad(loss, [s.tensor for s in slots])
    with torch.no_grad():
        for s, u in zip(slots, param.updates(slots, opt.directions(grads), torch.tensor([1e-3], dtype=torch.float64))):
            s.tensor.sub_(u)
    return float((hidden.weight.detach() * hidden.weight_mult - before).pow(2).mean().sqrt())


def test_under_adam_the_effective_step_scales_like_one_over_sqrt_fan_in():
    """Adam moves each stored weight by ~lr, so the effective weight moves by ~lr * c:
    16x the fan-in, 1/4 of the step (SP's step does not depend on the width)."""
    small, large = effective_first_step("equalized", 64), effective_first_step("equalized", 1024)
    assert small / large == pytest.approx(4.0, rel=0.05)
    assert small == pytest.approx(1e-3 * math.sqrt(2.0 / 64), rel=0.05)
    sp_small, sp_large = effective_first_step("standard", 64), effective_first_step("standard", 1024)
    assert sp_small / sp_large == pytest.approx(1.0, rel=0.05)


def test_a_users_module_is_stored_unit_normal_whatever_its_own_init():
    """model=custom starts from the module's own init (model.init=own), but equalized's rule is its
    init: N(0, 1) weights (nn.Linear's own are U(+-1/sqrt(fan_in))) and zero biases, the He constant
    at every forward."""
    example = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"
    _, _, model = model_of("model=custom", f"model.target={example}:build", "width=512", "depth=3")
    atoms = list(model.atoms())
    assert [a.role for a in atoms] == ["input", "hidden", "output"]
    for atom in atoms:
        assert float(atom.weight[0].detach().std()) == pytest.approx(1.0, rel=0.05), atom.path
        assert atom.weight_mult == pytest.approx(math.sqrt(2.0 / atom.fan_in), rel=1e-12)
        assert torch.count_nonzero(atom.bias) == 0

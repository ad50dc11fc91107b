"""param=spectral: the spectral condition holds with equality, at init and at every step,
at two widths, for every kind of atom, through the Atom interface only; and it trains
every built-in model."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from torch import nn

from lrtransfer.training import build, engine
from lrtransfer.training.ensemble import apply_updates
from lrtransfer.training.runs import Run
from lrtransfer.nn.linalg import as_matrices
from lrtransfer.nn import HIDDEN, Atom
from lrtransfer.options.param.base import Slot
from tests.conftest import typed
from tests.test_architectures import MODELS, mnist_root, model_overrides  # noqa: F401  (a fixture)
from tests.test_mnist1d import cache  # noqa: F401  (a fixture)
from tests.test_mnist1d import overrides as mnist1d_overrides
from tests.test_muon import one_step

CPU = ["engine.device=cpu", "param=spectral"]
TEXT = ["model=transformer", "data=text", "model.heads=2", "data.seq_len=16"]
SHAPES = {"mlp": ((12,), 5), "cnn": ((1, 8, 8), 10), "transformer": ((16,), 40)}


def setup(model, width, *over, seeds=(0,)):
    cfg = typed(*CPU, *({"mlp": [], "cnn": ["model=cnn", "data=mnist"], "transformer": TEXT}[model]),
                f"width={width}", "depth=3", *over)
    param = build.parameterization(cfg)
    shape, out = SHAPES[model]
    net = build.model(cfg, param, runs=len(seeds), input_shape=shape, output_dim=out).double()
    param.initialize(net, list(seeds))
    return cfg, param, net, param.slots(net)


def spectral_norms(s: Slot, t: torch.Tensor) -> torch.Tensor:
    """(K,): the exact spectral norm of each run's matrix, from the storage shape."""
    return torch.linalg.matrix_norm(as_matrices(s.atom, t), ord=2)


def rms(t: torch.Tensor) -> torch.Tensor:
    return t.flatten(1).pow(2).mean(1).sqrt()


@pytest.mark.parametrize("model", list(SHAPES))
@pytest.mark.parametrize("width", [16, 64])
@pytest.mark.parametrize("init", ["orthogonal", "gaussian"])
def test_every_weight_starts_at_spectral_norm_sigma_sqrt_fan_out_over_fan_in(model, width, init):
    _, _, net, slots = setup(model, width, f"param.init={init}", "param.sigma=1.5", seeds=(0, 1))
    weights = [s for s in slots if s.name == "weight"]
    assert {s.atom.kind for s in weights} >= ({"linear", "embedding"} if model == "transformer" else {"linear"})
    for s in weights:
        want = 1.5 * math.sqrt(s.atom.fan_out / s.atom.fan_in)
        torch.testing.assert_close(spectral_norms(s, s.tensor), torch.full((2,), want, dtype=torch.float64),
                                   rtol=1e-6, atol=0)
    for s in slots:
        if s.name == "bias":
            assert not s.tensor.any()
    assert not torch.equal(weights[0].tensor[0], weights[0].tensor[1])  # each run from its own seed


@pytest.mark.parametrize("model", list(SHAPES))
@pytest.mark.parametrize("width", [16, 32])
@pytest.mark.parametrize("optim", ["adam", "sgd", "muon"])
def test_every_update_has_spectral_norm_lr_sqrt_fan_out_over_fan_in(model, width, optim):
    """Exact estimate: each run's update of each weight has spectral norm lr_k sqrt(fan_out/fan_in)
    (a frozen run, lr 0, does not move); each vector's update has RMS lr_k."""
    cfg, param, net, slots = setup(model, width, f"optim={optim}", "param.norm_estimate=exact", seeds=(0, 1, 2))
    opt = build.optimizer(cfg, slots)
    lr = torch.tensor([0.5, 2.0**-7, 0.0], dtype=torch.float64)
    gen = torch.Generator().manual_seed(0)
    shape, out = SHAPES[model]
    for _ in range(2):
        if model == "transformer":
            x = torch.randint(0, out, (4, *shape), generator=gen)
        else:
            x = torch.randn(4, *shape, generator=gen, dtype=torch.float64)
        grads = torch.autograd.grad(net(x).pow(2).mean(0).sum(), [s.tensor for s in slots])
        ups = param.updates(slots, opt.directions(grads), lr)
        for s, u in zip(slots, ups):
            if s.name == "weight":
                want = lr * math.sqrt(s.atom.fan_out / s.atom.fan_in)
                torch.testing.assert_close(spectral_norms(s, u), want, rtol=1e-9, atol=1e-300)
            else:
                torch.testing.assert_close(rms(u), lr, rtol=1e-9, atol=1e-300)
        apply_updates(slots, ups, None)


def test_the_power_estimate_holds_the_norm_to_its_tolerance_while_training():
    """The default estimate (a power iteration warm-started from the last step's vector, 1
    matrix-vector product pair a step) never overestimates, so an update is never below its
    target; on Adam's directions of a training MLP it is a few percent above it (median; at
    most ~25%, measured: docs/parameterizations.md, spectral)."""
    cfg = typed(*CPU, "width=64", "train.dtype=float64", "data.input_dim=12")
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=1, input_shape=(12,), output_dim=5).double()
    param.initialize(net, [0])
    slots = param.slots(net)
    opt = build.optimizer(cfg, slots)
    gen = torch.Generator().manual_seed(0)
    lr, ratios = 2.0**-6, []
    for _ in range(30):
        x = torch.randn(16, 12, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 5, (16,), generator=gen)
        ups = one_step(net, param, slots, opt, x, y, lr)
        ratios += [float(spectral_norms(s, u)[0] / (lr * math.sqrt(s.atom.fan_out / s.atom.fan_in)))
                   for s, u in zip(slots, ups) if s.name == "weight"]
    r = torch.tensor(ratios)
    assert float(r.min()) >= 1 - 1e-9 and float(r.median()) <= 1.05 and float(r.max()) <= 1.4, ratios


class Transposed(Atom):
    """A user's layer as nn.Linear stores it, (K, fan_out, fan_in): only the Atom interface."""

    kind = "users"

    def __init__(self, fan_in, fan_out, runs):
        super().__init__(fan_in, fan_out, role=HIDDEN, runs=runs)
        self.weight = nn.Parameter(torch.zeros(runs, fan_out, fan_in, dtype=torch.float64))
        self.bias = None

    def from_matrix(self, w):
        return w.t()


def test_it_needs_only_the_atom_interface():
    """A weight stored transposed (as torch's nn.Linear) gets the same norms: the matrix view comes
    from `from_matrix` alone, no module tree."""
    cfg = typed(*CPU, "param.norm_estimate=exact")
    param = build.parameterization(cfg)
    atom = Transposed(24, 40, runs=2)
    param.set_multipliers(atom)
    param.initialize(atom, [0, 1])
    slot = Slot(atom, "weight", atom.weight, 1.0)
    want = math.sqrt(40 / 24)
    torch.testing.assert_close(spectral_norms(slot, atom.weight), torch.full((2,), want, dtype=torch.float64))
    torch.testing.assert_close(torch.linalg.matrix_norm(atom.weight, ord=2), torch.full((2,), want, dtype=torch.float64))
    d = torch.randn(2, 40, 24, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    (u,) = param.updates([slot], [d], torch.tensor([0.1, 0.2], dtype=torch.float64))
    torch.testing.assert_close(torch.linalg.matrix_norm(u, ord=2), torch.tensor([0.1, 0.2], dtype=torch.float64) * want)
    # and the direction is kept: the update is a positive multiple of it
    torch.testing.assert_close(u / u.norm(dim=(1, 2), keepdim=True), d / d.norm(dim=(1, 2), keepdim=True))


GOOD_LR = -5


@pytest.mark.parametrize("model", [*MODELS, "mlp", "transformer", "cnn1d"])
def test_each_model_trains_under_spectral_with_adam(model, mnist_root, cache):  # noqa: F811
    if model == "cnn1d":
        over, steps, batch = mnist1d_overrides("spectral", model, cache), 60, 32
    elif model == "mlp":
        over, steps, batch = ["width=16", *CPU, "data.eval_size=16"], 40, 16
    elif model == "transformer":
        over, steps, batch = [*TEXT, "width=16", "depth=1", *CPU, "data.eval_size=16"], 40, 16
    else:
        over, steps, batch = model_overrides(model, "spectral", mnist_root), 40, 16
    cfg = typed(*over, f"train.steps={steps}", f"train.batch_size={batch}", "engine.progress=false")
    (res,) = engine.train(build.job(cfg), [Run(log2_lr=GOOD_LR, seed=0)])
    assert not res.diverged
    assert res.final_loss < 0.9 * res.initial_loss, (res.initial_loss, res.final_loss)


def test_the_power_vectors_survive_a_checkpoint():
    cfg, param, net, slots = setup("mlp", 16)
    opt = build.optimizer(cfg, slots)
    x = torch.randn(4, 12, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    grads = torch.autograd.grad(net(x).pow(2).sum(), [s.tensor for s in slots])
    param.updates(slots, opt.directions(grads), torch.tensor([0.1], dtype=torch.float64))
    saved = param.state_dict()
    assert sum(1 for v in saved["power"] if v) == 3  # one per Linear
    fresh = build.parameterization(cfg)
    fresh.set_multipliers(net)
    fresh.load_state_dict(saved)
    assert fresh.state_dict()["power"][0]["v"].equal(saved["power"][0]["v"])


def test_inspect_shows_each_tensors_target_norm(cli):
    """`inspect --json`'s target_norm is the update's norm at LR 1: sqrt(fan_out/fan_in) for a
    weight (its spectral norm), 1 for a vector (its RMS); mass and sensitivity stay the
    modular norm's."""
    import json

    code, out, err = cli("inspect", "param=spectral", "width=64", "--json")
    assert code == 0, err
    rows = json.loads(out)["tensors"]
    for r in rows:
        if r["name"].endswith("weight"):
            fan_in, fan_out = r["shape"]  # a built-in Linear stores (fan_in, fan_out)
            assert r["target_norm"] == pytest.approx(math.sqrt(fan_out / fan_in))
        else:
            assert r["target_norm"] == 1.0
        assert r["mass"] is None and r["sensitivity"] is None
    assert {r["target_norm"] for r in rows} != {1.0}  # the input and output weights' differ from 1


def test_a_users_module_starts_at_the_condition_whatever_its_own_init():
    """model=custom starts from the module's own init (model.init=own), but the spectral condition is
    this rule's init: each weight at spectral norm sigma sqrt(fan_out / fan_in), biases at zero."""
    example = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"
    cfg = typed(*CPU, "model=custom", f"model.target={example}:build", "width=48", "depth=3", "param.sigma=1.5")
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=2, input_shape=(12,), output_dim=5).double()
    param.initialize(net, [0, 1])
    slots = param.slots(net)
    assert [s.atom.role for s in slots if s.name == "weight"] == ["input", "hidden", "output"]
    for s in slots:
        if s.name == "weight":
            want = 1.5 * math.sqrt(s.atom.fan_out / s.atom.fan_in)
            torch.testing.assert_close(spectral_norms(s, s.tensor), torch.full((2,), want, dtype=torch.float64),
                                       rtol=1e-6, atol=0)
        else:
            assert not s.tensor.any()

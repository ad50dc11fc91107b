"""Muon: the Newton-Schulz band, each scale's formula, batched equals one run at a time,
equality with a plain one-run Muon written from its definition, and every model under
every parameterization training with it."""

from __future__ import annotations

import math

import pytest
import torch

from lrtransfer.training import build, engine
from lrtransfer.training.ensemble import apply_updates
from lrtransfer.training.runs import Run
from lrtransfer.nn.linalg import NS_BAND, QUINTIC, newton_schulz
from lrtransfer.nn import HIDDEN, INPUT, OUTPUT, Conv, Linear
from lrtransfer.options.param.base import Slot
from tests.conftest import typed
from tests.test_architectures import MODELS, mnist_root, model_overrides  # noqa: F401  (a fixture)
from tests.test_mnist1d import cache  # noqa: F401  (a fixture)
from tests.test_mnist1d import overrides as mnist1d_overrides

CPU = ["engine.device=cpu", "optim=muon"]


def test_the_band_is_the_scalar_maps_attractor():
    """NS_BAND is where x -> a x + b x^3 + c x^5 settles from (0, 1], and 5 steps from >= 0.01 land in it."""
    a, b, c = QUINTIC
    x = torch.linspace(0.01, 1.0, 100_001, dtype=torch.float64)
    for _ in range(5):
        x = a * x + b * x**3 + c * x**5
    assert NS_BAND[0] - 1e-4 <= float(x.min()) and float(x.max()) <= NS_BAND[1] + 1e-4
    for _ in range(30):
        x = a * x + b * x**3 + c * x**5
    assert (float(x.min()), float(x.max())) == pytest.approx(NS_BAND, abs=1e-4)


@pytest.mark.parametrize("shape", [(3, 48, 96), (3, 96, 48), (2, 64, 160)])
def test_five_steps_put_every_singular_value_in_the_band(shape):
    g = torch.randn(shape, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    s0 = torch.linalg.svdvals(g) / g.norm(dim=(-2, -1), keepdim=True).squeeze(-1)
    assert float(s0.min()) >= 0.01  # the premise: no singular value starts below 1% of the Frobenius norm
    s = torch.linalg.svdvals(newton_schulz(g, 5))
    assert NS_BAND[0] <= float(s.min()) and float(s.max()) <= NS_BAND[1], (float(s.min()), float(s.max()))
    # and the singular vectors are g's: orth(g) = U diag(s') V^T with g's U, V
    u, _, vh = torch.linalg.svd(g, full_matrices=False)
    inner = u.mT @ newton_schulz(g, 5) @ vh.mT
    torch.testing.assert_close(inner, torch.diag_embed(torch.diagonal(inner, dim1=-2, dim2=-1)), atol=1e-10, rtol=0)


def test_fewer_steps_leave_small_singular_values_outside_the_band():
    """The band needs the steps: after 2 a singular value that started at 1% is still far below it."""
    g = torch.randn(2, 48, 96, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    u, s, vh = torch.linalg.svd(g, full_matrices=False)
    s = torch.linspace(1.0, 0.01, s.shape[-1], dtype=torch.float64).expand_as(s)
    g = u @ torch.diag_embed(s) @ vh
    assert float(torch.linalg.svdvals(newton_schulz(g, 2)).min()) < NS_BAND[0]
    assert float(torch.linalg.svdvals(newton_schulz(g, 5)).min()) >= NS_BAND[0]


def muon(*over, slots):
    cfg = typed(*CPU, *over)
    return build.optimizer(cfg, slots)


def hidden_atoms(runs: int):
    """A non-square hidden Linear (48 -> 96) and a hidden conv (4 ch x 3x3 -> 6 ch: 36 -> 6)."""
    lin = Linear(48, 96, role=HIDDEN, runs=runs).double()
    conv = Conv(4, 6, 3, dims=2, role=HIDDEN, runs=runs).double()
    return [lin, conv]


def slots_of(atoms):
    return [Slot(a, n, t, 1.0) for a in atoms for n, t in a.trained()]


FORMULAS = {  # the definitions, written out here independently of optim/muon.py
    "jordan": lambda fi, fo: max(1.0, fo / fi) ** 0.5,
    "moonlight": lambda fi, fo: 0.2 * math.sqrt(max(fo, fi)),
    "spectral": lambda fi, fo: math.sqrt(fo / fi),
}


@pytest.mark.parametrize("scale", list(FORMULAS))
def test_each_scale_multiplies_the_orthogonalised_momentum_by_its_formula(scale):
    atoms = hidden_atoms(2)
    slots = slots_of(atoms)
    opt = muon(f"optim.scale={scale}", "optim.nesterov=false", slots=slots)
    grads = [torch.randn(s.tensor.shape, generator=torch.Generator().manual_seed(i), dtype=torch.float64)
             for i, s in enumerate(slots)]
    dirs = opt.directions(grads)
    for s, g, d in zip(slots, grads, dirs):
        if s.name != "weight":
            continue
        fi, fo = s.atom.fan_in, s.atom.fan_out
        # the conv's (K, c_out, c_in, 3, 3) gradient flattened is its matrix transposed, (K, 6, 36)
        matrix = g.flatten(2) if isinstance(s.atom, Conv) else g
        expected = FORMULAS[scale](fi, fo) * newton_schulz(matrix, 5)
        torch.testing.assert_close(d.reshape(expected.shape), expected, rtol=1e-12, atol=1e-14)
        sv = torch.linalg.svdvals(d.reshape(expected.shape)) / FORMULAS[scale](fi, fo)
        assert NS_BAND[0] <= float(sv.min()) and float(sv.max()) <= NS_BAND[1]


def test_the_other_tensors_get_adams_direction_times_the_ratio():
    """... with each tensor's own epsilon (a parameterization's eps_mult: muP's 1/m); gradients of
    1e-3 against an epsilon of 1e-3, so that the epsilon shows."""
    from lrtransfer.options.optim.kernels import adam_directions_

    atoms = hidden_atoms(2) + [Linear(10, 48, role=INPUT, runs=2).double(), Linear(96, 3, role=OUTPUT, runs=2).double()]
    slots = [Slot(s.atom, s.name, s.tensor, 1.0, eps_mult=2.0**-i) for i, s in enumerate(slots_of(atoms))]
    opt = muon("optim.adam_lr_ratio=0.25", "optim.eps=1e-3", slots=slots)
    rest = [s for s in slots if not (s.name == "weight" and s.atom.role == HIDDEN)]
    assert len(rest) == 6 and len(opt.hidden) == 2
    m, v = [torch.zeros_like(s.tensor) for s in rest], [torch.zeros_like(s.tensor) for s in rest]
    for step in (1, 2):
        grads = [1e-3 * torch.randn(s.tensor.shape, generator=torch.Generator().manual_seed(10 * step + i), dtype=torch.float64)
                 for i, s in enumerate(slots)]
        dirs = opt.directions(grads)
        want = [torch.empty_like(s.tensor) for s in rest]
        adam_directions_(want, [g for s, g in zip(slots, grads) if s in rest], m, v, step, 0.9, 0.95,
                         [1e-3 * s.eps_mult for s in rest])
        got = [d for s, d in zip(slots, dirs) if s in rest]
        for w, d in zip(want, got):
            torch.testing.assert_close(d, 0.25 * w, rtol=1e-12, atol=1e-15)


def test_batched_equals_one_run_at_a_time():
    K = 3
    batched = hidden_atoms(K)
    slots = slots_of(batched)
    opt = muon(slots=slots)
    singles = [hidden_atoms(1) for _ in range(K)]
    single_slots = [slots_of(a) for a in singles]
    single_opts = [muon(slots=s) for s in single_slots]
    for step in range(3):
        grads = [torch.randn(s.tensor.shape, generator=torch.Generator().manual_seed(100 * step + i),
                             dtype=torch.float64) for i, s in enumerate(slots)]
        dirs = [d.clone() for d in opt.directions(grads)]
        for k in range(K):
            one = single_opts[k].directions([g[k : k + 1] for g in grads])
            for d, o in zip(dirs, one):
                torch.testing.assert_close(d[k : k + 1], o, rtol=1e-12, atol=1e-14)


# ---------------------------------------------------------------- a plain Muon, from the definition
def one_step(model, param, slots, opt, x, y, lr: float) -> list[torch.Tensor]:
    """One training step of a one-run model of ours on (x, y); returns the updates it applied."""
    loss = torch.nn.functional.cross_entropy(model(x)[0], y)
    grads = torch.autograd.grad(loss, [s.tensor for s in slots])
    with torch.no_grad():
        ups = param.updates(slots, opt.directions(grads), torch.tensor([lr], dtype=torch.float64))
        apply_updates(slots, ups, None)
    return ups


def reference_newton_schulz(G, steps):
    """Jordan's zeropower_via_newtonschulz5 (in float64 rather than bfloat16), normalising by the
    Frobenius norm as the definition does: his code adds 1e-7 to it, a guard against zero that
    moves the result by ~1e-7 / ||X||_F relative (ours clamps at 1e-30 instead)."""
    a, b, c = (3.4445, -4.7750, 2.0315)
    X = G
    if G.size(-2) > G.size(-1):
        X = X.mT
    X = X / X.norm(dim=(-2, -1), keepdim=True)
    for _ in range(steps):
        A = X @ X.mT
        B = b * A + c * A @ A
        X = a * X + B @ X
    if G.size(-2) > G.size(-1):
        X = X.mT
    return X


def test_equals_a_plain_one_run_muon_written_from_its_definition():
    """5 steps of our Muon under SP on the default MLP, against torch nn.Linear layers updated by
    Jordan's Muon step (momentum lerp, Nesterov, Newton-Schulz, x max(1, out/in)^0.5) on the hidden
    weight and torch.optim.Adam (lr x ratio, betas (0.9, 0.95), eps 1e-10) on the rest; float64."""
    cfg = typed(*CPU, "width=24", "depth=3", "train.dtype=float64", "data.input_dim=12")
    lr, ratio, mom = 2.0**-4, cfg.optim.adam_lr_ratio, cfg.optim.momentum
    param = build.parameterization(cfg)
    model = build.model(cfg, param, runs=1, input_shape=(12,), output_dim=5).double()
    param.initialize(model, [0])
    slots = param.slots(model)
    opt = build.optimizer(cfg, slots)

    layers = []
    for atom in model.atoms():
        lin = torch.nn.Linear(atom.fan_in, atom.fan_out).double()
        with torch.no_grad():
            lin.weight.copy_(atom.weight[0].t())
            lin.bias.copy_(atom.bias[0, 0])
        layers.append(lin)
    ref = torch.nn.Sequential(layers[0], torch.nn.ReLU(), layers[1], torch.nn.ReLU(), layers[2])
    hidden = layers[1].weight
    rest = [p for p in ref.parameters() if p is not hidden]
    adam = torch.optim.Adam(rest, lr=lr * ratio, betas=(0.9, 0.95), eps=1e-10)
    buf = torch.zeros_like(hidden)

    gen = torch.Generator().manual_seed(0)
    for _ in range(5):
        x = torch.randn(16, 12, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 5, (16,), generator=gen)
        one_step(model, param, slots, opt, x, y, lr)

        adam.zero_grad()
        hidden.grad = None
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        with torch.no_grad():
            g = hidden.grad
            buf.lerp_(g, 1 - mom)
            u = g.lerp(buf, mom)  # Nesterov
            u = reference_newton_schulz(u, 5) * max(1, g.size(-2) / g.size(-1)) ** 0.5
            hidden.add_(u, alpha=-lr)
        adam.step()
    for atom, lin in zip(model.atoms(), layers):
        torch.testing.assert_close(atom.weight[0].t(), lin.weight, rtol=1e-9, atol=1e-12)
        torch.testing.assert_close(atom.bias[0, 0], lin.bias, rtol=1e-9, atol=1e-12)


# ---------------------------------------------------------------- every model x every parameterization
PARAMS = ["standard", "equalized", "mup", "modular", "spectral"]
GOOD_LR = {"standard": -3, "equalized": -2, "mup": -2, "modular": -3, "spectral": -5}
TEXT = ["model=transformer", "data=text", "width=16", "depth=1", "model.heads=2", "data.seq_len=16"]


@pytest.mark.parametrize("model", [*MODELS, "mlp", "transformer", "cnn1d"])
@pytest.mark.parametrize("param", PARAMS)
def test_each_model_trains_with_muon_under_each_parameterization(model, param, mnist_root, cache):  # noqa: F811
    if model == "cnn1d":
        over = mnist1d_overrides(param, model, cache)
    elif model == "mlp":
        over = ["width=16", f"param={param}", "engine.device=cpu", "data.eval_size=16"]
    elif model == "transformer":
        over = [*TEXT, f"param={param}", "engine.device=cpu", "data.eval_size=16"]
    else:
        over = model_overrides(model, param, mnist_root)
    if param == "mup" and model in ("mlp", "transformer"):
        over.append("param.base_width=16")
    steps, batch = (60, 32) if model == "cnn1d" else (40, 16)  # as test_mnist1d's: a slower start
    cfg = typed(*over, "optim=muon", f"train.steps={steps}", f"train.batch_size={batch}", "engine.progress=false")
    (res,) = engine.train(build.job(cfg), [Run(log2_lr=GOOD_LR[param], seed=0)])
    assert not res.diverged
    assert res.final_loss < 0.9 * res.initial_loss, (res.initial_loss, res.final_loss)


def test_a_model_without_a_hidden_matrix_is_refused_before_training():
    from lrtransfer.options.schema import ConfigError

    cfg = typed(*CPU, "depth=2")
    with pytest.raises(ConfigError, match="optim=muon orthogonalises hidden matrices .* but this model has none"):
        build.check(build.job(cfg))

"""The modular norm: exact target norms, orthogonal updates and init, the compound rules'
test vectors, and the one-Lipschitz promise."""

from __future__ import annotations

import pytest
import torch

from lrtransfer.config import ConfigError
from lrtransfer.training.build import model as build_model
from lrtransfer.nn import HIDDEN, INPUT, OUTPUT, Activation, Atom, Linear, Sequential
from lrtransfer.training.build import optimizer as build_optimizer
from lrtransfer.training.build import parameterization as build_param
from lrtransfer.options.param.modular import RMS, Spectral, orthogonalize, targets
from tests.conftest import typed

CPU = ["engine.device=cpu", "param=modular"]


def setup(*over, seeds=(0,), input_dim=32, output_dim=10):
    cfg = typed(*CPU, *over)
    param = build_param(cfg)
    model = build_model(cfg, param, runs=len(seeds), input_shape=(input_dim,), output_dim=output_dim).double()
    param.initialize(model, list(seeds))
    return cfg, param, model, param.slots(model)


def random_directions(slots, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(s.tensor.shape, generator=gen, dtype=torch.float64) for s in slots]


def test_mlp_targets_and_bias_split():
    _, param, model, slots = setup("width=64", "depth=4", "param.bias_mass=0.25")
    assert list(param.shares.values()) == pytest.approx([0.25] * 4)  # composition of 4 equal masses
    for s in slots:
        assert param.share(s) == pytest.approx(0.25 * (0.8 if s.name == "weight" else 0.2))


@pytest.mark.parametrize("bias", [True, False])
def test_normalize_gives_each_tensor_exactly_its_target_norm(bias):
    _, param, model, slots = setup("width=48", "depth=3", "param.norm_estimate=exact", f"model.bias={bias}",
                                   seeds=(0, 1, 2))
    lr = torch.tensor([0.5, 2.0**-6, 0.0], dtype=torch.float64)  # per run; run 2 frozen
    dirs = random_directions(slots)
    ups = param.updates(slots, dirs, lr)
    assert len(ups) == (6 if bias else 3)
    for s, u in zip(slots, ups):
        norm = torch.linalg.matrix_norm(u, ord=2) if s.name == "weight" else u.flatten(1).norm(dim=1) / u[0].numel() ** 0.5
        torch.testing.assert_close(norm, lr * param.share(s), rtol=1e-10, atol=0)


def test_power_iteration_converges_from_below_and_is_warm_started():
    gen = torch.Generator().manual_seed(0)
    d = torch.randn(3, 40, 24, generator=gen, dtype=torch.float64)
    exact = torch.linalg.matrix_norm(d, ord=2)
    norm, state = Spectral(iters=1), {}
    first = norm.estimate(d, state)
    assert torch.all(first <= exact * (1 + 1e-12)) and torch.all(first > 0.8 * exact)
    for _ in range(40):
        last = norm.estimate(d + 1e-3 * torch.randn(d.shape, generator=gen, dtype=torch.float64), state)
    torch.testing.assert_close(last, exact, rtol=5e-3, atol=0)
    zero = norm.estimate(torch.zeros_like(d), {})  # a frozen run: 0, not NaN
    assert torch.equal(zero, torch.zeros(3, dtype=torch.float64))


@pytest.mark.parametrize("shape", [(64, 128), (128, 64), (96, 96)])
def test_dualize_singular_values_are_all_the_target(shape):
    """Tolerance: every singular value within 1% of the target for these well-conditioned
    test matrices (a random square matrix's smallest singular value is ~1/(2n) of its largest;
    8 quintic + 4 cubic Newton-Schulz steps bring it there). Run 2's zero direction stays zero."""
    gen = torch.Generator().manual_seed(1)
    d = torch.randn(3, *shape, generator=gen, dtype=torch.float64)
    d[1] = torch.sign(d[1])  # Adam's first direction is a sign matrix
    d[2] = 0
    target = torch.tensor([0.3, 2.0**-5, 1.0], dtype=torch.float64)
    u = Spectral().dual(d, steps=8) * target.view(-1, 1, 1)
    for k in range(2):
        sv = torch.linalg.svdvals(u[k])
        torch.testing.assert_close(sv, torch.full_like(sv, float(target[k])), rtol=1e-2, atol=0)
    assert torch.count_nonzero(u[2]) == 0


def test_dualize_updates_through_the_parameterization():
    _, param, model, slots = setup("width=64", "depth=3", "param.update=dualize", "model.bias=false")
    lr = torch.tensor([0.25], dtype=torch.float64)
    for s, u in zip(slots, param.updates(slots, random_directions(slots), lr)):
        sv = torch.linalg.svdvals(u[0])
        torch.testing.assert_close(sv, torch.full_like(sv, 0.25 * param.share(s)), rtol=1e-2, atol=0)


def test_orthogonal_init_has_unit_singular_values_and_gaussian_is_scaled_near_one():
    _, _, model, _ = setup("width=256", "depth=3", seeds=(0, 1))
    for atom in model.atoms():
        sv = torch.linalg.svdvals(atom.weight.detach())
        torch.testing.assert_close(sv, torch.ones_like(sv), rtol=0, atol=1e-6)
        assert atom.weight_mult == pytest.approx((atom.fan_out / atom.fan_in) ** 0.5)
        assert torch.count_nonzero(atom.bias) == 0
    assert not torch.equal(model.layers[2].weight[0], model.layers[2].weight[1])  # one draw per seed
    _, _, gauss, _ = setup("width=256", "depth=3", "param.init=gaussian")
    for atom in gauss.atoms():
        assert float(torch.linalg.matrix_norm(atom.weight.detach(), ord=2)) == pytest.approx(1.0, abs=0.15)


def residual_mlp(L: int, width: int = 16, runs: int = 1, act: str = "scaled_relu", **over):
    """Modula's ResMLP: input Linear, L blocks of two Linears, output Linear (sensitivity-1
    bonds: Modula's Abs, here the scaled ReLU)."""
    cfg = typed(*CPU, f"width={width}", *[f"param.{k}={v}" for k, v in over.items()])
    param = build_param(cfg)
    blocks = [
        Sequential([Linear(width, width, role=HIDDEN, runs=runs), Activation(act),
                    Linear(width, width, role=HIDDEN, runs=runs)])
        for _ in range(L)
    ]
    model = Sequential([
        Linear(8, width, role=INPUT, runs=runs), Activation(act),
        param.residual_stack(blocks),
        Linear(width, 4, role=OUTPUT, runs=runs),
    ])
    param.set_multipliers(model)
    return param, model


@pytest.mark.parametrize("L", [2, 8])
def test_resmlp_test_vector(L):
    """Input and output Linear 1/3 each, every residual Linear 1/6, at L = 2 and L = 8."""
    _, model = residual_mlp(L)
    t = targets(model, 1.0)
    atoms = list(model.atoms())
    assert len(atoms) == 2 * L + 2
    assert t[atoms[0]] == pytest.approx(1 / 3) and t[atoms[-1]] == pytest.approx(1 / 3)
    for atom in atoms[1:-1]:
        assert t[atom] == pytest.approx(1 / 6)
    stack = model.layers[2]
    assert stack.mass == pytest.approx(1.0) and stack.sensitivity == pytest.approx(1.0)
    assert [(r.skip, r.branch) for r in stack.layers] == [(pytest.approx(1 - 1 / L), pytest.approx(1 / L))] * L


def test_compound_rules_by_hand():
    """Composition divides by the later sensitivities; a scalar multiple divides by |a|."""
    a = Linear(4, 4, role=HIDDEN, runs=1)
    b = Linear(4, 4, role=HIDDEN, runs=1)
    a.mass, b.mass = 1.0, 3.0

    class Half(Activation):  # a bond of sensitivity 1/2
        sensitivity = 0.5

    t = targets(Sequential([a, Half("relu"), b]), 2.0)
    assert t[a] == pytest.approx(1 / 4 * 2.0 / 0.5) and t[b] == pytest.approx(3 / 4 * 2.0)

    class Untold(Sequential):  # a compound that holds atoms must state its rule
        def split(self, target):
            return super(Sequential, self).split(target)

    with pytest.raises(NotImplementedError, match="states no compound rule"):
        targets(Untold([a]), 1.0)


def test_an_atom_kind_without_a_rule_is_refused():
    class Capsule(Atom):
        kind = "capsule-not-yet"

    cfg = typed(*CPU)
    with pytest.raises(ConfigError, match="no rule for atoms of kind 'capsule-not-yet'; known: conv, embedding, gain, linear"):
        build_param(cfg).multipliers(Capsule(3, 3, role=HIDDEN, runs=1))


def output_change(model, x, slots, deltas, eps):
    with torch.no_grad():
        y0 = model(x)
        for s, d in zip(slots, deltas):
            s.tensor.add_(eps * d)
        y1 = model(x)
        for s, d in zip(slots, deltas):
            s.tensor.sub_(eps * d)
    return (y1 - y0).pow(2).mean(-1).sqrt()  # (K, B): RMS over outputs, per input


@pytest.mark.parametrize("residual", [False, True])
def test_one_lipschitz_for_small_perturbations(residual):
    """Seed 000: ||f(w + dw)(x) - f(w)(x)||_RMS <= ||dw||_M for inputs of RMS 1, to first order.

    Two kinds of perturbation: random ones (far from the bound), and the normalised
    gradient of <f(x), r> for one input (aligned, the kind training makes), which must come
    close to the bound (ratio > 0.2), so the check could also catch an inflated norm.
    Tolerance: 1% for second-order terms (eps = 1e-4). The promise is the Lipschitz
    convention's (`param.sensitivity=lipschitz`): Modula's counts ReLU as 1/sqrt(2), which
    holds for typical inputs, not for every input."""
    torch.manual_seed(0)
    if residual:
        param, model = residual_mlp(4, width=32, runs=1, act="relu", sensitivity="lipschitz")
        model.double()
        param.initialize(model, [0])
        slots, d_in = param.slots(model), 8
    else:
        _, param, model, slots = setup("width=64", "depth=4", "model.activation=tanh")
        d_in = 32
    x = torch.randn(16, d_in, dtype=torch.float64)
    x = x / x.pow(2).mean(-1, keepdim=True).sqrt()  # RMS 1
    eps = 1e-4
    one = torch.ones(1, dtype=torch.float64)
    for trial in range(4):
        dirs = random_directions(slots, seed=trial)
        deltas = param.updates(slots, dirs, one)  # modular norm exactly 1 (exact estimates below)
        norm = param.modular_norm(slots, deltas)
        ratio = output_change(model, x, slots, deltas, eps).amax() / (eps * norm)
        assert float(ratio) <= 1.01
    r = torch.randn(model(x[:1]).shape, dtype=torch.float64)
    grads = torch.autograd.grad((model(x[:1]) * r).sum(), [s.tensor for s in slots])
    param.exact = True
    deltas = param.updates(slots, [g.detach() for g in grads], one)
    norm = param.modular_norm(slots, deltas)
    ratio = float(output_change(model, x[:1], slots, deltas, eps).amax() / (eps * norm))
    assert 0.2 < ratio <= 1.01


def test_weight_decay_is_split_like_the_updates():
    cfg, param, model, slots = setup("width=32", "optim.weight_decay=0.1")
    decays = param.decays(slots, torch.tensor([1.0, 0.0], dtype=torch.float64), 0.5, cfg.optim)
    for s, dec in zip(slots, decays):
        torch.testing.assert_close(dec, torch.tensor([0.05 * param.share(s), 0.0], dtype=torch.float64))


def test_adam_and_sgd_directions_give_the_same_normalised_first_update():
    """The LR is a target norm: after normalisation the base optimizer's scale is gone
    (SGD's raw gradient and Adam's sign-like direction differ in shape, not in norm)."""
    norms = []
    for optim in ("adam", "sgd"):
        cfg, param, model, slots = setup("width=32", f"optim={optim}", "param.norm_estimate=exact")
        opt = build_optimizer(cfg, slots)
        x, y = torch.randn(8, 32, dtype=torch.float64), torch.randint(0, 10, (8,))
        grads = torch.autograd.grad(torch.nn.functional.cross_entropy(model(x)[0], y), [s.tensor for s in slots])
        ups = param.updates(slots, opt.directions(grads), torch.tensor([0.1], dtype=torch.float64))
        norms.append([float(torch.linalg.matrix_norm(u[0], ord=2)) if s.name == "weight" else float(RMS().value(u)[0])
                      for s, u in zip(slots, ups)])
    assert norms[0] == pytest.approx(norms[1], rel=1e-9)


def mlp_targets(*over):
    _, param, model, _ = setup("depth=3", "model.bias=false", *over)
    return [param.shares[a] for a in model.atoms()]


@pytest.mark.parametrize("act, modula, lipschitz", [
    ("relu", [2 / 3, 2**0.5 / 3, 1 / 3], [1 / 3] * 3),
    ("gelu", [2 / 3, 2**0.5 / 3, 1 / 3], [1 / 3 / 1.1289**2, 1 / 3 / 1.1289, 1 / 3]),
    ("scaled_relu", [1 / 3] * 3, [1 / 6, 2**0.5 / 6, 1 / 3]),
    ("tanh", [1 / 3] * 3, [1 / 3] * 3),
])
def test_activation_sensitivities_under_both_conventions(act, modula, lipschitz):
    """Modula 0.0.0.0.0.2: ReLU and GELU 1/sqrt(2), scaled forms 1, so a 3-Linear ReLU MLP
    gets 2/3, 0.4714, 1/3 (input to output); the Lipschitz convention: max |f'|."""
    assert mlp_targets(f"model.activation={act}") == pytest.approx(modula)
    assert mlp_targets(f"model.activation={act}", "param.sensitivity=lipschitz") == pytest.approx(lipschitz)


def test_scaled_activations_are_sqrt2_times_the_plain_ones():
    x = torch.linspace(-3, 3, 61)
    assert torch.equal(Activation("scaled_relu")(x), 2**0.5 * torch.relu(x))
    assert torch.equal(Activation("scaled_gelu")(x), 2**0.5 * torch.nn.functional.gelu(x))


@pytest.mark.parametrize("model, plain", [("mlp", "relu"), ("resnet", "relu"), ("cnn", "relu"),
                                          ("transformer", "gelu")])
def test_auto_activation_is_the_models_own_and_scaled_under_modular(model, plain):
    """`model.activation=auto`: what Modula's models use under param=modular (its GPT:
    ScaledGELU), the plain nonlinearity otherwise; the job identity records the resolved
    name, so SP's ids are those of the explicit choice (and of before `auto` existed)."""
    from lrtransfer.config import model_activation, semantic
    from tests.conftest import compose

    data = {"cnn": ["data=cifar10"], "transformer": ["data=text"]}.get(model, [])
    for p, expected in (("standard", plain), ("mup", plain), ("equalized", plain), ("modular", f"scaled_{plain}")):
        over = [f"model={model}", f"param={p}", *data]
        assert model_activation(typed(*over)) == expected
        assert semantic(compose(*over)) == semantic(compose(*over, f"model.activation={expected}"))


def test_dualize_gives_a_layer_norm_gain_the_sign_of_its_direction():
    """A gain's norm is max |g| (the operator norm of z -> g z): its steepest direction is the sign,
    so under `dualize` every entry of the update has size exactly the target, signed as the direction."""
    cfg = typed(*CPU, "model=resnet", "model.layer_norm=true", "width=8", "depth=2", "param.update=dualize")
    param = build_param(cfg)
    model = build_model(cfg, param, runs=2, input_shape=(32,), output_dim=10).double()
    param.initialize(model, [0, 1])
    slots = param.slots(model)
    dirs = random_directions(slots)
    lr = torch.tensor([0.5, 0.125], dtype=torch.float64)
    before = [d.clone() for d in dirs]  # (the updates may be written into the directions)
    gains = [(s, d, u) for s, d, u in zip(slots, before, param.updates(slots, dirs, lr)) if s.name == "gain"]
    assert len(gains) == 2
    for s, d, u in gains:
        torch.testing.assert_close(u, torch.sign(d) * (lr * param.share(s)).view(-1, 1, 1), rtol=1e-12, atol=0)

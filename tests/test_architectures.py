"""ResNet-S, conv nets and layer norm: the seed's formulas, the residual rules, and that
every model trains under every parameterization."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lrtransfer.training import build
from lrtransfer.training import engine
from lrtransfer.training.runs import Run
from lrtransfer.training.build import model as build_model
from lrtransfer.nn import Conv, LayerNorm, Linear, Residual, Standardize
from lrtransfer.training.build import parameterization as build_param
from lrtransfer.options.param.modular import PerTap, Spectral, targets
from tests.conftest import TINY, typed
from tests.datafiles import write_mnist

PARAMS = ["standard", "equalized", "mup", "modular"]


def built(*over, runs=1, seeds=None, input_shape=(32,), output_dim=10, dtype=torch.float64):
    cfg = typed("engine.device=cpu", *over)
    param = build_param(cfg)
    model = build_model(cfg, param, runs=runs, input_shape=input_shape, output_dim=output_dim).to(dtype)
    param.initialize(model, list(seeds) if seeds is not None else list(range(runs)))
    return cfg, param, model


# ---------------------------------------------------------------- ResNet-S
def test_resnet_forward_is_the_seed_formula():
    """ResNet-S(x) = MM(Res(Res(MM_in(x)))), Res(z) = z + sigma(MM_1(sigma(MM_2(z)))), by hand."""
    _, _, model = built("model=resnet", "width=6", "depth=2", input_shape=(4,), output_dim=3)
    linears = [a for a in model.atoms() if isinstance(a, Linear)]
    assert len(linears) == 1 + 2 * 2 + 1
    gen = torch.Generator().manual_seed(5)
    with torch.no_grad():
        for lin in linears:  # replace the init by arbitrary numbers, so nothing depends on it
            lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen, dtype=torch.float64))
            lin.bias.copy_(torch.randn(lin.bias.shape, generator=gen, dtype=torch.float64))
    W = [(lin.weight[0], lin.bias[0, 0]) for lin in linears]  # (fan_in, fan_out), (fan_out,)

    def mm(i, z):
        return z @ W[i][0] + W[i][1]

    x = torch.randn(7, 4, generator=gen, dtype=torch.float64)
    z = mm(0, x)
    for b in range(2):
        mm2, mm1 = 1 + 2 * b, 2 + 2 * b  # in each block MM_2 is applied first
        z = z + torch.relu(mm(mm1, torch.relu(mm(mm2, z))))
    torch.testing.assert_close(model(x)[0], mm(5, z), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "param, over, expected",
    [
        ("standard", [], lambda L: (1.0, 1.0)),  # the seed's ResNet-S
        ("equalized", [], lambda L: (1.0, 1.0)),
        ("mup", [], lambda L: (1.0, 1.0)),
        ("mup", ["param.depth_exponent=0.5"], lambda L: (1.0, L**-0.5)),  # depth-muP
        ("modular", [], lambda L: (1 - 1 / L, 1 / L)),  # Modula
        ("standard", ["model.residual=convex"], lambda L: (1 - 1 / L, 1 / L)),
        ("modular", ["model.residual=one"], lambda L: (1.0, 1.0)),
        ("equalized", ["model.residual=sqrt_depth"], lambda L: (1.0, L**-0.5)),
    ],
)
@pytest.mark.parametrize("L", [2, 8])
def test_the_residual_rule_is_the_parameterizations_unless_model_residual_names_one(param, over, expected, L):
    _, _, model = built("model=resnet", f"param={param}", "width=8", f"depth={L}", *over)
    blocks = [m for m in model.modules() if isinstance(m, Residual)]
    assert len(blocks) == L
    for b in blocks:
        assert (b.skip, b.branch) == pytest.approx(expected(L))


@pytest.mark.parametrize("L", [2, 8])
@pytest.mark.parametrize("bias", [True, False])
def test_modular_targets_of_the_residual_mlp(L, bias):
    """The notes' test vector (Modula's recursion): input and output 1/3, every residual Linear 1/6, at any L."""
    _, param, model = built("model=resnet", "param=modular", "width=8", f"depth={L}", f"model.bias={bias}")
    t = targets(model, 1.0)
    linears = list(model.atoms())
    assert t[linears[0]] == pytest.approx(1 / 3) and t[linears[-1]] == pytest.approx(1 / 3)
    assert [t[a] for a in linears[1:-1]] == pytest.approx([1 / 6] * (2 * L))


def test_a_layer_norm_resnet_gives_its_gain_a_share_and_a_sign_update():
    _, param, model = built("model=resnet", "param=modular", "model.layer_norm=true", "width=8", "depth=2",
                            "param.norm_estimate=exact", runs=2)
    slots = param.slots(model)
    gains = [s for s in slots if s.name == "gain"]
    assert len(gains) == 2 and all(param.share(s) > 0 for s in gains)
    assert torch.equal(gains[0].tensor, torch.ones_like(gains[0].tensor))  # LN starts as the identity map
    dirs = [torch.randn_like(s.tensor) for s in slots]
    lr = torch.tensor([0.5, 0.125], dtype=torch.float64)
    for s, u in zip(slots, param.updates(slots, dirs, lr)):
        if s.name == "gain":  # max |update| is exactly the target
            torch.testing.assert_close(u.flatten(1).abs().amax(1), lr * param.share(s), rtol=1e-12, atol=0)


# ---------------------------------------------------------------- layer norm
@pytest.mark.parametrize("param", PARAMS)
def test_layer_norm_starts_as_ln_s_under_every_parameterization(param):
    """Gain 1 and bias 0 at init (seed 002's LN with beta = 0, gamma = 1), whatever the seed."""
    _, _, model = built("model=resnet", f"param={param}", "model.layer_norm=true", "width=8", "depth=2", runs=2)
    lns = [m for m in model.modules() if isinstance(m, LayerNorm)]
    assert len(lns) == 2
    for ln in lns:
        gain = ln.layers[1]
        assert torch.equal(gain.gain, torch.ones_like(gain.gain)) and torch.equal(gain.bias, torch.zeros_like(gain.bias))
        z = torch.randn(2, 5, 8, dtype=torch.float64)
        torch.testing.assert_close(ln(z), ln.layers[0](z))


def test_layer_norm_standardises_with_the_population_std():
    z = torch.randn(3, 5, 40, dtype=torch.float64) * 7 + 3
    s = Standardize(eps=0.0)(z)
    torch.testing.assert_close(s.mean(-1), torch.zeros(3, 5, dtype=torch.float64), rtol=0, atol=1e-12)
    torch.testing.assert_close(s.pow(2).mean(-1), torch.ones(3, 5, dtype=torch.float64), rtol=1e-12, atol=0)


def test_layer_norm_is_the_lecture_notes_formula_with_eps_inside_the_root():
    """Standardize runs torch's fused layer norm: its value and its gradient must be the
    composition (z - mean) / sqrt(var + eps) written out, with the population variance."""
    z = (torch.randn(2, 3, 5, 24, dtype=torch.float64) * 3 + 1).requires_grad_()
    eps = 1e-2  # large enough that eps's place in the formula shows
    g = torch.randn(2, 3, 5, 24, dtype=torch.float64)
    fused = Standardize(eps=eps)(z)
    (dz_fused,) = torch.autograd.grad(fused, z, g)
    mean, var = z.mean(-1, keepdim=True), z.var(-1, keepdim=True, unbiased=False)
    written = (z - mean) / torch.sqrt(var + eps)
    (dz_written,) = torch.autograd.grad(written, z, g)
    torch.testing.assert_close(fused, written, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(dz_fused, dz_written, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("a", [3.0, 0.01, 250.0, -2.0, -0.5])
def test_layer_norm_ignores_the_scale_of_the_matrix_multiplication_before_it(a):
    """Seed 002, eq. 7.42: LN(MM_{aW,ab}(z)) = LN(MM_{W,b}(z)). It holds for a > 0; for a < 0
    LN-S flips sign (LN-S(-y) = -LN-S(y)), so the equation as the seed states it ('for all
    a != 0') is checked here in its true form: LN-S(MM_{aW,ab}(z)) = sign(a) LN-S(MM_{W,b}(z))."""
    gen = torch.Generator().manual_seed(0)
    ln = LayerNorm(16, runs=1).double()
    ln.layers[0].eps = 0.0  # the seed's exact LN; the default eps=1e-5 changes results by < 1e-5
    with torch.no_grad():
        ln.layers[1].gain.copy_(torch.randn(1, 1, 16, generator=gen))
        ln.layers[1].bias.copy_(torch.randn(1, 1, 16, generator=gen))
    W, b = torch.randn(1, 10, 16, generator=gen, dtype=torch.float64), torch.randn(1, 1, 16, generator=gen, dtype=torch.float64)
    z = torch.randn(1, 6, 10, generator=gen, dtype=torch.float64)
    y, ya = z @ W + b, z @ (a * W) + a * b
    if a > 0:
        torch.testing.assert_close(ln(ya), ln(y), rtol=1e-10, atol=1e-10)
    std = ln.layers[0]
    torch.testing.assert_close(std(ya), math.copysign(1, a) * std(y), rtol=1e-10, atol=1e-10)


# ---------------------------------------------------------------- convolutions
def toeplitz(w: torch.Tensor, m: int) -> torch.Tensor:
    """Seed 002, eq. 7.49: Q (m x m) with Q[i, j] = w[j - i + l] (0-indexed) for |i - j| <= l, else 0."""
    k = len(w)
    ell = k // 2
    Q = torch.zeros(m, m, dtype=w.dtype)
    for i in range(m):
        for j in range(m):
            if abs(i - j) <= ell:
                Q[i, j] = w[j - i + ell]
    return Q


def test_conv1d_s_is_multiplication_by_the_toeplitz_matrix():
    conv = Conv(1, 1, 5, dims=1, role="hidden", runs=1, bias=False).double()
    w = torch.tensor([0.3, -1.2, 2.0, 0.7, -0.4], dtype=torch.float64)
    with torch.no_grad():
        conv.weight.copy_(w.view(1, 1, 1, 5))
    z = torch.randn(9, dtype=torch.float64)
    out = conv(z.view(1, 1, 9))  # (K=1, B=1, C=1, m=9)
    torch.testing.assert_close(out.flatten(), toeplitz(w, 9) @ z, rtol=1e-12, atol=1e-12)
    # eq. 7.48 written out: Conv1D-S(z)_i = sum_j w_j z_{i - l + j} with zero padding
    padded = torch.nn.functional.pad(z, (2, 2))
    torch.testing.assert_close(out.flatten(), torch.stack([padded[i : i + 5] @ w for i in range(9)]), rtol=1e-12, atol=1e-12)


def test_multichannel_conv1d_sums_single_channel_convs():
    """Eq. 7.50: Conv1D(z)_i = sum_j Conv1D-S_{i,j}(z_j), each with its own filter."""
    C, C2, k, m = 3, 2, 3, 7
    conv = Conv(C, C2, k, dims=1, role="hidden", runs=1, bias=False).double()
    with torch.no_grad():
        conv.weight.normal_()
    z = torch.randn(1, C, m, dtype=torch.float64)
    out = conv(z)[0, 0]  # (C2, m)
    for i in range(C2):
        ref = sum(toeplitz(conv.weight[0, i, j], m) @ z[0, j] for j in range(C))
        torch.testing.assert_close(out[i], ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dims", [1, 2])
def test_conv_parameter_counts(dims):
    C, C2, k = 5, 7, 3
    conv = Conv(C, C2, k, dims=dims, role="hidden", runs=4)
    assert conv.weight[0].numel() == k**dims * C * C2  # per run: k C C' (1-D), k^2 C C' (2-D)
    assert (conv.fan_in, conv.fan_out) == (C * k**dims, C2)


def test_conv_runs_are_separate_convolutions_and_sp_init_is_torchs():
    """A 3-run conv equals torch's Conv2d per run, shared or per-run inputs; SP draws as nn.Conv2d."""
    cfg = typed("engine.device=cpu")
    param = build_param(cfg)
    conv = Conv(3, 4, 3, dims=2, role="hidden", runs=3)
    param.initialize(conv, [0, 1, 2])
    torch.manual_seed(1)
    ref = torch.nn.Conv2d(3, 4, 3, padding=1)
    gen = torch.Generator().manual_seed(1)
    w = param.init_tensor(conv, "weight", gen)
    torch.testing.assert_close(w, ref.weight.detach(), rtol=0, atol=0)
    x = torch.randn(5, 3, 6, 6)  # (B, C, H, W) shared
    xs = torch.randn(3, 5, 3, 6, 6)  # (K, B, C, H, W)
    y, ys = conv(x), conv(xs)
    for k in range(3):
        f = lambda inp: torch.nn.functional.conv2d(inp, conv.weight[k], conv.bias[k], padding=1)  # noqa: E731
        torch.testing.assert_close(y[k], f(x))
        torch.testing.assert_close(ys[k], f(xs[k]))


def test_modular_conv_taps_start_orthogonal_and_are_normalised_one_by_one():
    cfg, param, model = built("model=cnn", "data=mnist", "param=modular", "width=6", "depth=2", "param.norm_estimate=exact",
                              input_shape=(2, 8, 8), runs=2)
    convs = [a for a in model.atoms() if isinstance(a, Conv)]
    hidden = convs[1]
    assert hidden.weight_mult == pytest.approx(1.0 / 9)  # sqrt(c_out/c_in) / k^2
    taps = PerTap.taps(hidden.weight.detach())  # (K, 3, 3, c_out, c_in)
    sv = torch.linalg.svdvals(taps)
    torch.testing.assert_close(sv, torch.ones_like(sv), rtol=1e-6, atol=1e-6)
    slots = [s for s in param.slots(model) if s.atom is hidden and s.name == "weight"]
    d = torch.randn_like(slots[0].tensor)
    lr = torch.tensor([0.5, 0.03], dtype=torch.float64)
    (u,) = param.updates(slots, [d], lr)
    norms = Spectral().value(PerTap.taps(u))  # (K, 3, 3): every tap has exactly the target
    expected = (lr * param.share(slots[0])).view(2, 1, 1).expand_as(norms)
    torch.testing.assert_close(norms, expected, rtol=1e-10, atol=0)


# ---------------------------------------------------------------- every model x every parameterization
@pytest.fixture(scope="module")
def mnist_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("mnist")
    write_mnist(root, n_train=64, n_test=16, signal=True)
    return root


MODELS = {
    "resnet": ["width=16", "depth=2"],
    "resnet_ln": ["model=resnet", "model.layer_norm=true", "width=16", "depth=2"],
    "cnn": ["width=8", "depth=2", "model.pool=4"],
    "resnet_cnn": ["width=8", "depth=2", "model.pool=4"],
}
GOOD_LR = {"standard": -6, "equalized": -7, "mup": -6, "modular": -3}


def model_overrides(model: str, param: str, mnist_root) -> list[str]:
    over = list(MODELS[model])
    if not over[0].startswith("model="):
        over.insert(0, f"model={model}")
    if model.endswith("cnn"):
        over += ["data=mnist", f"data.root={mnist_root}"]
    if param == "mup":  # muP is SP at its base width; far below it, its hidden LRs grow by base/width
        over += [o.replace("width=", "param.base_width=") for o in over if o.startswith("width=")]
    return [*over, f"param={param}", "data.eval_size=16", "engine.device=cpu", "engine.progress=false"]


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("param", PARAMS)
def test_each_model_trains_under_each_parameterization(model, param, mnist_root):
    cfg = typed(*model_overrides(model, param, mnist_root), "train.steps=40", "train.batch_size=16")
    (res,) = engine.train(build.job(cfg), [Run(log2_lr=GOOD_LR[param], seed=0)])
    assert not res.diverged
    assert res.final_loss < 0.9 * res.initial_loss, (res.initial_loss, res.final_loss)


def test_resnet_width_and_depth_sweeps_run_from_the_cli(cli, tmp_path):
    for axis, values in (("width", "16,32"), ("depth", "1,2")):
        code, out, err = cli("sweep", "model=resnet", f"{axis}={values}", *TINY, f"results_dir={tmp_path}", f"name={axis}")
        assert code == 0, err
    for axis, scales in (("width", [16, 32]), ("depth", [1, 2])):
        code, out, err = cli("summary", str(tmp_path / axis), "--json")
        assert code == 0, err
        (group,) = json.loads(out)["groups"]
        assert group["axis"] == axis and group["scales"] == scales


@pytest.mark.parametrize("model", ["resnet_ln", "resnet_cnn"])
@pytest.mark.parametrize("param", PARAMS)
def test_batched_equals_one_run_at_a_time_in_float64(model, param, mnist_root):
    over = [*model_overrides(model, param, mnist_root), "train.steps=15", "train.batch_size=8", "n_seeds=2",
            "train.dtype=float64"]
    assert_batched_equals_alone(over, param)


def assert_batched_equals_alone(over: list[str], param: str) -> None:
    """Two seeds x two LRs as one ensemble give the losses of one run at a time (float64 overrides)."""
    runs = [Run(log2_lr=(GOOD_LR[param] + d), seed=s) for s in (0, 1) for d in (-2, 0)]
    batched = engine.train(build.job(typed(*over)), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone):
        assert not a.diverged and not b.diverged
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


def test_a_cnn_sweeps_cifar10_files_from_the_cli(cli, tmp_path):
    """`lrtransfer sweep data=cifar10 data.root=PATH model=cnn width=32,64` on files in torchvision's layout."""
    from tests.datafiles import write_cifar

    root = tmp_path / "datasets"
    write_cifar(root, n_test=32)
    code, out, err = cli("sweep", "data=cifar10", f"data.root={root}", "model=cnn", "width=32,64", *TINY,
                         "data.eval_size=32", f"results_dir={tmp_path}", "name=c")
    assert code == 0, err
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("c/*/record.json"))]
    assert sorted(r["config"]["width"] for r in records) == [32, 64]
    for rec in records:
        assert rec["status"] == "complete" and rec["config"]["model"]["name"] == "cnn"
        assert all(run["eval_loss"] is not None for run in rec["runs"])

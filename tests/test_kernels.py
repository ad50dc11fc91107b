"""The private fused Adam kernel and the plain formula give the same directions."""

from __future__ import annotations

import math

import pytest
import torch

from lrtransfer.errors import ConfigError
from lrtransfer.options.optim import along, kernels, native


def plain(grads_seq, dtype):
    m = v = 0
    for t, g in enumerate(grads_seq, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
    return (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + 1e-8)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dtype, tol", [(torch.float64, 1e-12), (torch.float32, 1e-5)])
def test_adam_directions(monkeypatch, fused, dtype, tol):
    monkeypatch.setattr(kernels, "use_fused", fused)
    gen = torch.Generator().manual_seed(0)
    shapes = [(3, 5, 7), (3, 1, 7)]  # a weight and a bias with a leading run axis
    grads_seq = [[torch.randn(s, generator=gen, dtype=dtype) for s in shapes] for _ in range(4)]
    m = [torch.zeros(s, dtype=dtype) for s in shapes]
    v = [torch.zeros(s, dtype=dtype) for s in shapes]
    out = [torch.full(s, math.nan, dtype=dtype) for s in shapes]  # garbage in the scratch must not leak
    for t, grads in enumerate(grads_seq, 1):
        kernels.adam_directions_(out, grads, m, v, t, 0.9, 0.999, 1e-8)
    for i in range(len(shapes)):
        expected = plain([g[i] for g in grads_seq], dtype)
        torch.testing.assert_close(out[i], expected, rtol=tol, atol=tol)
    assert kernels.use_fused == fused  # the fused kernel did not fail over to the formula here


def test_non_contiguous_gradients_are_handled(monkeypatch):
    monkeypatch.setattr(kernels, "use_fused", True)
    g = torch.randn(4, 6, dtype=torch.float64).t()  # (6, 4), not contiguous
    out, m, v = torch.empty(6, 4, dtype=torch.float64), torch.zeros(6, 4, dtype=torch.float64), torch.zeros(6, 4, dtype=torch.float64)
    kernels.adam_directions_([out], [g], [m], [v], 1, 0.9, 0.999, 1e-8)
    torch.testing.assert_close(out, plain([g], torch.float64))


def plain_eps(grads_seq, eps):
    m = v = 0
    for t, g in enumerate(grads_seq, 1):
        m = 0.9 * m + 0.1 * g
        v = 0.999 * v + 0.001 * g * g
    return (m / (1 - 0.9**t)) / ((v / (1 - 0.999**t)).sqrt() + eps)


@pytest.mark.parametrize("fused", [True, False])
def test_per_tensor_epsilon(monkeypatch, fused):
    """One epsilon per tensor (a parameterization's eps_mult): each tensor's direction is Adam's
    with its own epsilon. Large epsilons, so that a swapped one would show."""
    monkeypatch.setattr(kernels, "use_fused", fused)
    gen = torch.Generator().manual_seed(1)
    shapes, eps = [(2, 4, 3), (2, 1, 3), (2, 5)], [1e-1, 1e-3, 1e-1]
    grads_seq = [[torch.randn(s, generator=gen, dtype=torch.float64) * 1e-2 for s in shapes] for _ in range(3)]
    m = [torch.zeros(s, dtype=torch.float64) for s in shapes]
    v = [torch.zeros(s, dtype=torch.float64) for s in shapes]
    out = [torch.empty(s, dtype=torch.float64) for s in shapes]
    for t, grads in enumerate(grads_seq, 1):
        kernels.adam_directions_(out, grads, m, v, t, 0.9, 0.999, eps)
    for i, e in enumerate(eps):
        torch.testing.assert_close(out[i], plain_eps([g[i] for g in grads_seq], e), rtol=1e-12, atol=1e-12)
    assert not torch.allclose(out[1], plain_eps([g[1] for g in grads_seq], 1e-1))


def test_slot_multipliers_reach_the_optimizer_and_the_decay():
    """A parameterization's eps_multiplier and wd_multiplier are what Adam and the decay use."""
    from types import SimpleNamespace

    from lrtransfer.nn import Atom, Slot
    from lrtransfer.options.optim.adam import AdamOptions, Optimizer
    from lrtransfer.options.param.base import Parameterization
    from lrtransfer.options.schema import DecayScaling

    atom = Atom(3, 3, role="hidden", runs=2)
    tensors = [torch.zeros(2, 3, 3, dtype=torch.float64), torch.zeros(2, 3, dtype=torch.float64)]
    slots = [Slot(atom, "weight", tensors[0], 0.5, eps_mult=0.25, wd_mult=4.0), Slot(atom, "bias", tensors[1], 1.0)]
    assert Optimizer(AdamOptions(eps=1e-6), slots).eps == [0.25e-6, 1e-6]
    param = Parameterization(SimpleNamespace(), width=3, update="adaptive")
    lr = torch.tensor([0.1, 0.0], dtype=torch.float64)  # a frozen run decays by nothing
    for scaling, first, second in ((DecayScaling.independent, 0.04, 0.01), (DecayScaling.lr, 0.1 * 0.5 * 0.04, 0.1 * 0.01)):
        decays = param.decays(slots, lr, 1.0, SimpleNamespace(weight_decay=0.01, decay_scaling=scaling))
        torch.testing.assert_close(decays[0], torch.tensor([first, 0.0], dtype=torch.float64))
        torch.testing.assert_close(decays[1], torch.tensor([second, 0.0], dtype=torch.float64))


def plain_with(grads_seq, b1, b2, eps):
    m = v = 0
    for t, g in enumerate(grads_seq, 1):
        m = b1 * m + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
    return (m / (1 - b1**t)) / ((v / (1 - b2**t)).sqrt() + eps)


@pytest.mark.parametrize("fused", [True, False])
def test_per_tensor_and_per_run_betas_and_epsilon(monkeypatch, fused):
    """Each tensor's own beta1, beta2 and epsilon, each shared by the runs or one per run
    (`kernels.plan`): every run's slice of every tensor gets Adam's direction with its own values.
    Values far apart, so that a swapped one would show."""
    monkeypatch.setattr(kernels, "use_fused", fused)
    gen = torch.Generator().manual_seed(2)
    K, shapes = 3, [(3, 4, 5), (3, 5), (3, 2)]
    b1 = [0.9, (0.5, 0.8, 0.95), 0.7]
    b2 = [(0.99, 0.9, 0.999), 0.95, 0.95]
    eps = [(1e-1, 1e-2, 1e-3), 1e-3, 1e-2]
    calls = kernels.plan(b1, b2, eps, K)
    assert [c[4] for c in calls].count(None) == 1  # the tensor with shared settings: one call, all runs
    grads_seq = [[torch.randn(s, generator=gen, dtype=torch.float64) * 1e-2 for s in shapes] for _ in range(3)]
    m = [torch.zeros(s, dtype=torch.float64) for s in shapes]
    v = [torch.zeros(s, dtype=torch.float64) for s in shapes]
    out = [torch.full(s, math.nan, dtype=torch.float64) for s in shapes]
    for t, grads in enumerate(grads_seq, 1):
        kernels.adam_directions_(out, grads, m, v, t, b1, b2, eps)
    for i in range(len(shapes)):
        for k in range(K):
            want = plain_with([g[i][k] for g in grads_seq], *(kernels.at(x[i], k) for x in (b1, b2, eps)))
            torch.testing.assert_close(out[i][k], want, rtol=1e-12, atol=1e-12)
    other = plain_with([g[1][0] for g in grads_seq], 0.8, 0.95, 1e-3)  # run 1's beta1 in run 0
    assert not torch.allclose(out[1][0], other)


@pytest.mark.parametrize("compiled", ["1", "0"])
def test_the_along_update_is_the_direction_path_with_its_rate_and_decay(monkeypatch, compiled):
    """`along.update_` (each run its own settings, the rate folded into the denominator) against
    directions, then w <- (1 - decay) w - rate d; a run at rate 0 (frozen) keeps its weights exactly.
    Both ways: the compiled pass (`native`) and PyTorch's operations."""
    monkeypatch.setenv("LRTRANSFER_NATIVE", compiled)
    gen = torch.Generator().manual_seed(3)
    K, shapes = 3, [(3, 4, 5), (3, 5)]
    b1 = [(0.5, 0.8, 0.95), 0.9]
    b2 = [0.99, (0.9, 0.99, 0.999)]
    eps = [1e-3, (1e-1, 1e-2, 1e-3)]
    rates = [torch.tensor([1e-2, 0.0, 3e-3], dtype=torch.float64), torch.tensor([2e-2, 0.0, 1e-3], dtype=torch.float64)]
    decays = [torch.tensor([1e-3, 0.0, 2e-2], dtype=torch.float64)] * 2
    w0 = [torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes]
    grads_seq = [[torch.randn(s, generator=gen, dtype=torch.float64) for s in shapes] for _ in range(3)]
    w, want = [x.clone() for x in w0], [x.clone() for x in w0]
    state = [[torch.zeros(s, dtype=torch.float64) for s in shapes] for _ in range(4)]
    out = [torch.empty(s, dtype=torch.float64) for s in shapes]
    for t, grads in enumerate(grads_seq, 1):
        step = torch.tensor(float(t))
        along.update_(w, grads, state[0], state[1], step, along.RunSettings(b1, b2, eps, K), rates, decays, [None, None])
        kernels.adam_directions_(out, grads, state[2], state[3], step, b1, b2, eps)
        for x, d, r, dec in zip(want, out, rates, decays):
            view = [-1] + [1] * (x.dim() - 1)
            x.mul_(1 - dec.view(view)).sub_(d * r.view(view))
    for a, b, a0 in zip(w, want, w0):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-15)
        assert torch.equal(a[1], a0[1])  # the frozen run
        assert not torch.equal(a[0], a0[0])


def compiled_or_skip() -> None:
    if native.library() is None:
        pytest.skip("no C compiler here: the compiled pass cannot be built (PyTorch's operations serve)")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_the_compiled_pass_is_pytorchs_arithmetic(monkeypatch, dtype):
    """`along.c` against the same step in PyTorch's operations, the update and the direction, each run
    at its own beta1, beta2 (both sides of lerp's 0.5), epsilon, rate (one frozen) and decay: equal
    to a rounding or two, never further (a swapped coefficient or a dropped term is far off)."""
    compiled_or_skip()
    gen = torch.Generator().manual_seed(4)
    K, shapes = 4, [(4, 3, 5), (4, 7)]
    b1 = [(0.3, 0.8, 0.95, 0.6), 0.9]
    b2 = [0.99, (0.2, 0.9, 0.999, 0.7)]
    eps = [(1e-1, 1e-3, 1e-8, 1e-2), 1e-3]
    settings = along.RunSettings(b1, b2, eps, K)
    rates = [torch.tensor([1e-2, 0.0, 3e-3, 1e-1], dtype=dtype)] * 2
    decays = [torch.tensor([1e-3, 0.0, 2e-2, 0.1], dtype=dtype)] * 2
    w0 = [torch.randn(s, generator=gen, dtype=dtype) for s in shapes]
    grads_seq = [[torch.randn(s, generator=gen, dtype=dtype) for s in shapes] for _ in range(4)]
    result = {}
    for compiled in ("1", "0"):
        monkeypatch.setenv("LRTRANSFER_NATIVE", compiled)
        w, m, v = [x.clone() for x in w0], [torch.zeros_like(x) for x in w0], [torch.zeros_like(x) for x in w0]
        out, m2, v2 = [torch.empty_like(x) for x in w0], [torch.zeros_like(x) for x in w0], [torch.zeros_like(x) for x in w0]
        for t, grads in enumerate(grads_seq, 1):
            step = torch.tensor(float(t))
            along.update_(w, grads, m, v, step, settings, rates, decays, [None, None])
            along.directions_(out, grads, m2, v2, step, settings)
        result[compiled] = w + m + v + out
    tol = {torch.float32: 1e-6, torch.float64: 1e-14}[dtype]
    for a, b in zip(result["1"], result["0"]):
        torch.testing.assert_close(a, b, rtol=tol, atol=tol)


def test_the_small_tensors_with_per_run_settings_take_the_compiled_pass(monkeypatch):
    """`plan` sends the small tensors whose settings differ between runs, and only those, to `along`,
    which runs `along.c` on each (so a change that quietly falls back to the eight-pass formula
    shows here)."""
    compiled_or_skip()
    seen = []
    real = native.adam_along_
    monkeypatch.setattr(native, "adam_along_", lambda *a: (seen.append(a[2].shape), real(*a))[1])
    shapes = [(3, 4, 5), (3, 5)]
    w = [torch.randn(s) for s in shapes]
    grads = [torch.randn(s) for s in shapes]
    calls = kernels.plan([(0.5, 0.8, 0.9), 0.9, 0.9], [0.99, (0.9, 0.99, 0.999), 0.99], [1e-8] * 3, 3, small=[0, 1, 2])
    (call,) = [c for c in calls if c.how == kernels.EVERY_RUN]
    assert call.tensors == [0, 1]  # the third shares its settings: the fused kernel's
    along.update_(w, grads, [torch.zeros_like(x) for x in w], [torch.zeros_like(x) for x in w], torch.tensor(1.0),
                  call.runs, [torch.full((3,), 1e-3)] * 2, None, [None, None])
    assert seen == [torch.Size([3, 4, 5]), torch.Size([3, 5])]


@pytest.mark.parametrize("how", ["no compiler", "a compiler that fails"])
def test_without_a_working_compiler_pytorchs_operations_serve(monkeypatch, tmp_path, how):
    """No `cc`, or one that cannot build `along.c`: `library()` is None, nothing is left in the cache
    folder, and the step is still taken (by PyTorch's operations), once the attempt is made."""
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_library", None)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    if how == "no compiler":
        monkeypatch.setenv("CC", "no-such-compiler-here")
    else:
        monkeypatch.setenv("CC", "false")
    assert native.library() is None
    folder = tmp_path / "lrtransfer" / "native"
    assert not folder.exists() or not any(folder.iterdir())
    w, g = torch.ones(2, 3), torch.ones(2, 3)
    m, v = torch.zeros(2, 3), torch.zeros(2, 3)
    settings = along.RunSettings([(0.5, 0.9)], [0.99], [1e-8], 2)
    along.update_([w], [g], [m], [v], torch.tensor(1.0), settings, [torch.tensor([0.1, 0.0])], None, [None])
    assert torch.allclose(w[0], torch.full((3,), 0.9)) and torch.equal(w[1], torch.ones(3))  # run 1 frozen


def test_a_bad_lrtransfer_native_is_one_line_naming_it_and_the_choices(monkeypatch):
    """Said when the optimizer's per-run settings are made, before any step."""
    monkeypatch.setenv("LRTRANSFER_NATIVE", "off")
    with pytest.raises(ConfigError, match=r"LRTRANSFER_NATIVE='off' is not one of 0 .* or 1") as e:
        along.RunSettings([(0.5, 0.9)], [0.99], [1e-8], 2)
    assert "\n" not in str(e.value)

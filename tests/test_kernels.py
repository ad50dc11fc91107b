"""The private fused Adam kernel and the plain formula give the same directions."""

from __future__ import annotations

import math

import pytest
import torch

from lrtransfer.options.optim import kernels


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

"""Adam along the run axis: whole (K, ...) tensors, each run at its own beta1, beta2 and epsilon.

The fused kernel takes one setting a call (`kernels`). The tensors whose settings differ between
runs are small ones (a large tensor goes run by run, a fused call on each run's slice), and for
them one pass over the whole tensor serves every run: `native.adam_along_` where it can be had
(a compiled loop, one pass over memory), else PyTorch's operations (eight passes). Both take
the same per-run coefficients, computed here once a step for every tensor of the call at once,
as (n, K) arrays: n tensors, K runs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lrtransfer.options.optim import native


class RunSettings:
    """Each of n tensors' beta1, beta2 and epsilon in each of K runs, from their Settings (a float
    every run shares, or a tuple of one per run): (n, K) arrays, made once per device and dtype
    (a CUDA graph replays the arrays of its capture)."""

    def __init__(self, beta1: Sequence, beta2: Sequence, eps: Sequence, runs: int) -> None:
        def rows(settings: Sequence) -> list[list[float]]:
            return [list(s) if isinstance(s, tuple) else [float(s)] * runs for s in settings]

        # (5, n, K) float64: beta1, beta2, eps, and the moving averages' weights 1 - beta1, 1 - beta2
        b1, b2, e = (torch.tensor(rows(x), dtype=torch.float64).view(len(x), runs) for x in (beta1, beta2, eps))
        self._host = torch.stack([b1, b2, e, 1 - b1, 1 - b2])
        self._on: dict[tuple, Tensor] = {}
        native.enabled()  # a bad LRTRANSFER_NATIVE is said when the optimizer is built, before any step

    def on(self, like: Tensor) -> Tensor:
        """The (5, n, K) arrays on `like`'s device, in its dtype."""
        key = (like.device, like.dtype)
        if key not in self._on:
            self._on[key] = self._host.to(like.device, like.dtype)
        return self._on[key]

    def corrections(self, like: Tensor, step: Tensor) -> tuple[Tensor, ...]:
        """(w1, w2, c1, c2, eps), each (n, K): the weights 1 - beta, the bias corrections
        c1 = 1 - beta1^t and c2 = sqrt(1 - beta2^t) at step t, and epsilon."""
        b1, b2, e, w1, w2 = self.on(like)
        t = step.to(like.dtype)
        return w1, w2, 1 - b1**t, (1 - b2**t).sqrt(), e


def directions_(out: Sequence[Tensor], grads, m, v, step: Tensor, settings: RunSettings) -> None:
    """Moments updated, and m_hat / (sqrt(v_hat) + eps) written into `out`: as
    m / (c1 (sqrt(v) / c2 + eps)), the corrections folded into the denominator."""
    w1, w2, c1, c2, e = settings.corrections(m[0], step)
    scale, shift = c1 / c2, e * c1
    for i, (o, g, mi, vi) in enumerate(zip(out, grads, m, v)):
        _pass(None, g, mi, vi, o, w1[i], w2[i], scale[i], shift[i], None)


def update_(params: Sequence[Tensor], grads, m, v, step: Tensor, settings: RunSettings,
            rates: Sequence[Tensor], decays: Sequence[Tensor] | None, copies: Sequence[Tensor | None]) -> None:
    """The whole step: w <- (1 - decay) w - rate m_hat / (sqrt(v_hat) + eps), the rate folded into the
    denominator, sqrt(v) c1 / (c2 rate) + eps c1 / rate, so the update is one division. rates,
    decays (None: none): per tensor, (K,) on the host; a run at rate 0 (a frozen one) gets a
    denominator of inf: no update, as rate x direction = 0 would give. copies: per tensor a
    lower-precision copy written from it, or None."""
    like = params[0]
    w1, w2, c1, c2, e = settings.corrections(like, step)
    rate = torch.stack(list(rates)).to(like.device, like.dtype, non_blocking=True)  # (n, K)
    live = rate > 0
    scale = torch.where(live, c1 / (c2 * rate), 1.0)
    shift = torch.where(live, e * c1 / rate, math.inf)
    keep = None if decays is None else 1 - torch.stack(list(decays)).to(like.device, like.dtype, non_blocking=True)
    for i, (w, g, mi, vi) in enumerate(zip(params, grads, m, v)):
        _pass(w, g, mi, vi, None, w1[i], w2[i], scale[i], shift[i], None if keep is None else keep[i])
        if copies[i] is not None:
            copies[i].copy_(w)


def _pass(w: Tensor | None, g: Tensor, m: Tensor, v: Tensor, out: Tensor | None,
          w1: Tensor, w2: Tensor, scale: Tensor, shift: Tensor, keep: Tensor | None) -> None:
    """One tensor's pass (`native.adam_along_`'s arithmetic): the coefficients (K,), one per run."""
    g = g if g.is_contiguous() else g.contiguous()
    if native.usable(g, m, v, *(t for t in (w, out) if t is not None)) and w1.dtype == g.dtype:
        native.adam_along_(w, g, m, v, out, w1, w2, scale, shift, keep)
        return
    per_run = lambda x: x.view(-1, *[1] * (g.dim() - 1))  # (K,) -> (K, 1, ...)
    m.lerp_(g, per_run(w1))
    o = out if out is not None else torch.empty_like(g)
    v.lerp_(torch.mul(g, g, out=o), per_run(w2))
    torch.sqrt(v, out=o).mul_(per_run(scale)).add_(per_run(shift))
    if out is not None:
        torch.div(m, o, out=o)
        return
    if keep is not None:
        w.mul_(per_run(keep))
    w.addcdiv_(m, o, value=-1.0)

"""Adam (Kingma & Ba), as a direction: m_hat / (sqrt(v_hat) + eps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from lrtransfer.nn.linalg import run_view
from lrtransfer.options.optim import passes
from lrtransfer.options.optim.kernels import CountsSteps, adam_directions_, adam_update_
from lrtransfer.options.schema import ADAPTIVE, DecayScaling, Grid, added, in_unit, non_negative, positive


if TYPE_CHECKING:
    from lrtransfer.nn import Slot


@dataclass
class AdamOptions:
    UPDATE: ClassVar[str] = ADAPTIVE
    PER_RUN: ClassVar[tuple[str, ...]] = ("weight_decay",)  # may vary across a job's runs (grid.optim.weight_decay)
    LR_GRID: ClassVar[Grid] = Grid(-14, -4)  # log2 learning rates every job trains, unless overridden

    name: str = "adam"
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decay_scaling: DecayScaling = DecayScaling.independent
    decay_1d: bool = added(True)  # false: biases and norm gains do not decay (nanoGPT's and GPT-2's recipes)

    def check(self) -> None:
        check_adam(self)


def check_adam(options) -> None:
    """Adam's keys, for every optimizer that has them (Muon's AdamW part)."""
    in_unit("optim.beta1", options.beta1)
    in_unit("optim.beta2", options.beta2)
    positive("optim.eps", options.eps)
    non_negative("optim.weight_decay", options.weight_decay)


OPTIONS = AdamOptions


class Optimizer(CountsSteps):
    def __init__(self, options: AdamOptions, slots: Sequence[Slot]) -> None:
        tensors = [s.tensor for s in slots]
        self.beta1, self.beta2 = options.beta1, options.beta2
        self.eps = [options.eps * s.eps_mult for s in slots]  # each tensor's (the parameterization's eps_mult)
        self.m = [torch.zeros_like(t) for t in tensors]
        self.v = [torch.zeros_like(t) for t in tensors]
        self.tensors = tensors
        self._split = passes.split(tensors)  # (tensors updated for every run at once, run by run)
        small = set(self._split[0])
        # where `directions` writes; `update` needs it only for the small tensors
        self._scratch = [torch.empty_like(t) if i in small else None for i, t in enumerate(tensors)]
        self.t = 0
        self._step = torch.zeros((), device=tensors[0].device if tensors else None)  # the fused kernels read t here

    @property
    def state(self) -> list[Tensor]:
        return self.m + self.v

    @property
    def scratch(self) -> list[Tensor]:
        """The direction of every tensor (`directions`): the large ones' made on first use."""
        if any(d is None for d in self._scratch):
            self._scratch = [torch.empty_like(t) if d is None else d for d, t in zip(self._scratch, self.tensors)]
        return self._scratch

    @torch.no_grad()
    def directions(self, grads: Sequence[Tensor], advance: bool = True) -> list[Tensor]:
        """advance False: the step was counted already (`advance`, outside a CUDA graph's step)."""
        if advance:
            self.advance()
        adam_directions_(self.scratch, grads, self.m, self.v, self._step, self.beta1, self.beta2, self.eps)
        return self.scratch

    def tensor_state(self, i: int) -> tuple[Tensor, ...]:
        """Tensor i's moments."""
        return self.m[i], self.v[i]

    @torch.no_grad()
    def skip_update(self, i: int, grad: Tensor, used: Tensor, steps: Tensor, rate: Tensor, decay: Tensor | None) -> None:
        """Tensor i's step for the runs `used` ((K,) bool) alone, each at its own step count `steps`
        ((K,): the steps that used it, this one included), as torch.optim.Adam (AdamW with a decay)
        steps a parameter that has a gradient at some steps only; the other runs' tensor and
        moments stay as they are. rate, decay (None: none): (K,) on the device (`training/skips.py`)."""
        w, m, v = self.tensors[i], self.m[i], self.v[i]
        g, keep = passes.like(grad, w), run_view(used, w)
        per_run = lambda x: run_view(x.to(w.dtype), w)  # noqa: E731
        count = per_run(steps.clamp(min=1))
        m1 = m.lerp(g, 1 - self.beta1)
        v1 = v.mul(self.beta2).addcmul_(g, g, value=1 - self.beta2)
        denom = v1.sqrt().div_((1 - self.beta2**count).sqrt()).add_(self.eps[i])
        w1 = w if decay is None else w * (1 - per_run(decay))
        w1 = w1 - per_run(rate) / (1 - self.beta1**count) * m1 / denom
        for dst, new in ((w, w1), (m, m1), (v, v1)):
            dst.copy_(torch.where(keep, new, dst))

    @torch.no_grad()
    def update(self, grads: Sequence[Tensor], rates, decays, runs: Sequence[int], copies=None) -> None:
        """The whole step, where each update is a rate times Adam's direction: for each run k and
        tensor i, w_i[k] <- (1 - decays[i][k]) w_i[k] - rates[i][k] m_hat / (sqrt(v_hat) + eps_i).
        rates, decays (or None): per tensor, a (K,) host tensor; runs: the live runs, those the
        large tensors are updated for, each in one fused pass (`passes`); copies: per tensor a
        lower-precision copy to write from it, or None."""
        self.advance()
        pick = passes.pick
        copies = copies if copies is not None else [None] * len(self.tensors)
        small, large = self._split
        if small:  # every run at once, the direction path's way
            ws = pick(self.tensors, small)
            gs = [passes.like(g, w) for g, w in zip(pick(grads, small), ws)]
            ds = pick(self._scratch, small)
            adam_directions_(ds, gs, pick(self.m, small), pick(self.v, small), self._step, self.beta1, self.beta2,
                             pick(self.eps, small))
            passes.whole(ws, ds, pick(rates, small), pick(decays, small), pick(copies, small))
        if not large:
            return
        w, m, v, g, c = (passes.runs_of(pick(x, large)) for x in (self.tensors, self.m, self.v, grads, copies))
        r, dec = passes.floats(pick(rates, large)), passes.floats(pick(decays, large))
        for k in runs:
            for rate, decay, eps, idx in passes.groups(k, r, dec, pick(self.eps, large)):
                adam_update_([w[i][k] for i in idx], [passes.like(g[i][k], w[i][k]) for i in idx],
                             [m[i][k] for i in idx], [v[i][k] for i in idx], self._step,
                             self.beta1, self.beta2, eps, rate, decay)
            passes.write_copies(k, w, c)

"""SGD with heavy-ball momentum (torch's convention: buf = momentum * buf + g)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from lrtransfer.nn.linalg import run_view
from lrtransfer.options.optim import passes
from lrtransfer.options.schema import GRADIENT, DecayScaling, Grid, added, in_unit, non_negative


if TYPE_CHECKING:
    from lrtransfer.nn import Slot


@dataclass
class SGDOptions:
    UPDATE: ClassVar[str] = GRADIENT
    PER_RUN: ClassVar[tuple[str, ...]] = ("weight_decay",)  # may vary across a job's runs (grid.optim.weight_decay)
    LR_GRID: ClassVar[Grid] = Grid(-10, 0)  # log2 learning rates every job trains, unless overridden

    name: str = "sgd"
    momentum: float = 0.9
    nesterov: bool = False
    weight_decay: float = 0.0
    decay_scaling: DecayScaling = DecayScaling.independent
    decay_1d: bool = added(True)  # false: biases and norm gains do not decay (nanoGPT's and GPT-2's recipes)

    def check(self) -> None:
        in_unit("optim.momentum", self.momentum)
        non_negative("optim.weight_decay", self.weight_decay)


OPTIONS = SGDOptions


class Optimizer:
    def __init__(self, options: SGDOptions, slots: Sequence[Slot]) -> None:
        tensors = [s.tensor for s in slots]
        self.momentum, self.nesterov = options.momentum, options.nesterov
        self.tensors = tensors
        self._split = passes.split(tensors)  # (tensors updated for every run at once, run by run)
        self.buf = [torch.zeros_like(t) for t in tensors]
        self.scratch = [torch.empty_like(t) for t in tensors]
        self.t = 0

    @property
    def state(self) -> list[Tensor]:
        return self.buf

    def advance(self) -> None:
        """Count a step (the first one starts the momentum buffers)."""
        self.t += 1

    @torch.no_grad()
    def directions(self, grads: Sequence[Tensor], advance: bool = True) -> list[Tensor]:
        """advance False: the step was counted already (`advance`, outside a CUDA graph's step)."""
        if advance:
            self.advance()
        return self._scalable(self._directions(grads), range(len(self.tensors)))

    def _scalable(self, directions: Sequence[Tensor], idx: Sequence[int]) -> list[Tensor]:
        """The directions of tensors idx, for the caller to scale in place: a momentum buffer
        among them is copied to its scratch first, never handed out itself."""
        return [self.scratch[i].copy_(directions[i]) if directions[i] is self.buf[i] else directions[i] for i in idx]

    def _directions(self, grads: Sequence[Tensor]) -> list[Tensor]:
        """The step's directions, which the caller must not modify: the momentum buffers themselves
        (heavy ball), g + momentum * buf (Nesterov), or the gradients (no momentum). The step is
        counted already (`advance`)."""
        if self.momentum == 0:  # fresh from autograd (in the weights' dtype)
            return [passes.like(g, t) for g, t in zip(grads, self.tensors)]
        for buf, g, out in zip(self.buf, grads, self.scratch):
            if self.t == 1:
                buf.copy_(g)  # torch.optim.SGD starts the buffer at the first gradient
            else:
                buf.mul_(self.momentum).add_(g)
            if self.nesterov:
                torch.add(g, buf, alpha=self.momentum, out=out)
        return self.scratch if self.nesterov else self.buf

    def tensor_state(self, i: int) -> tuple[Tensor, ...]:
        """Tensor i's momentum buffer."""
        return (self.buf[i],)

    @torch.no_grad()
    def skip_update(self, i: int, grad: Tensor, used: Tensor, steps: Tensor, rate: Tensor, decay: Tensor | None) -> None:
        """Tensor i's step for the runs `used` ((K,) bool) alone, as torch.optim.SGD steps a parameter
        that has a gradient at some steps only (its buffer starts at its first gradient: ours is
        zero until then); the other runs' tensor and buffer stay as they are. steps: unused (SGD
        counts none); rate, decay (None: none): (K,) on the device (`training/skips.py`)."""
        w, buf = self.tensors[i], self.buf[i]
        g, keep = passes.like(grad, w), run_view(used, w)
        d = g
        if self.momentum:
            buf1 = buf.mul(self.momentum).add_(g)
            d = g.add(buf1, alpha=self.momentum) if self.nesterov else buf1
            buf.copy_(torch.where(keep, buf1, buf))
        w1 = w if decay is None else w * (1 - run_view(decay.to(w.dtype), w))
        w.copy_(torch.where(keep, w1 - run_view(rate.to(w.dtype), w) * d, w))

    @torch.no_grad()
    def update(self, grads: Sequence[Tensor], rates, decays, runs: Sequence[int], copies=None) -> None:
        """The whole step, where each update is a rate times the momentum direction: the buffers
        as `directions` makes them, then for each run k of `runs` and tensor i, w_i[k] <- (1 -
        decays[i][k]) w_i[k] - rates[i][k] d_i[k], one call per run's group of tensors sharing
        (rate, decay) (`passes`), then the run's copies written. rates, decays (or None): per
        tensor, a (K,) host tensor; runs: the live runs; copies: per tensor a copy, or None."""
        pick = passes.pick
        self.advance()
        directions = self._directions(grads)
        copies = copies if copies is not None else [None] * len(self.tensors)
        small, large = self._split
        passes.whole(pick(self.tensors, small), self._scalable(directions, small), pick(rates, small),
                     pick(decays, small), pick(copies, small))
        w, d, c = (passes.runs_of(pick(x, large)) for x in (self.tensors, directions, copies))
        r, dec = passes.floats(pick(rates, large)), passes.floats(pick(decays, large))
        for k in runs if large else ():
            for rate, decay, _, idx in passes.groups(k, r, dec, [None] * len(large)):
                mine = [w[i][k] for i in idx]
                if decay:
                    torch._foreach_mul_(mine, 1.0 - decay)
                torch._foreach_add_(mine, [d[i][k] for i in idx], alpha=-rate)
            passes.write_copies(k, w, c)

"""SGD with heavy-ball momentum (torch's convention: buf = momentum * buf + g)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

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
        self.buf = [torch.zeros_like(t) for t in tensors]
        self.scratch = [torch.empty_like(t) for t in tensors]
        self.t = 0

    @property
    def state(self) -> list[Tensor]:
        return self.buf

    @torch.no_grad()
    def directions(self, grads: Sequence[Tensor]) -> list[Tensor]:
        self.t += 1
        if self.momentum == 0:
            return list(grads)  # fresh from autograd: the caller's to modify
        for buf, g, out in zip(self.buf, grads, self.scratch):
            if self.t == 1:
                buf.copy_(g)  # torch.optim.SGD starts the buffer at the first gradient
            else:
                buf.mul_(self.momentum).add_(g)
            if self.nesterov:
                torch.add(g, buf, alpha=self.momentum, out=out)
            else:
                out.copy_(buf)
        return self.scratch

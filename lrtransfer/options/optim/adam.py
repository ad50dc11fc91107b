"""Adam (Kingma & Ba), as a direction: m_hat / (sqrt(v_hat) + eps)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from lrtransfer.options.optim.kernels import adam_directions_
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


class Optimizer:
    def __init__(self, options: AdamOptions, slots: Sequence[Slot]) -> None:
        tensors = [s.tensor for s in slots]
        self.beta1, self.beta2 = options.beta1, options.beta2
        self.eps = [options.eps * s.eps_mult for s in slots]  # each tensor's (the parameterization's eps_mult)
        self.m = [torch.zeros_like(t) for t in tensors]
        self.v = [torch.zeros_like(t) for t in tensors]
        self.scratch = [torch.empty_like(t) for t in tensors]
        self.t = 0

    @property
    def state(self) -> list[Tensor]:
        return self.m + self.v

    @torch.no_grad()
    def directions(self, grads: Sequence[Tensor]) -> list[Tensor]:
        self.t += 1
        adam_directions_(self.scratch, grads, self.m, self.v, self.t, self.beta1, self.beta2, self.eps)
        return self.scratch

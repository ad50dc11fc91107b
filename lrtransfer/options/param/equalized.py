"""Equalized learning rate (the equalized-LR note; Karras et al., ProGAN).

Every weight is stored as N(0, 1) and scaled at every forward by the He constant
c = gain * sqrt(1 / fan_in). At initialisation the network computes exactly what a
He-normal network computes, but the optimizer sees unit-scale weights: under Adam
each stored weight moves ~lr per step, so the effective weight moves ~lr * c, a
per-layer learning rate proportional to 1/sqrt(fan_in) (under SGD, to 1/fan_in).
One global learning rate, no per-tensor multipliers.

`scale: output` (the default) is the note's form: the module's whole output, bias
included, is multiplied by c. `scale: weight` is ProGAN's own code: the weight
only, the bias unscaled. Biases start at zero in both.

A lookup table (`Embedding`, the transformer's token and position embeddings) is
stored N(0, 1) like every weight and multiplied by c with the note's fan_in taken
literally: prod(weight.shape[1:]) of torch's nn.Embedding weight (num, dim) is dim,
the width, so c = gain * sqrt(1 / width). That is what torch.nn.init.kaiming_normal_
gives an nn.Embedding, so at init the network is still exactly its He-normal twin.
(The one-hot matrix view would give fan_in = num, the vocabulary: not the note's rule.)

The LR means something else than SP's, so the grid is this parameterization's own,
per kind of update (`LR_GRIDS`). Adam moves each stored N(0,1) weight by ~lr, which
moves the effective weight by ~lr * gain / sqrt(fan_in): the optimal LR is
~sqrt(fan_in)/gain times SP's, near 2^-5 at the study's widths. Under SGD the
effective per-layer LR is lr * gain^2 / fan_in, so the optimum sits near 2^0
rather than SP's ~2^-4. Under Muon the orthogonalised update of a stored weight is He's
constant times smaller in effect, so the optimum sits above SP's Muon optimum, and the
grid is its own (2^-8..2^2).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

import torch
from torch import Tensor

from lrtransfer.nn import Atom
from lrtransfer.options.param.base import Parameterization
from lrtransfer.options.param.sde import SdeOptions
from lrtransfer.options.schema import ADAPTIVE, GRADIENT, ORTHOGONALIZED, Grid, positive


class EqualizedScale(str, Enum):
    """What the He constant multiplies: the module's whole `output` (the note) or the `weight` only (ProGAN)."""

    output = "output"
    weight = "weight"


@dataclass
class EqualizedOptions(SdeOptions):
    LR_GRIDS: ClassVar[dict[str, Grid]] = {ADAPTIVE: Grid(-11, -1), GRADIENT: Grid(-5, 5), ORTHOGONALIZED: Grid(-8, 2)}

    name: str = "equalized"
    gain: float = math.sqrt(2.0)  # c = gain * sqrt(1 / fan_in)
    scale: EqualizedScale = EqualizedScale.output

    def check(self) -> None:
        positive("param.gain", self.gain)


OPTIONS = EqualizedOptions


class Equalized(Parameterization):
    name = "equalized"

    def __init__(self, options: EqualizedOptions, *, width: int, update: str, depth: int | None = None, **job) -> None:
        super().__init__(options, width=width, update=update, depth=depth, **job)
        self.gain = options.gain
        self.scale_bias = options.scale.value == "output"

    def he_constant(self, atom: Atom) -> float:
        """gain * sqrt(1 / fan_in), fan_in = prod(weight.shape[1:]) in torch's layout of the
        layer's weight, as the note computes it (`Atom.torch_fan_in`)."""
        return self.gain * math.sqrt(1.0 / atom.torch_fan_in)

    def multipliers(self, atom: Atom) -> tuple[float, float]:
        c = self.he_constant(atom)
        return c, (c if self.scale_bias else 1.0)

    def from_own(self, atom: Atom, name: str, own: Tensor) -> None:
        return None  # N(0, 1) weights and zero biases are the rule: drawn here, whatever the model's own (model.init=own)

    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.randn(atom.fan_in, atom.fan_out, generator=gen)

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.zeros(atom.fan_out)

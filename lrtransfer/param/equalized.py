"""Equalized learning rate (seed 001; Karras et al., ProGAN).

Every weight is stored as N(0, 1) and scaled at every forward by the He constant
c = gain * sqrt(1 / fan_in). At initialisation the network computes exactly what a
He-normal network computes, but the optimizer sees unit-scale weights: under Adam
each stored weight moves ~lr per step, so the effective weight moves ~lr * c, a
per-layer learning rate proportional to 1/sqrt(fan_in) (under SGD, to 1/fan_in).
One global learning rate, no per-tensor multipliers.

`scale: output` (the default) is seed 001's form: the module's whole output, bias
included, is multiplied by c. `scale: weight` is ProGAN's own code: the weight
only, the bias unscaled. Biases start at zero in both.

A lookup table (`Embedding`, the transformer's token and position embeddings) is
stored N(0, 1) like every weight and multiplied by c with seed 001's fan_in taken
literally: prod(weight.shape[1:]) of torch's nn.Embedding weight (num, dim) is dim,
the width, so c = gain * sqrt(1 / width). That is what torch.nn.init.kaiming_normal_
gives an nn.Embedding, so at init the network is still exactly its He-normal twin.
(The one-hot matrix view would give fan_in = num, the vocabulary: not seed 001's rule.)
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from lrtransfer.model.layers import Atom
from lrtransfer.param.base import Parameterization


class Equalized(Parameterization):
    name = "equalized"

    def __init__(self, cfg) -> None:
        super().__init__(cfg)
        self.gain = cfg.param.gain
        self.scale_bias = cfg.param.scale.value == "output"

    def he_constant(self, atom: Atom) -> float:
        """gain * sqrt(1 / fan_in), fan_in = prod(weight.shape[1:]) in torch's layout of the
        layer's weight, as seed 001 computes it (`Atom.torch_fan_in`)."""
        return self.gain * math.sqrt(1.0 / atom.torch_fan_in)

    def multipliers(self, atom: Atom) -> tuple[float, float]:
        c = self.he_constant(atom)
        return c, (c if self.scale_bias else 1.0)

    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.randn(atom.fan_in, atom.fan_out, generator=gen)

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.zeros(atom.fan_out)

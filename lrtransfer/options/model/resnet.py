"""ResNet-S (the lecture notes, eqs. 7.38-7.39), with an input layer so `width` is the residual stream:

    Res(z) = z + sigma(MM_1(sigma(MM_2(z))))        one block (MM_2 applied first)
    ResNet-S(x) = MM(Res(Res(... Res(MM_in(x)))))   `depth` blocks

The skip and branch multipliers of every block are the residual rule's
(`model.residual`, or the parameterization's own): the lecture notes' formula is
the rule `one`. With `model.layer_norm`, each block reads LN(z) instead of z (pre-norm).
Images are read as vectors of C*H*W values.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import ClassVar

from lrtransfer.nn import HIDDEN, INPUT, OUTPUT, Activation, Flatten, LayerNorm, Linear, Sequential
from lrtransfer.options.schema import IMAGE, SIGNAL, VECTOR, ResidualRule
from lrtransfer.options.schema import Activation as ActivationName


@dataclass
class ResNetOptions:
    """ResNet-S (the lecture notes): MM(Res(...Res(MM_in(x)))), Res(z) = z + sigma(MM_1(sigma(MM_2(z))))."""

    MIN_DEPTH: ClassVar[int] = 1  # residual blocks
    READS: ClassVar[tuple[str, ...]] = (VECTOR, IMAGE, SIGNAL)  # images and signals are flattened

    name: str = "resnet"
    ACTIVATION: ClassVar[str] = "relu"  # what activation=auto means (scaled under param=modular)
    activation: ActivationName = ActivationName.auto
    bias: bool = True
    layer_norm: bool = False  # LN (learnable gain and bias) at the start of every block
    residual: ResidualRule = ResidualRule.auto


OPTIONS = ResNetOptions


def build(options: ResNetOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Sequential:
    act, bias = options.activation.value, options.bias

    def block() -> Sequential:
        layers = [LayerNorm(width, runs=runs)] if options.layer_norm else []
        layers += [Linear(width, width, role=HIDDEN, runs=runs, bias=bias), Activation(act),  # MM_2, sigma
                   Linear(width, width, role=HIDDEN, runs=runs, bias=bias), Activation(act)]  # MM_1, sigma
        return Sequential(layers)

    layers = [Flatten(len(input_shape))] if len(input_shape) > 1 else []
    layers += [
        Linear(math.prod(input_shape), width, role=INPUT, runs=runs, bias=bias),
        param.residual_stack([block() for _ in range(depth)], rule=options.residual.value),
        Linear(width, output_dim, role=OUTPUT, runs=runs, bias=bias),
    ]
    return Sequential(layers)

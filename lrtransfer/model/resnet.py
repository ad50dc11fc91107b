"""ResNet-S (seed 002, eqs. 7.38-7.39), with an input layer so `width` is the residual stream:

    Res(z) = z + sigma(MM_1(sigma(MM_2(z))))        one block (MM_2 applied first)
    ResNet-S(x) = MM(Res(Res(... Res(MM_in(x)))))   `depth` blocks

The skip and branch multipliers of every block are the residual rule's
(`model.residual`, or the parameterization's own): the seed's formula is the rule
`one`. With `model.layer_norm`, each block reads LN(z) instead of z (pre-norm).
Images are read as vectors of C*H*W values.
"""

from __future__ import annotations

import math

from lrtransfer.config import model_activation
from lrtransfer.model.layers import HIDDEN, INPUT, OUTPUT, Activation, Flatten, LayerNorm, Linear, Sequential


def build(cfg, param, *, runs: int, input_shape: tuple[int, ...], output_dim: int) -> Sequential:
    width, act, bias = cfg.width, model_activation(cfg), cfg.model.bias

    def block() -> Sequential:
        layers = [LayerNorm(width, runs=runs)] if cfg.model.layer_norm else []
        layers += [Linear(width, width, role=HIDDEN, runs=runs, bias=bias), Activation(act),  # MM_2, sigma
                   Linear(width, width, role=HIDDEN, runs=runs, bias=bias), Activation(act)]  # MM_1, sigma
        return Sequential(layers)

    layers = [Flatten(len(input_shape))] if len(input_shape) > 1 else []
    layers += [
        Linear(math.prod(input_shape), width, role=INPUT, runs=runs, bias=bias),
        param.residual_stack([block() for _ in range(cfg.depth)]),
        Linear(width, output_dim, role=OUTPUT, runs=runs, bias=bias),
    ]
    return Sequential(layers)

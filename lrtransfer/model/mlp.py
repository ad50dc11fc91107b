"""MLP(x) = MM(sigma(MM(... sigma(MM(x))))) (seed 002, eq. 7.36), `depth` weight layers.

Images (C, H, W) are read as vectors of C*H*W values.
"""

from __future__ import annotations

import math

from lrtransfer.config import model_activation
from lrtransfer.model.layers import HIDDEN, INPUT, OUTPUT, Activation, Flatten, Linear, Sequential


def build(cfg, param, *, runs: int, input_shape: tuple[int, ...], output_dim: int) -> Sequential:
    width, act, bias = cfg.width, model_activation(cfg), cfg.model.bias
    layers = [Flatten(len(input_shape))] if len(input_shape) > 1 else []
    layers += [Linear(math.prod(input_shape), width, role=INPUT, runs=runs, bias=bias), Activation(act)]
    for _ in range(cfg.depth - 2):
        layers += [Linear(width, width, role=HIDDEN, runs=runs, bias=bias), Activation(act)]
    layers.append(Linear(width, output_dim, role=OUTPUT, runs=runs, bias=bias))
    return Sequential(layers)

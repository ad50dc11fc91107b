"""MLP(x) = MM(sigma(MM(... sigma(MM(x))))) (the lecture notes, eq. 7.36), `depth` weight layers.

Images (C, H, W) are read as vectors of C*H*W values.
"""

from __future__ import annotations

import math

from dataclasses import dataclass
from typing import ClassVar

from lrtransfer.nn import HIDDEN, INPUT, OUTPUT, Activation, Flatten, Linear, Sequential
from lrtransfer.options.schema import IMAGE, SIGNAL, VECTOR
from lrtransfer.options.schema import Activation as ActivationName


@dataclass
class MLPOptions:
    MIN_DEPTH: ClassVar[int] = 2  # an input and an output layer
    READS: ClassVar[tuple[str, ...]] = (VECTOR, IMAGE, SIGNAL)  # images and signals are flattened

    name: str = "mlp"
    ACTIVATION: ClassVar[str] = "relu"  # what activation=auto means (scaled under param=modular)
    activation: ActivationName = ActivationName.auto
    bias: bool = True


OPTIONS = MLPOptions


def build(options: MLPOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Sequential:
    act, bias = options.activation.value, options.bias
    layers = [Flatten(len(input_shape))] if len(input_shape) > 1 else []
    layers += [Linear(math.prod(input_shape), width, role=INPUT, runs=runs, bias=bias), Activation(act)]
    for _ in range(depth - 2):
        layers += [Linear(width, width, role=HIDDEN, runs=runs, bias=bias), Activation(act)]
    layers.append(Linear(width, output_dim, role=OUTPUT, runs=runs, bias=bias))
    return Sequential(layers)

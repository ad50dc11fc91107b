"""A plain conv net for images: a conv stem from the image's channels to `width`, `depth` - 1
more conv layers of `width` channels (each followed by the activation), global average
pooling, and a linear readout. With `model.pool` = p > 0 the stem's output is
average-pooled p x p, which divides the cost of every later layer by p^2.

Convolutions are matrix multiplications with shared weights (the lecture notes; `layers.Conv`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lrtransfer.nn import HIDDEN, INPUT, OUTPUT, Activation, Conv, Linear, Pool, Sequential
from lrtransfer.options.schema import IMAGE, ConfigError, odd_kernel
from lrtransfer.options.schema import Activation as ActivationName


@dataclass
class CNNOptions:
    """Conv stem, depth - 1 more conv layers of `width` channels, global average pooling, linear readout."""

    MIN_DEPTH: ClassVar[int] = 1  # conv layers, the stem included
    READS: ClassVar[tuple[str, ...]] = (IMAGE,)

    name: str = "cnn"
    ACTIVATION: ClassVar[str] = "relu"  # what activation=auto means (scaled under param=modular)
    activation: ActivationName = ActivationName.auto
    bias: bool = True
    kernel_size: int = 3
    pool: int = 2  # average-pool the stem's output by pool x pool (0: keep the full resolution)

    def check(self) -> None:
        odd_kernel(self.kernel_size)
        if self.pool < 0:
            raise ConfigError(f"model.pool must be >= 0 (0: no pooling), got {self.pool}")


OPTIONS = CNNOptions


def stem(options: CNNOptions, *, width: int, runs: int, input_shape: tuple[int, ...]) -> list:
    """Conv from the image's channels to `width`, the activation, and the optional pooling."""
    channels, k = input_shape[0], options.kernel_size
    layers = [Conv(channels, width, k, dims=2, role=INPUT, runs=runs, bias=options.bias),
              Activation(options.activation.value)]
    return layers + ([Pool(2, options.pool)] if options.pool > 0 else [])


def head(options: CNNOptions, *, width: int, runs: int, output_dim: int) -> list:
    """Global average pooling, then the linear readout."""
    return [Pool(2), Linear(width, output_dim, role=OUTPUT, runs=runs, bias=options.bias)]


def build(options: CNNOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Sequential:
    w, k, bias, act = width, options.kernel_size, options.bias, options.activation.value
    layers = stem(options, width=w, runs=runs, input_shape=input_shape)
    for _ in range(depth - 1):
        layers += [Conv(w, w, k, dims=2, role=HIDDEN, runs=runs, bias=bias), Activation(act)]
    return Sequential(layers + head(options, width=w, runs=runs, output_dim=output_dim))

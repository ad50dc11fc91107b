"""A 1-D conv net for signals (B, C, L): MNIST-1D's reference CNN in the notes' layers.

`depth` Conv1D layers of `width` channels (seed 002, eqs. 7.48-7.50: same-size zero
padding, odd kernel), each followed by the activation; the first `pool_layers` of
them halve the length by 2x average pooling; the features are then flattened
(width x the final length) into a linear readout. The benchmark's CNN
(`ConvBase` in the mnist1d repository's notebooks/models.py) has three conv layers
of 25 channels with stride 2, 40 -> 5 positions, and the same flattened readout;
here the downsampling is an average pool after a same-size convolution, so every
conv is the notes' Conv1D and the pool keeps the modular norm's sensitivity at 1
(subsampling would have sqrt 2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from lrtransfer.nn import HIDDEN, INPUT, OUTPUT, Activation, Conv, Flatten, Linear, Pool, Sequential
from lrtransfer.options.schema import SIGNAL, ConfigError, odd_kernel
from lrtransfer.options.schema import Activation as ActivationName


@dataclass
class CNN1DOptions:
    """Conv1D layers of `width` channels (the lecture notes, eq. 7.50), the first `pool_layers` each
    halving the length by average pooling, then the flattened features into a linear readout."""

    MIN_DEPTH: ClassVar[int] = 1  # conv layers
    READS: ClassVar[tuple[str, ...]] = (SIGNAL,)
    ACTIVATION: ClassVar[str] = "relu"  # what activation=auto means (scaled under param=modular)

    name: str = "cnn1d"
    activation: ActivationName = ActivationName.auto
    bias: bool = True
    kernel_size: int = 5
    pool_layers: int = 3  # how many conv layers (from the first) halve the length: 40 -> 5 for 3

    def check(self) -> None:
        odd_kernel(self.kernel_size)
        if self.pool_layers < 0:
            raise ConfigError(f"model.pool_layers must be >= 0 (0: no pooling), got {self.pool_layers}")

    def check_with(self, cfg) -> None:
        length = getattr(cfg.data, "final_seq_length", None)
        halvings = min(cfg.depth, self.pool_layers)
        if length is not None and length >> halvings < 1:
            raise ConfigError(
                f"model=cnn1d halves the signal's length {halvings} times (depth={cfg.depth}, "
                f"model.pool_layers={self.pool_layers}), but data.final_seq_length={length} leaves nothing; "
                f"use a smaller model.pool_layers or a longer signal"
            )


OPTIONS = CNN1DOptions


def build(options: CNN1DOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Sequential:
    (channels, length), m = input_shape, options
    layers = []
    for i in range(depth):
        c_in, role = (channels, INPUT) if i == 0 else (width, HIDDEN)
        layers += [Conv(c_in, width, m.kernel_size, dims=1, role=role, runs=runs, bias=m.bias),
                   Activation(m.activation.value)]
        if i < m.pool_layers:
            layers.append(Pool(1, 2))
            length //= 2
    if length < 1:
        raise ValueError(f"cnn1d: {min(depth, m.pool_layers)} halvings leave nothing of {input_shape[1]} positions")
    # (K, B, width, length) -> (K, B, width * length)
    layers += [Flatten(2), Linear(width * length, output_dim, role=OUTPUT, runs=runs, bias=m.bias)]
    return Sequential(layers)

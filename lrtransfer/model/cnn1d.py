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

from lrtransfer.model.layers import HIDDEN, INPUT, OUTPUT, Activation, Conv, Flatten, Linear, Pool, Sequential


def build(cfg, param, *, runs: int, input_shape: tuple[int, ...], output_dim: int) -> Sequential:
    (channels, length), m = input_shape, cfg.model
    layers = []
    for i in range(cfg.depth):
        c_in, role = (channels, INPUT) if i == 0 else (cfg.width, HIDDEN)
        layers += [Conv(c_in, cfg.width, m.kernel_size, dims=1, role=role, runs=runs, bias=m.bias),
                   Activation(m.activation.value)]
        if i < m.pool_layers:
            layers.append(Pool(1, 2))
            length //= 2
    if length < 1:
        raise ValueError(f"cnn1d: {min(cfg.depth, m.pool_layers)} halvings leave nothing of {input_shape[1]} positions")
    # (K, B, width, length) -> (K, B, width * length)
    layers += [Flatten(2), Linear(cfg.width * length, output_dim, role=OUTPUT, runs=runs, bias=m.bias)]
    return Sequential(layers)

"""A plain conv net for images: a conv stem from the image's channels to `width`, `depth` - 1
more conv layers of `width` channels (each followed by the activation), global average
pooling, and a linear readout. With `model.pool` = p > 0 the stem's output is
average-pooled p x p, which divides the cost of every later layer by p^2.

Convolutions are matrix multiplications with shared weights (seed 002; `layers.Conv`).
"""

from __future__ import annotations

from lrtransfer.config import model_activation
from lrtransfer.model.layers import HIDDEN, INPUT, OUTPUT, Activation, Conv, Linear, Pool, Sequential


def stem(cfg, *, runs: int, input_shape: tuple[int, ...]) -> list:
    """Conv from the image's channels to `width`, the activation, and the optional pooling."""
    channels, k = input_shape[0], cfg.model.kernel_size
    layers = [Conv(channels, cfg.width, k, dims=2, role=INPUT, runs=runs, bias=cfg.model.bias),
              Activation(model_activation(cfg))]
    return layers + ([Pool(2, cfg.model.pool)] if cfg.model.pool > 0 else [])


def head(cfg, *, runs: int, output_dim: int) -> list:
    """Global average pooling, then the linear readout."""
    return [Pool(2), Linear(cfg.width, output_dim, role=OUTPUT, runs=runs, bias=cfg.model.bias)]


def build(cfg, param, *, runs: int, input_shape: tuple[int, ...], output_dim: int) -> Sequential:
    w, k, bias, act = cfg.width, cfg.model.kernel_size, cfg.model.bias, model_activation(cfg)
    layers = stem(cfg, runs=runs, input_shape=input_shape)
    for _ in range(cfg.depth - 1):
        layers += [Conv(w, w, k, dims=2, role=HIDDEN, runs=runs, bias=bias), Activation(act)]
    return Sequential(layers + head(cfg, runs=runs, output_dim=output_dim))

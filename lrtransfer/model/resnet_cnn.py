"""A residual conv net: seed 002's Res block with convolutions for matrix multiplications,

    Res(z) = z + sigma(Conv_1(sigma(Conv_2(z)))),

`depth` blocks of `width` channels between the plain conv net's stem and head
(`model/cnn.py`). The residual rule is `model.residual`, or the parameterization's.
"""

from __future__ import annotations

from lrtransfer.model.cnn import head, stem
from lrtransfer.config import model_activation
from lrtransfer.model.layers import HIDDEN, Activation, Conv, Sequential


def build(cfg, param, *, runs: int, input_shape: tuple[int, ...], output_dim: int) -> Sequential:
    w, k, bias, act = cfg.width, cfg.model.kernel_size, cfg.model.bias, model_activation(cfg)

    def block() -> Sequential:
        return Sequential([Conv(w, w, k, dims=2, role=HIDDEN, runs=runs, bias=bias), Activation(act),
                           Conv(w, w, k, dims=2, role=HIDDEN, runs=runs, bias=bias), Activation(act)])

    trunk = param.residual_stack([block() for _ in range(cfg.depth)])
    return Sequential(stem(cfg, runs=runs, input_shape=input_shape) + [trunk] + head(cfg, runs=runs, output_dim=output_dim))

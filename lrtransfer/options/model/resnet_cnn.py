"""A residual conv net: the lecture notes' Res block with convolutions for matrix multiplications,

    Res(z) = z + sigma(Conv_1(sigma(Conv_2(z)))),

`depth` blocks of `width` channels between the plain conv net's stem and head
(`model/cnn.py`). The residual rule is `model.residual`, or the parameterization's.
"""

from __future__ import annotations

from dataclasses import dataclass

from lrtransfer.options.model.cnn import CNNOptions, head, stem
from lrtransfer.nn import HIDDEN, Activation, Conv, Sequential
from lrtransfer.options.schema import ResidualRule


@dataclass
class ResNetCNNOptions(CNNOptions):
    """Conv stem, `depth` residual blocks of two convs (the lecture notes' Res with convolutions), pooling, readout."""

    name: str = "resnet_cnn"  # depth counts residual blocks
    residual: ResidualRule = ResidualRule.auto


OPTIONS = ResNetCNNOptions


def build(options: ResNetCNNOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Sequential:
    w, k, bias, act = width, options.kernel_size, options.bias, options.activation.value

    def block() -> Sequential:
        return Sequential([Conv(w, w, k, dims=2, role=HIDDEN, runs=runs, bias=bias), Activation(act),
                           Conv(w, w, k, dims=2, role=HIDDEN, runs=runs, bias=bias), Activation(act)])

    trunk = param.residual_stack([block() for _ in range(depth)], rule=options.residual.value)
    return Sequential(stem(options, width=w, runs=runs, input_shape=input_shape) + [trunk]
                      + head(options, width=w, runs=runs, output_dim=output_dim))

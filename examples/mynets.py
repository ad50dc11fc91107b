"""A model file as a user writes it: plain PyTorch, nothing of lrtransfer.

    lrtransfer sweep model=custom model.target=examples/mynets.py:build width=64,256,1024 param=standard,mup
"""

import math

import torch
from torch import nn


def build(width, depth, input_shape, output_dim):
    """An MLP with `depth` Linear layers of `width` units (images and signals are flattened)."""
    layers = [nn.Flatten()] if len(input_shape) > 1 else []
    fan_in = math.prod(input_shape)
    for _ in range(depth - 1):
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    layers.append(nn.Linear(fan_in, output_dim))
    return nn.Sequential(*layers)


class LayerNormMLP(nn.Module):
    """A pre-norm MLP with a learned scale vector: LayerNorm gains and a tensor outside any layer."""

    def __init__(self, width, depth, input_shape, output_dim, dropout=0.0):
        super().__init__()
        self.embed = nn.Linear(math.prod(input_shape), width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.LayerNorm(width), nn.Linear(width, width), nn.ReLU(), nn.Dropout(dropout))
            for _ in range(max(depth - 2, 0))
        )
        self.scale = nn.Parameter(torch.ones(width))
        self.head = nn.Linear(width, output_dim)

    def forward(self, x):
        z = self.embed(x.flatten(1))
        for block in self.blocks:
            z = z + block(z)
        return self.head(z * self.scale)

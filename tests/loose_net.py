"""A user's model with trained tensors outside any layer, for the `mup` reference fixture
(scripts/make_reference_fixtures.py builds it with `mup`; tests/test_reference.py with lrtransfer).

`mup` counts how many dimensions of such a tensor grow with the width: a (width, width) matrix is
matrix-like (MuAdam's LR / width multiplier), a (width,) vector is vector-like (MuSGD's LR x width
multiplier), a tensor of fixed size is left alone. lrtransfer reads the same counts off the
shapes (its `hidden`, `vector` and `fixed` tensors).
"""

import torch
from torch import nn


class LooseNet(nn.Module):
    def __init__(self, width, input_shape, output_dim):
        super().__init__()
        self.embed = nn.Linear(input_shape[0], width)
        self.mix = nn.Parameter(torch.randn(width, width) / width**0.5)  # matrix-like
        self.scale = nn.Parameter(torch.ones(width))  # vector-like
        self.temperature = nn.Parameter(torch.ones(3))  # fixed: no dimension grows
        self.head = nn.Linear(width, output_dim)

    def forward(self, x):
        h = torch.relu(self.embed(x)) @ self.mix
        return self.head(h * self.scale) * self.temperature.mean()

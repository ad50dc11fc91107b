"""A model whose forward draws random numbers (tests/test_custom_hostile.py): dropout after a
BatchNorm, as researchers write them, so each run's masks and running statistics are its own.

    lrtransfer sweep model=custom model.target=tests/random_net.py:Dropout ...
"""

import torch
from torch import nn


class Dropout(nn.Module):
    def __init__(self, width, input_shape, output_dim, p=0.3):
        super().__init__()
        self.a = nn.Linear(input_shape[0], width, bias=False)  # a bias before a norm has no gradient
        self.norm = nn.BatchNorm1d(width)
        self.drop = nn.Dropout(p)
        self.b = nn.Linear(width, output_dim)

    def forward(self, x):
        return self.b(self.drop(torch.relu(self.norm(self.a(x)))))


class LateDropout(Dropout):
    """Dropout from its second forward on: whether a forward draws is seen at the first."""

    calls = 0

    def forward(self, x):
        self.calls += 1
        h = torch.relu(self.norm(self.a(x)))
        return self.b(self.drop(h) if self.calls > 1 else h)

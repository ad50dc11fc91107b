"""A model with a torch parametrization that cannot be built on the meta device (tests/test_custom_hostile.py):
torch's orthogonal parametrization reads a value of its weight as it is registered (`.item()`).

    lrtransfer sweep model=custom model.target=tests/parametrized_net.py:Orthogonal ...
"""

import torch
from torch import nn
from torch.nn.utils import parametrizations


class Orthogonal(nn.Module):
    def __init__(self, width, input_shape, output_dim):
        super().__init__()
        self.a = nn.Linear(input_shape[0], width)
        self.b = parametrizations.orthogonal(nn.Linear(width, width))
        self.c = nn.Linear(width, output_dim)

    def forward(self, x):
        return self.c(torch.relu(self.b(torch.relu(self.a(x)))))

"""A model file whose job ids are pinned in tests/test_store.py: computed by the lrtransfer of
before imports counted towards a job's identity, they must not change while this file does not.
Edit it and those ids change with it (as they should): then compute them afresh."""

from dataclasses import dataclass

from torch import nn


def build(width, depth, input_shape, output_dim):
    layers, fan_in = [], input_shape[0]
    for _ in range(depth - 1):
        layers += [nn.Linear(fan_in, width), nn.ReLU()]
        fan_in = width
    return nn.Sequential(*layers, nn.Linear(fan_in, output_dim))


@dataclass
class NetConfig:
    hidden: int = 8
    blocks: int = 2
    inputs: int = 32
    classes: int = 10


class Net(nn.Module):
    def __init__(self, config: NetConfig):
        super().__init__()
        self.net = build(config.hidden, config.blocks, (config.inputs,), config.classes)

    def forward(self, x):
        return self.net(x)

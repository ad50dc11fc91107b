"""A user's or a published model's own init, for any run seed (`model.init=own`).

A model as its authors wrote it starts where its own code puts it: nanoGPT's and GPT-2's
N(0, 0.02) weights and zero biases, their `c_proj` at 0.02 / sqrt(2 n_layer),
torchvision's Kaiming-normal convolutions. A run of seed s starts from the module built
(its constructor, `reset_parameters`, `_init_weights`, `post_init` all run) while torch's
global generator is seeded with s, in a forked generator state so that no other draw
moves: two seeds differ, a seed repeats, and `torch.manual_seed(s); Model(config)` gives
the same tensors outside lrtransfer. Runs that share a seed share one construction.

A parameterization with a base width (muP) asks how the own init scales with the width
(`base_ratios`): the module is built at the base width too, and each layer's weight's
RMS there over its RMS at the job's width is that layer's factor (its bias follows it,
as `mup`'s `set_base_shapes` rescales a bias with its layer).

The model is checked before any training (`check`): a seed must repeat (an init that
draws from another generator than torch's cannot be re-run per seed), and two seeds must
differ somewhere (an init that seeds itself, or loads its tensors, does not take the run's
seed); a tensor that is the same under every seed while others differ (a fixed sinusoid,
an identity) is the model's choice, said in a warning.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from lrtransfer.errors import ConfigError, warn
from lrtransfer.nn.roles import Layer

FIX = "or set model.init=torch (PyTorch's default init of each layer, drawn per seed by lrtransfer)"


def seeded(make: Callable[[], nn.Module], seed: int) -> nn.Module:
    """make() while torch's global generator is seeded with `seed`, leaving it as it was."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        return make()


def tensors_of(net: nn.Module) -> dict[str, Tensor]:
    """Every name a parameter goes by -> its value (a tied one under each of its names)."""
    return {n: p.detach() for n, p in net.named_parameters(remove_duplicate=False)}


class OwnInit:
    """The module's own initial tensors by the user's parameter names, for any seed.

    make(width) builds the module at a width; `first` is the one built at the job's width
    under seed 0 (the build that read the roles), whose tensors serve seed 0."""

    def __init__(self, make: Callable[[int], nn.Module], width: int, first: nn.Module, target: str) -> None:
        self.make, self.width, self.target = make, width, target
        self.first = tensors_of(first)

    def values(self, seed: int) -> dict[str, Tensor]:
        return self.first if seed == 0 else self._build(seed)

    def _build(self, seed: int, width: int | None = None) -> dict[str, Tensor]:
        return tensors_of(seeded(lambda: self.make(width or self.width), seed))

    def check(self) -> None:
        """One line, before any training, where the module's own init cannot start runs per seed."""
        again, other = self._build(0), self._build(1)
        for name, value in self.first.items():
            if not torch.equal(value, again[name]):
                raise ConfigError(f"model.target={self.target}: its own init is not the same twice under one seed "
                                  f"({name} differs): it draws from a generator other than torch's global one, "
                                  "which lrtransfer seeds per run, or leaves memory uninitialised (torch.empty, "
                                  f"to_empty); make it draw from torch's, {FIX}")
        varied = [n for n, v in self.first.items() if v.numel() > 1 and bool((v != v.flatten()[0]).any())]
        same = [n for n in varied if torch.equal(self.first[n], other[n])]
        if same and len(same) == len(varied):
            raise ConfigError(f"model.target={self.target}: its own init gives {same[0]} the same random values "
                              "under seeds 0 and 1 (it seeds itself, or loads its tensors): the runs of "
                              f"different seeds cannot start differently; draw them from torch's global generator, {FIX}")
        if same:  # a deterministic init of some tensors (sinusoids, an identity) is the model's to choose
            warn(f"model.target={self.target}: its own init gives {', '.join(same[:3])}{', ...' if len(same) > 3 else ''} "
                 "the same values under every seed (a fixed init, or one that seeds itself); every run starts them alike")

    def base_ratios(self, layers: list[Layer], base_width: int) -> dict[str, float]:
        """layer path -> RMS of its own weight at `base_width` / at the job's width (seed 0 at both; 1 where
        either is 0, or the width is the base width)."""
        if base_width == self.width:
            return {layer.path: 1.0 for layer in layers}
        base = self._build(0, base_width)
        out = {}
        for layer in layers:
            name = layer.names.get("weight")
            here = _rms(self.first[name]) if name else 0.0
            there = _rms(base[name]) if name in base else 0.0
            out[layer.path] = there / here if here and there else 1.0
        return out


def _rms(t: Tensor) -> float:
    return float(t.double().pow(2).mean().sqrt())

"""A user's layer as an atom, so that every parameterization treats it as the built-in atom of
its kind: its trained tensors with a leading run axis K, its fan-in, fan-out and role.

The module computes with what the atom hands over (`UserAtom.handed`): each tensor times its
forward multiplier (weight_mult * W, bias_mult * b: exact for Linear, convolution and Embedding
layers), so no user code changes. A table tied to the readout is handed over once per name, each
with its own use's multiplier (`ReadoutUse`), so the readout's 1/m does not reach the embedding.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from lrtransfer.nn.atoms import OUTPUT, Atom, scaled
from lrtransfer.nn.roles import Layer


class ReadoutUse(Atom):
    """The readout's use of an embedding's table (a tied head): no tensor of its own, so no init,
    no LR, no slot; it carries the forward multiplier a readout of this shape gets."""

    TENSORS = ()

    def __init__(self, fan_in: int, fan_out: int, *, runs: int, name: str) -> None:
        super().__init__(fan_in, fan_out, role=OUTPUT, runs=runs, tag="readout")
        self.name = name


class UserAtom(Atom):
    """One user layer's trained tensors, each (K, *its torch shape), with the layer's fan-in,
    fan-out and role, so every parameterization treats it as the built-in atom of its kind."""

    def __init__(self, layer: Layer, values: dict[str, Tensor], *, runs: int, tag: str | None = None) -> None:
        super().__init__(layer.fan_in, layer.fan_out, role=layer.role, runs=runs, tag=tag)
        self.kind, self.path, self.user_names, self.in_out = layer.kind, layer.path, dict(layer.names), layer.in_out
        if layer.tied:  # the table read as a Linear (dim -> num): the readout's fan-in is the width
            self.tied_use = ReadoutUse(layer.fan_out, layer.fan_in, runs=runs, name=layer.tied)
        self.TENSORS = tuple(layer.names)
        self.query_outputs = layer.query or None  # the attention query's share of the outputs (tag "query")
        self.branch_output, self.in_branch, self.within = layer.branch_output, layer.in_branch, layer.within
        # how the module's own init of this layer scales from this width to a parameterization's base width
        # (RMS there / here, `own_init.OwnInit.base_ratios`); 1 without one
        self.own_ratio = 1.0
        self._own = {}  # tensors no parameterization rules on: the module's own init (seed 0's build)
        self._drawn = {}  # the module's own init of every tensor for the seed being initialised (model.init=own)
        self.MATRICES = ("weight",) if layer.kind in ("linear", "conv") else ()
        for name, value in values.items():  # value: one run's tensor, in the user's layout
            setattr(self, name, nn.Parameter(torch.empty(runs, *value.shape, dtype=value.dtype)))
            if layer.kind in ("gain", "tensor"):  # no parameterization draws these: the module's own init
                self._own[name] = value.detach().clone()

    def from_matrix(self, w: Tensor) -> Tensor:
        # (fan_in, fan_out) -> torch's (out, in, *k); an Embedding's (num, dim) and a Conv1D's
        # (in, out) are already that view
        return w if self.kind == "embedding" or self.in_out else w.t().reshape(self.weight.shape[1:])

    def torch_init(self, gen: torch.Generator) -> Tensor:
        if self.kind == "embedding":  # nn.Embedding's init: N(0, 1)
            return torch.randn(self.fan_in, self.fan_out, generator=gen)
        return super().torch_init(gen)

    @property
    def torch_fan_in(self) -> int:
        return self.fan_out if self.kind == "embedding" else self.fan_in

    def own_init(self, name: str) -> Tensor | None:
        own = self._drawn.get(name, self._own.get(name)) if name in self._own else None
        return None if own is None else own.clone()

    def own_draw(self, name: str) -> Tensor | None:
        own = self._drawn.get(name) if name not in self._own else None
        return None if own is None else own.clone()

    def handed(self, name: str, t: Tensor, alias: str) -> Tensor:
        """The tensor the user's layer `alias` computes with: the stored one times that use's
        forward multiplier (a tied table's readout use has its own)."""
        if self.tied is not None and alias == self.tied.name:
            return scaled(t, self.tied.weight_mult)
        if self.kind in ("linear", "conv", "embedding"):
            mult = self.weight_mult if name == "weight" else self.bias_mult if name == "bias" else 1.0
            return scaled(t, mult)  # t: (K, ...); mult a float or (K,), one per run (grid.<key>)
        return t

    def extra_repr(self) -> str:
        return f"{self.path or '(root)'}: {self.kind} {self.fan_in} -> {self.fan_out}, role={self.role}, runs={self.runs}"

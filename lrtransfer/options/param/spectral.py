"""The spectral condition (Yang, Simon and Bernstein 2023, "A spectral condition for
feature learning"), applied tensor by tensor.

For every weight W of shape (fan_in, fan_out) the condition asks ||W||_2 =
Theta(sqrt(fan_out / fan_in)) at initialisation and ||Delta W||_2 = Theta(sqrt(fan_out
/ fan_in)) at every step (spectral norms). This parameterization makes both hold
with equality:

- init: each weight is drawn (`init: orthogonal`, a uniformly random semi-orthogonal
  matrix, all singular values equal; or `gaussian`, N(0, 1) entries) and scaled so
  that its spectral norm is exactly `sigma` x sqrt(fan_out / fan_in);
- update: the optimizer's direction for each weight (Adam's m/sqrt(v), SGD's
  momentum, Muon's orthogonalised momentum) is rescaled so that run k's slice has
  spectral norm lr_k x sqrt(fan_out / fan_in), measured by the modular norm's
  estimator (`linalg.Spectral`: a warm-started power iteration, or the SVD with
  `norm_estimate: exact`).

It needs nothing but each atom's fan_in and fan_out and `from_matrix` (the weight's
matrix view, `linalg.as_matrices`): no module tree, no masses, no forward
multipliers, so it applies to any model, a user's module included. A conv kernel
is its (c_in k^d -> c_out) matrix; a lookup table its (num -> dim) matrix, taken
literally (the condition is stated for inputs with Theta(1) entries, which a one-hot
input is not: the table starts with entries ~ sigma / sqrt(num)).

Vectors (biases, layer-norm gains) are matrices from a constant input 1 (fan_in 1):
their spectral norm is their l2 norm, and the condition asks l2 = lr x
sqrt(fan_out), that is an update of RMS exactly lr. Biases start at zero, gains at 1.

muP satisfies the same condition up to constants (Yang et al.), so the optimal LR
should transfer across width as muP's does; unlike muP it fixes the norms exactly,
like the modular norm, but per tensor and without splitting a total target.

The LR is a spectral norm per unit sqrt(fan_out / fan_in), the same for every
optimizer (the direction's own scale is normalised away), so the grid is this
parameterization's own (`LR_GRIDS`). Weight decay is decoupled, as under SP.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from lrtransfer.nn.linalg import RMS, Spectral, as_matrices, orthogonal
from lrtransfer.nn import Atom, Module, Slot
from lrtransfer.options.param.base import Parameterization
from lrtransfer.options.param.sde import SdeOptions
from lrtransfer.options.schema import UPDATE_KINDS, Grid, MatrixInit, NormEstimate, positive


@dataclass
class SpectralOptions(SdeOptions):
    # log2 of the LR: a spectral norm per unit sqrt(fan_out / fan_in), whatever the optimizer
    LR_GRIDS: ClassVar[dict[str, Grid]] = {kind: Grid(-10, 0) for kind in UPDATE_KINDS}

    name: str = "spectral"
    sigma: float = 1.0  # initial spectral norm / sqrt(fan_out / fan_in)
    init: MatrixInit = MatrixInit.orthogonal
    norm_estimate: NormEstimate = NormEstimate.power
    power_iters: int = 1  # power iterations per step (warm-started)

    def check(self) -> None:
        positive("param.sigma", self.sigma)
        positive("param.power_iters", self.power_iters)


OPTIONS = SpectralOptions


def spectral_scale(atom: Atom) -> float:
    """sqrt(fan_out / fan_in): the spectral norm the condition asks of a weight, per unit."""
    return math.sqrt(atom.fan_out / atom.fan_in)


class SpectralParam(Parameterization):
    name = "spectral"

    def __init__(self, options: SpectralOptions, *, width: int, update: str, depth: int | None = None, **job) -> None:
        super().__init__(options, width=width, update=update, depth=depth, **job)
        self.sigma, self.init_kind = options.sigma, options.init.value
        self.exact = options.norm_estimate.value == "exact"
        self.spectral = Spectral(options.power_iters)
        self._state: dict[tuple[Atom, str], dict] = {}
        self._atoms: list[Atom] = []

    # ---- initialisation
    def from_own(self, atom: Atom, name: str, own: Tensor) -> None:
        return None  # the spectral condition is its init: drawn here, whatever the model's own (model.init=own)

    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        fi, fo = atom.fan_in, atom.fan_out
        if self.init_kind == "orthogonal":
            w = orthogonal(fi, fo, gen).double()  # every singular value 1
        else:
            w = torch.randn(fi, fo, generator=gen, dtype=torch.float64)
            w = w / torch.linalg.matrix_norm(w, ord=2)
        return (w * (self.sigma * spectral_scale(atom))).float()  # (fan_in, fan_out)

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.zeros(atom.fan_out)

    # ---- the power iteration's warm start, across steps and checkpoints
    def set_multipliers(self, model: Module) -> None:
        super().set_multipliers(model)
        self._atoms = list(model.atoms())

    def state_dict(self) -> dict:
        """Each weight's saved power-iteration vectors, in forward order of the atoms."""
        return {"power": [self._state.get((a, "weight"), {}) for a in self._atoms]}

    def load_state_dict(self, state: dict) -> None:
        self._state = {(a, "weight"): dict(v) for a, v in zip(self._atoms, state["power"]) if v}

    # ---- updates
    def target_norm(self, slot: Slot) -> float:
        """A weight's update has spectral norm lr x sqrt(fan_out/fan_in); a vector's RMS lr."""
        return spectral_scale(slot.atom) if slot.name == "weight" else 1.0

    def updates(self, slots: Sequence[Slot], directions: Sequence[Tensor], lr: Tensor) -> list[Tensor]:
        """Each weight's direction rescaled to spectral norm lr x sqrt(fan_out/fan_in) per run,
        each vector's to RMS lr."""
        out = []
        for s, d, rate in zip(slots, directions, self.rates(slots, lr)):  # rate: lr x lr_mult (the SDE rule's, hp.<role>.lr_mult)
            if s.name == "weight":
                m = as_matrices(s.atom, d)  # (K, a, b): the matrix or its transpose
                state = self._state.setdefault((s.atom, s.name), {})
                out.append(self.spectral.normalize_(m, rate * spectral_scale(s.atom), state, self.exact).reshape(d.shape))
            else:
                out.append(RMS().normalize_(d, rate, {}, True))
        return out

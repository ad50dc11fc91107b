"""Muon (Jordan et al. 2024; "Muon is scalable", Liu et al. 2025), as a direction.

Every hidden matrix (`param.base.is_hidden_matrix`: a weight from the width to the
width, conv kernels flattened to their matrix) gets its momentum, Nesterov by
default, orthogonalised by Jordan's quintic Newton-Schulz iteration
(`linalg.newton_schulz`, `ns_steps` steps, the same code the modular norm's
`dualize` runs), times a scale of its shape (`scale`):

- `jordan`: max(1, fan_out / fan_in)^0.5, the original Muon;
- `moonlight`: 0.2 sqrt(max(fan_out, fan_in)), which gives the update AdamW's typical
  RMS (0.2), so AdamW's LR and weight decay carry over (Moonlight sets
  `adam_lr_ratio=1`);
- `spectral`: sqrt(fan_out / fan_in), the spectral condition (Yang, Simon and
  Bernstein 2023): the update's spectral norm is lr x sqrt(fan_out / fan_in).

Every other tensor (embeddings, the readout, biases, gains) gets AdamW's direction
m_hat / (sqrt(v_hat) + eps) times `adam_lr_ratio`, so with one LR grid the two
parts keep a fixed ratio (the Muon repository's own pairing, Muon 0.02 with AdamW
3e-4, is the default 0.015). The whole ensemble is one batched computation: the
Newton-Schulz matmuls act on (K, a, b) stacks, each run's matrix on its own.

Momentum is torch's heavy-ball form, buf <- momentum * buf + g, Nesterov g +
momentum * buf; Jordan's code keeps (1 - momentum) times these, which the
orthogonalisation's normalisation cancels. The iteration runs in the weights'
dtype (float32 or float64), not in bfloat16 as Jordan's GPU code.

The optimizer declares its updates `ORTHOGONALIZED`: each parameterization states
its rule for the orthogonalised hidden matrices and, through
`param.base.tensor_update`, treats the rest as Adam's (`ADAPTIVE`) tensors.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from lrtransfer.nn.linalg import as_matrices, newton_schulz
from lrtransfer.options.optim.adam import check_adam, settings
from lrtransfer.options.optim import passes
from lrtransfer.options.optim.kernels import CountsSteps, adam_directions_, plan
from lrtransfer.nn import is_hidden_matrix
from lrtransfer.options.schema import ORTHOGONALIZED, ConfigError, DecayScaling, Grid, added, in_unit, positive

if TYPE_CHECKING:
    from lrtransfer.nn import Slot


class MuonScale(str, Enum):
    """The factor on an orthogonalised (fan_in x fan_out) update: see the module's docstring."""

    jordan = "jordan"
    moonlight = "moonlight"
    spectral = "spectral"


SCALES = {
    "jordan": lambda fan_in, fan_out: max(1.0, fan_out / fan_in) ** 0.5,
    "moonlight": lambda fan_in, fan_out: 0.2 * math.sqrt(max(fan_out, fan_in)),
    "spectral": lambda fan_in, fan_out: math.sqrt(fan_out / fan_in),
}


@dataclass
class MuonOptions:
    UPDATE: ClassVar[str] = ORTHOGONALIZED
    # may vary across a job's runs (grid.optim.weight_decay=[...]; the betas and eps: the AdamW part's)
    PER_RUN: ClassVar[tuple[str, ...]] = ("weight_decay", "beta1", "beta2", "eps")
    # log2 learning rates every job trains, unless overridden: the orthogonalised update's
    # spectral norm is ~lr (jordan, on a square matrix); the low end leaves room for
    # scale=moonlight, whose LR is AdamW's.
    LR_GRID: ClassVar[Grid] = Grid(-10, 0)

    name: str = "muon"
    momentum: float = 0.95
    nesterov: bool = True
    ns_steps: int = 5  # quintic Newton-Schulz steps
    scale: MuonScale = MuonScale.jordan
    adam_lr_ratio: float = 0.015  # the AdamW part's LR / the Muon LR
    beta1: float = 0.9  # the AdamW part's
    beta2: float = 0.95
    eps: float = 1e-10
    weight_decay: float = 0.0
    decay_scaling: DecayScaling = DecayScaling.independent
    decay_1d: bool = added(True)  # false: biases and norm gains do not decay (nanoGPT's and GPT-2's recipes)

    def check(self) -> None:
        in_unit("optim.momentum", self.momentum)
        positive("optim.ns_steps", self.ns_steps)
        positive("optim.adam_lr_ratio", self.adam_lr_ratio)
        check_adam(self)

    def width_growth(self) -> str | None:
        """Why a hidden (n x n) update's spectral norm at a fixed LR grows with n, or None
        when it does not (jordan, spectral: the orthogonal factor's norm ~1, times 1); a
        parameterization whose rule assumes it does not (muP) refuses the growing ones."""
        if self.scale is MuonScale.moonlight:
            return ("optim.scale=moonlight, whose hidden updates' spectral norm grows as sqrt(width) "
                    "(use optim.scale=jordan or spectral)")
        return None


OPTIONS = MuonOptions


class Optimizer(CountsSteps):
    def __init__(self, options: MuonOptions, slots: Sequence[Slot]) -> None:
        self.momentum, self.nesterov, self.ns_steps = options.momentum, options.nesterov, options.ns_steps
        self.ratio = options.adam_lr_ratio
        self.hidden = [i for i, s in enumerate(slots) if is_hidden_matrix(s.atom, s.name)]
        if not self.hidden:
            raise ConfigError(
                "optim=muon orthogonalises hidden matrices (width -> width weights), but this model has none; "
                "give it a hidden layer (model=mlp: depth >= 3) or use optim=adam"
            )
        self.rest = [i for i in range(len(slots)) if i not in set(self.hidden)]
        # the AdamW part's beta1, beta2 and eps, per tensor (and per run where a grid gives them)
        self.beta1, self.beta2, self.eps = settings(options, [slots[i] for i in self.rest])
        rest = [slots[i].tensor for i in self.rest]
        self._calls = plan(self.beta1, self.beta2, self.eps, slots[0].tensor.shape[0], small=passes.split(rest)[0])
        scale = SCALES[options.scale.value]
        self.atoms = [slots[i].atom for i in self.hidden]
        self.scales = [scale(a.fan_in, a.fan_out) for a in self.atoms]
        tensors = [s.tensor for s in slots]
        self.buf = [torch.zeros_like(tensors[i]) for i in self.hidden]
        self.m = [torch.zeros_like(tensors[i]) for i in self.rest]
        self.v = [torch.zeros_like(tensors[i]) for i in self.rest]
        self.scratch = [torch.empty_like(t) for t in tensors]
        self.t = 0
        self._step = torch.zeros((), device=tensors[0].device)  # the AdamW part's kernels read t here

    @property
    def state(self) -> list[Tensor]:
        return self.buf + self.m + self.v

    @torch.no_grad()
    def directions(self, grads: Sequence[Tensor], advance: bool = True) -> list[Tensor]:
        """advance False: the step was counted already (`advance`, outside a CUDA graph's step)."""
        if advance:
            self.advance()
        for i, atom, scale, buf in zip(self.hidden, self.atoms, self.scales, self.buf):
            g, out = grads[i], self.scratch[i]
            buf.mul_(self.momentum).add_(g)
            d = g.add(buf, alpha=self.momentum) if self.nesterov else buf
            out.copy_(newton_schulz(as_matrices(atom, d), self.ns_steps).reshape(out.shape)).mul_(scale)
        if self.rest:
            outs = [self.scratch[i] for i in self.rest]
            adam_directions_(outs, [grads[i] for i in self.rest], self.m, self.v, self._step,
                             self.beta1, self.beta2, self.eps, calls=self._calls)
            torch._foreach_mul_(outs, self.ratio)
        return self.scratch

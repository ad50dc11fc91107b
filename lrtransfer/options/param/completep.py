"""CompleteP (Dey et al., NeurIPS 2025): muP's width rules and a depth rule, as nanoGPT-mup states them.

With m = width / base_width and L = depth / base_depth (depth: the model's `depth`, its blocks;
nanoGPT's n_layer), every rule of `mup` holds (it is a subclass: init, forward multipliers,
attention 1/d, Adam's LR and epsilon per role), and the tensors inside a residual branch (the
blocks: `Atom.in_branch`) get the depth corrections:

| tensor                                 | branch forward | Adam LR              | Adam epsilon     | weight decay (torch AdamW, `decay_scaling=lr`) |
|----------------------------------------|----------------|----------------------|------------------|------|
| each residual branch                   | x L^-alpha     |                      |                  |      |
| hidden weight (in a branch)            |                | x (1/m) L^(alpha-1)  | x (1/m) L^-alpha | x m  |
| hidden bias, hidden norm (in a branch) |                | x L^(alpha-1)        | x (1/m) L^-alpha | (1d: `optim.decay_1d`) |
| embeddings, readout, final norm        |                | x 1 (muP's)          | x 1/m            | x 1  |

alpha = 1 is CompleteP, 0.5 depth-muP (Yang et al. 2023); the rules stop being the paper's
outside [0, 1]. At depth == base_depth this is `mup`, number for number. The epsilon rule
is the corrected one (nanoGPT-mup's model.py after Mlodozeniec et al., arXiv 2512.22382).

Weight decay: nanoGPT-mup gives hidden weights `weight_decay / (1/m)` so that torch's
decoupled decay, lr x wd per step, stays fixed when the LR is divided by m: with
`optim.decay_scaling=lr` (decay = lr x lr_mult x wd x wd_mult) the x m here reproduces its
AdamW exactly. Under the default `independent` (decay = wd x wd_mult per step, which the LR
does not touch) the per-step decay is already fixed across width and depth, so the x m,
whose only job is to undo the LR's 1/m, is not applied (`decays`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import ClassVar

from lrtransfer.nn import HIDDEN, Atom, Slot
from lrtransfer.options.param.mup import MuP, MupOptions
from lrtransfer.options.schema import MAX_DEPTH, ConfigError, positive, within


@dataclass
class CompletePOptions(MupOptions):
    REVISION: ClassVar[int] = 1

    name: str = "completep"
    base_depth: int = 2  # the depth (blocks, n_layer) the rules equal muP's at
    alpha: float = 1.0  # residual branches x (depth / base_depth)^-alpha: 1 is CompleteP, 0.5 depth-muP

    def check(self) -> None:
        super().check()
        positive("param.base_depth", self.base_depth)
        within("param.base_depth", self.base_depth, MAX_DEPTH, "layers or blocks (depth's own bound)")
        if not 0 <= self.alpha <= 1:
            raise ConfigError(f"param.alpha={self.alpha!r} is outside [0, 1]: the branch multiplier L^-alpha "
                              "must neither grow with depth (alpha < 0) nor shrink faster than 1/L, where the "
                              "branches' sum stops contributing (alpha > 1); valid: 0 <= alpha <= 1 "
                              "(1: CompleteP, 0.5: depth-muP)")
        if self.depth_exponent:
            raise ConfigError(f"param.depth_exponent={self.depth_exponent:g} is mup's depth rule; "
                              "param=completep's is param.alpha (with param.base_depth): leave depth_exponent=0")


OPTIONS = CompletePOptions


class CompleteP(MuP):
    name = "completep"
    adaptive_only = True

    def __init__(self, options: CompletePOptions, *, width: int, update: str, depth: int | None = None, **job) -> None:
        super().__init__(options, width=width, update=update, depth=depth, **job)
        self.alpha, self.base_depth = options.alpha, options.base_depth
        self.L = (depth if depth is not None else options.base_depth) / options.base_depth

    def residual_scales(self, depth: int) -> tuple[float, float]:
        """The branch multiplier L^-alpha with L = depth / base_depth (the model's depth, not the
        number of branches it is asked for: two per transformer block)."""
        return 1.0, self.L**-self.alpha

    def scales_depth(self) -> bool:
        return True

    def residual_stack(self, blocks, *, rule: str = "auto", mass: float = 1.0):
        """Only its own rule: the LR and epsilon inside the branches are corrected for L^-alpha, and
        another branch multiplier would keep the corrections without the multiplier they are for."""
        if rule != "auto":
            raise ConfigError(f"model.residual={rule}: param=completep multiplies the residual branches by its own "
                              f"L^-alpha (param.alpha, param.base_depth) and corrects the LR and epsilon inside them "
                              f"for it; valid: model.residual=auto (or param=mup with model.residual={rule})")
        return super().residual_stack(blocks, rule=rule, mass=mass)

    def lr_multiplier(self, atom: Atom, name: str) -> float:
        mup = super().lr_multiplier(atom, name)
        return mup * self.L ** (self.alpha - 1) if atom.in_branch else mup

    def eps_multiplier(self, atom: Atom, name: str) -> float:
        mup = super().eps_multiplier(atom, name)
        return mup * self.L**-self.alpha if atom.in_branch else mup

    def wd_multiplier(self, atom: Atom, name: str) -> float:
        """x m on hidden weights: torch's lr x wd kept fixed as the LR goes / m (`decay_scaling=lr`)."""
        return self.m if atom.role == HIDDEN and name == "weight" else 1.0

    def decay_mults(self, slots: Sequence[Slot], optim) -> list[float]:
        mults = super().decay_mults(slots, optim)
        if optim.decay_scaling.value == "lr":
            return mults
        # independent: decay = wd per step, fixed across width already; x m would only undo an LR's 1/m
        return [1.0 if w else 0.0 for w in mults]

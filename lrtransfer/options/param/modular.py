"""The modular norm (Modula; Large, Bernstein et al. 2024, "Scalable optimization in
the modular norm", the Modula package).

The network is a tree of modules, each with a mass (its share of the update
budget) and a sensitivity (its Lipschitz constant in its input); atoms carry
weights and a norm on them (spectral for Linear), bonds carry none. The learning
rate is a *target norm* T for the whole network's update: the compound rules
(`Module.split` in `model/layers.py`: composition, tuple/residual, scalar
multiple) hand each atom its share of T, and each step every atom's slice of the
base optimizer's direction (SGD momentum, or Adam's m/sqrt(v)) is mapped to an
update of exactly that norm:

- `update: normalize` (PyTorch Modula): rescale the direction to the target norm.
  Training estimates the spectral norm with a warm-started power iteration
  (`norm_estimate: power`); `exact` uses the SVD.
- `update: dualize` (JAX Modula, the Muon family): replace the direction by its
  orthogonalisation (Newton-Schulz) times the target: all its singular values
  equal the target. With this module's forward multiplier sqrt(fan_out/fan_in),
  the *effective* update is sqrt(fan_out/fan_in) * target * orth(direction), which
  is JAX Modula's update for a weight that carries its own scale.

Then w <- w - update. Because modules are one-Lipschitz in the modular norm, an
update of norm T moves the output by at most T (in RMS), whatever the width or
depth: that is why the optimal T transfers. Weight decay is decoupled and split
by the same shares. Linear atoms are initialised orthogonal (all singular values
1; `init: gaussian` draws N(0, 1/(sqrt(fan_in) + sqrt(fan_out))^2), whose spectral
norm is ~1, to test the Modula FAQ's claim that Gaussian works if scaled right) and
compute sqrt(fan_out/fan_in) * x W, an RMS-to-RMS map of norm ||W||_2.

Nonlinearities count as Modula 0.0.0.0.0.2 counts them (`param.sensitivity: modula`):
ReLU and GELU 1/sqrt(2), the sqrt(2)-scaled forms (`model.activation=scaled_relu`,
`scaled_gelu`) 1, so a 3-Linear ReLU MLP hands its Linears 2/3, 0.471, 1/3 of the target
(input to output) and a scaled-ReLU one 1/3 each. `sensitivity: lipschitz` counts each
by its Lipschitz constant instead (ReLU 1, GELU 1.129), a bound for every input rather
than Modula's typical-input count: compare the two on one model to see what it moves.
Under this parameterization `model.activation=auto` is the scaled form of the model's
nonlinearity, as Modula's own models use (its GPT: ScaledGELU).

Biases (Modula's atoms have none; `model.bias` defaults to true): a Linear with a
bias is the sum of two parts, x -> sqrt(fan_out/fan_in) x W (sensitivity 1) and the
constant b (sensitivity 0, norm RMS(b) = ||b||_2 / sqrt(fan_out), the output norm).
By the tuple rule the atom's target is split between them in proportion to their
masses, 1 : `bias_mass`; the atom stays one-Lipschitz. Biases start at zero.

Embeddings (Modula's Embedding atom): forward sqrt(dim) * row, rows unit l2 at init,
norm the largest row's l2 (`RowL2`); each row of the update is rescaled to l2 = target
(`normalize`) or replaced by its direction times the target (`dualize`). Attention
(model=transformer) follows Modula's GPT: logits q.k / d_head (`attention_scale`) on
(q, k, v) / 3 (`attention_qkv_mult`), and the model's blocks are tared to the
trunk's own mass (the model passes it to `residual_stack`: 5 for the transformer,
as Modula's GPT; 1 otherwise) times `param.blocks_mass`.

The LR is a target norm, the same for every optimizer, so the grid is this
parameterization's own (`LR_GRIDS`). Under Muon the orthogonalised direction of a hidden
matrix is normalised (or dualised) to its target like any other: Muon's scale and
`adam_lr_ratio` cancel, Muon supplies only the direction.

A new kind of atom plugs in with one `AtomRule` in `RULES` (its norm, forward
multiplier and initialisation), keyed by the atom's `kind`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar

import torch
from torch import Tensor

from lrtransfer.nn import Activation, Atom, Module, Sequential, Slot, tare
from lrtransfer.nn.linalg import RMS, TINY, Norm, Spectral, orthogonal, orthogonalize, run_view  # noqa: F401  (orthogonalize: re-exported)
from lrtransfer.options.param.base import RESIDUAL_RULES, Parameterization
from lrtransfer.options.param.sde import SdeOptions
from lrtransfer.options.schema import UPDATE_KINDS, ConfigError, Grid, MatrixInit, NormEstimate, positive


class ModularUpdate(str, Enum):
    normalize = "normalize"  # rescale each atom's direction to its target norm (PyTorch Modula)
    dualize = "dualize"  # orthogonalise it (Newton-Schulz), times the target (JAX Modula)


class Sensitivity(str, Enum):
    """The sensitivity of a nonlinearity. `modula` (PyTorch Modula 0.0.0.0.0.2): ReLU and
    GELU 1/sqrt(2), their sqrt(2)-scaled forms 1. `lipschitz`: the Lipschitz constant
    max |f'| (ReLU 1, GELU 1.129, scaled forms sqrt(2) times that)."""

    modula = "modula"
    lipschitz = "lipschitz"


@dataclass
class ModularOptions(SdeOptions):
    LR_GRIDS: ClassVar[dict[str, Grid]] = {kind: Grid(-8, 2) for kind in UPDATE_KINDS}  # a target norm
    SCALED_ACTIVATION: ClassVar[bool] = True  # model.activation=auto: Modula's models' sqrt(2)-scaled forms
    # The compound rules walk the network's tree of atoms and bonds: a model that has none
    # (model=custom, whose options say MODULE_TREE = False) cannot be split.
    NEEDS_MODULE_TREE: ClassVar[bool] = True

    name: str = "modular"
    update: ModularUpdate = ModularUpdate.normalize
    init: MatrixInit = MatrixInit.orthogonal
    norm_estimate: NormEstimate = NormEstimate.power
    power_iters: int = 1  # power iterations per step (warm-started)
    ns_steps: int = 8  # Newton-Schulz quintic steps of `dualize` (then 4 polishing steps)
    bias_mass: float = 0.1  # a Linear's bias : weight mass ratio (its share of the atom's target)
    # a residual trunk's total mass, as a multiple of the trunk's own (the model's:
    # the transformer's 5, as Modula's GPT; 1 for the others)
    blocks_mass: float = 1.0
    sensitivity: Sensitivity = Sensitivity.modula  # of the nonlinearities: modula | lipschitz

    def check(self) -> None:
        for key in ("power_iters", "ns_steps", "blocks_mass"):
            positive(f"param.{key}", getattr(self, key))
        if not self.bias_mass >= 0:
            raise ConfigError(f"param.bias_mass must be >= 0, got {self.bias_mass!r}")


OPTIONS = ModularOptions

class MaxAbs(Norm):
    """max_i |g_i|: the operator norm (RMS to RMS) of z -> g * z, for a layer norm's gain.
    Its steepest direction is the sign."""

    def value(self, d: Tensor) -> Tensor:
        return d.flatten(1).abs().amax(1)

    def dual(self, d: Tensor, steps: int) -> Tensor:
        return torch.sign(d)


class PerTap(Norm):
    """A convolution's weight (K, c_out, c_in, *taps): the spectral norm of each tap's
    (c_out, c_in) matrix, each normalised separately (Modula's Conv2D). The value is
    the largest tap's norm."""

    def __init__(self, spectral: Spectral) -> None:
        self.spectral = spectral

    @staticmethod
    def taps(d: Tensor) -> Tensor:
        """(K, c_out, c_in, *taps) -> a view (K, *taps, c_out, c_in)."""
        return d.movedim((1, 2), (-2, -1))

    def value(self, d: Tensor) -> Tensor:
        return self.spectral.value(self.taps(d)).flatten(1).amax(1)

    def dual(self, d: Tensor, steps: int) -> Tensor:
        return self.spectral.dual(self.taps(d), steps).movedim((-2, -1), (1, 2))

    def normalize_(self, d: Tensor, target: Tensor, state: dict, exact: bool) -> Tensor:
        t = self.taps(d)
        n = self.spectral.value(t) if exact else self.spectral.estimate(t, state)  # (K, *taps)
        scale = target.view(-1, *[1] * (n.dim() - 1)) / n.clamp_min(TINY)
        return d.mul_(scale.view(scale.shape[0], 1, 1, *scale.shape[1:]))


class RowL2(Norm):
    """A lookup table (K, num, dim): the largest l2 norm of a row, the operator norm from
    one-hot inputs to RMS outputs once the forward multiplies by sqrt(dim) (Modula's
    Embedding). Updates act row by row: each row is rescaled to l2 = target (`normalize`),
    or replaced by its direction (`dual`); a row with a zero direction (a token no batch
    has shown yet, under momentum-free SGD) stays zero."""

    @staticmethod
    def rows(d: Tensor) -> Tensor:
        """(K, num): each row's l2 norm."""
        return torch.linalg.vector_norm(d, dim=-1)

    def value(self, d: Tensor) -> Tensor:
        return self.rows(d).amax(-1)

    def dual(self, d: Tensor, steps: int) -> Tensor:
        return d / self.rows(d).clamp_min(TINY).unsqueeze(-1)

    def normalize_(self, d: Tensor, target: Tensor, state: dict, exact: bool) -> Tensor:
        scale = target.view(-1, 1) / self.rows(d).clamp_min(TINY)  # (K, num)
        return d.mul_(scale.unsqueeze(-1))


# ---------------------------------------------------------------- atoms
@dataclass(frozen=True)
class AtomRule:
    """How the modular norm treats one kind of atom's weight."""

    norm: Callable[[Modular], Norm]  # the weight's (or gain's) norm, given the parameterization's settings
    multiplier: Callable[[Atom], float]  # the forward multiplier that makes the atom RMS-to-RMS
    # one run's weight, (fan_in, fan_out), for init = orthogonal | gaussian; None: the atom's own init
    init: Callable[[Atom, torch.Generator, str], Tensor] | None


def _linear_init(atom: Atom, gen: torch.Generator, kind: str) -> Tensor:
    if kind == "orthogonal":
        return orthogonal(atom.fan_in, atom.fan_out, gen)
    std = 1.0 / (math.sqrt(atom.fan_in) + math.sqrt(atom.fan_out))
    return torch.randn(atom.fan_in, atom.fan_out, generator=gen) * std


def _conv_init(atom: Atom, gen: torch.Generator, kind: str) -> Tensor:
    """Each tap an orthogonal (or spectral-norm-1 Gaussian) (c_out, c_in) matrix, as a matrix view."""
    taps = atom.kernel**atom.dims
    if kind == "orthogonal":
        mats = [orthogonal(atom.c_out, atom.c_in, gen) for _ in range(taps)]
    else:
        std = 1.0 / (math.sqrt(atom.c_in) + math.sqrt(atom.c_out))
        mats = [torch.randn(atom.c_out, atom.c_in, generator=gen) * std for _ in range(taps)]
    w = torch.stack(mats, -1).reshape(atom.weight.shape[1:])  # (c_out, c_in, k[, k])
    return w.reshape(atom.c_out, -1).t()


def _embedding_init(atom: Atom, gen: torch.Generator, kind: str) -> Tensor:
    """Modula's Embedding: N(0, 1) rows scaled to unit l2 (for either init kind: a row is
    a vector, its only norm is l2)."""
    w = torch.randn(atom.fan_in, atom.fan_out, generator=gen)
    return w / torch.linalg.vector_norm(w, dim=-1, keepdim=True)


RULES: dict[str, AtomRule] = {
    "linear": AtomRule(
        norm=lambda p: Spectral(p.power_iters),
        multiplier=lambda atom: math.sqrt(atom.fan_out / atom.fan_in),
        init=_linear_init,
    ),
    # Modula's Conv2D: sqrt(c_out/c_in) / k^dims * conv(x, W), taps normalised one by one;
    # the output is the average of k^dims tap products, each RMS-to-RMS of norm <= 1.
    "conv": AtomRule(
        norm=lambda p: PerTap(Spectral(p.power_iters)),
        multiplier=lambda atom: math.sqrt(atom.c_out / atom.c_in) / atom.kernel**atom.dims,
        init=_conv_init,
    ),
    "gain": AtomRule(norm=lambda p: MaxAbs(), multiplier=lambda atom: 1.0, init=None),
    # Modula's Embedding: sqrt(dim) * row, rows unit l2 at init; each row's update has l2 = target.
    "embedding": AtomRule(norm=lambda p: RowL2(), multiplier=lambda atom: math.sqrt(atom.fan_out),
                          init=_embedding_init),
}


def targets(module: Module, target: float = 1.0) -> dict[Atom, float]:
    """Each atom's target norm when `module` as a whole gets `target` (the compound rules)."""
    if isinstance(module, Atom):
        return {module: target}
    out: dict[Atom, float] = {}
    for child, t in module.split(target):
        out.update(targets(child, t))
    return out


# ---------------------------------------------------------------- the parameterization
class Modular(Parameterization):
    name = "modular"

    def __init__(self, options: ModularOptions, *, width: int, update: str, depth: int | None = None, **job) -> None:
        super().__init__(options, width=width, update=update, depth=depth, **job)
        p = options
        self.dualize = p.update.value == "dualize"
        self.exact = p.norm_estimate.value == "exact"
        self.init_kind = p.init.value
        self.power_iters, self.ns_steps = p.power_iters, p.ns_steps
        self.bias_mass, self.blocks_mass = p.bias_mass, p.blocks_mass
        self.sensitivity = p.sensitivity.value
        self.shares: dict[Atom, float] = {}
        self._norms: dict[Atom, Norm] = {}
        self._state: dict[tuple[Atom, str], dict] = {}

    def rule(self, atom: Atom) -> AtomRule:
        try:
            return RULES[atom.kind]
        except KeyError:
            raise ConfigError(
                f"param=modular has no rule for atoms of kind '{atom.kind}'; known: {', '.join(sorted(RULES))}"
            ) from None

    # ---- the network's structure
    def residual_scales(self, depth: int) -> tuple[float, float]:
        """Modula's (1 - 1/L) * z + (1/L) * block(z): sensitivity 1 at any depth L."""
        return RESIDUAL_RULES["convex"](depth)

    def residual_stack(self, blocks: Sequence[Module], *, rule: str = "auto", mass: float = 1.0) -> Sequential:
        """The residual trunk, tared to total mass `mass * blocks_mass`: each block's 1/L mass
        share cancels its 1/L branch multiplier, so a residual atom's update norm does not depend on L."""
        stack = super().residual_stack(blocks, rule=rule, mass=mass)
        tare(stack, mass * self.blocks_mass)
        return stack

    def attention_scale(self, d_head: int) -> float:
        """Modula's FunctionalAttention: logits q.k / d_head."""
        return 1.0 / d_head

    def attention_qkv_mult(self) -> float:
        """Modula's GPT computes attention on (q, k, v) / 3: the tuple of three sensitivity-1
        projections has sensitivity 3, so the factor 1/3 makes attention one-Lipschitz (and,
        by the scalar rule, hands Q, K and V three times the output projection's target)."""
        return 1.0 / 3.0

    def multipliers(self, atom: Atom) -> tuple[float, float]:
        return self.rule(atom).multiplier(atom), 1.0

    def set_multipliers(self, model: Module) -> None:
        super().set_multipliers(model)
        for m in model.modules():
            if isinstance(m, Activation):
                m.convention = self.sensitivity
        self.shares = targets(model, 1.0)
        self._norms = {atom: self.rule(atom).norm(self) for atom in model.atoms()}

    def target_norm(self, slot: Slot) -> float:
        return self.share(slot)

    def share(self, slot: Slot) -> float:
        """The slot's target norm when the whole network's is 1: an atom with a bias splits
        its target between weight (or gain) and bias as 1 : bias_mass (the tuple rule)."""
        t = self.shares[slot.atom]
        if getattr(slot.atom, "bias", None) is None:
            return t
        w = 1.0 / (1.0 + self.bias_mass)
        return t * (1.0 - w if slot.name == "bias" else w)

    # ---- initialisation
    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return self.rule(atom).init(atom, gen, self.init_kind)

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.zeros(atom.fan_out)

    # ---- the power iteration's warm start, across steps and checkpoints
    def state_dict(self) -> dict:
        """Each tensor's saved power-iteration vectors, in forward order of the atoms."""
        keys = [(a, n) for a in self.shares for n in a.TENSORS]
        return {"power": [self._state.get(k, {}) for k in keys]}

    def load_state_dict(self, state: dict) -> None:
        keys = [(a, n) for a in self.shares for n in a.TENSORS]
        self._state = {k: dict(v) for k, v in zip(keys, state["power"]) if v}

    # ---- updates
    def norm_of(self, slot: Slot) -> Norm:
        return RMS() if slot.name == "bias" else self._norms[slot.atom]

    def updates(self, slots: Sequence[Slot], directions: Sequence[Tensor], lr: Tensor) -> list[Tensor]:
        """Each slot's direction mapped to an update of norm share * lr (per run)."""
        out = []
        for s, d, rate in zip(slots, directions, self.rates(slots, lr)):  # rate: lr x lr_mult (the SDE rule's, hp.<role>.lr_mult)
            norm, target = self.norm_of(s), rate * self.share(s)  # (K,)
            if self.dualize:
                out.append(norm.dual(d, self.ns_steps) * run_view(target, d))
            else:
                out.append(norm.normalize_(d, target, self._state.setdefault((s.atom, s.name), {}), self.exact))
        return out

    def decays(self, slots: Sequence[Slot], lr: Tensor, factor: float, optim) -> list[Tensor] | None:
        """Decoupled weight decay split like the updates: each tensor's decay times its share."""
        base = super().decays(slots, lr, factor, optim)
        if base is None:
            return None
        return [b * self.share(s) for b, s in zip(base, slots)]

    def modular_norm(self, slots: Sequence[Slot], deltas: Sequence[Tensor]) -> Tensor:
        """(K,): the modular norm of a weight change, max over tensors of ||delta|| / share.

        The norm in which the network is one-Lipschitz: ||f(w + delta) - f(w)||_RMS <=
        ||delta||_M (to first order, for inputs of RMS <= 1). Exact norms.
        """
        ratios = [self.norm_of(s).value(d) / self.share(s) for s, d in zip(slots, deltas) if self.share(s) > 0]
        return torch.stack(ratios).amax(0)

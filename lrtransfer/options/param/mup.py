"""Maximal update parameterization (muP; Tensor Programs V), as the `mup` package and nanoGPT-mup state it.

Every rule is relative to `base_width`: with m = width / base_width, each weight
dimension that grows with the width ("infinite") gets the factors below, so at
`width == base_width` (and without the zero readout and queries) muP *is* SP, number
for number. Roles (see `model/layers.py`); "SP" is PyTorch's init, drawn here (the
built-in models, model.init=torch), whose std 1/sqrt(fan_in) makes the table's factors
the init at the base width times the width rule (`variance_rule`). A published model
(model=custom, model.init=own) starts each tensor at its own init at the base width
(measured, `from_own`) times the same rule: hidden / sqrt(m), input and output x 1.
Adam's epsilon is divided by m on every tensor (`eps_by_width`, nanoGPT-mup's rule).

| role   | init                              | forward mult      | adaptive LR (Adam) | gradient LR (SGD) |
|--------|-----------------------------------|-------------------|---------|--------|
| input  | SP                                | 1                 | 1       | m      |
| hidden | SP (variance 1/fan_in)            | 1                 | 1/m     | 1      |
| output | SP x sqrt(m), or zeros            | output_mult / m   | 1       | m      |
| bias of input        | SP                     | 1              | 1       | m      |
| bias of hidden       | SP x sqrt(m)           | 1              | 1       | m      |
| bias of output       | SP x sqrt(m), or zeros | 1              | 1       | 1      |
| layer-norm gain      | 1                      | 1              | 1       | m      |
| fixed (no dimension grows): weight, bias, gain | SP | 1             | 1       | 1      |
| tensor outside a layer, hidden (2+ dims grow) | its own | 1         | 1/m     | 1      |
| tensor outside a layer, vector (1 dim grows)  | its own | 1         | 1       | m      |
| tensor outside a layer, fixed                 | its own | 1         | 1       | 1      |

(The `fixed` and `vector` roles and the tensors outside a layer, kind "tensor", occur
only in models whose roles are read off shapes, `model=custom`: there, as in `mup`,
a tensor with no infinite dimension is left alone and one outside a layer keeps the
init its module gave it.)

(The `mup` package's `set_base_shapes` multiplies the bias of every nn.Linear and conv
by sqrt(fan-in width multiplier): 1 for an input layer, m for hidden ones (so a hidden
bias keeps SP's base-width scale, 1/sqrt(base fan_in)) and the readout. The
transformer's Q, K, V, O and MLP Linears are hidden. Its MuReadout divides its *input*
by m, so the readout bias is not divided, and rescales weight and bias by sqrt(m) at
set-up; vectors with one
infinite dimension get SGD LR x m, matrices with two get x fan_out_mult/fan_in_mult,
tensors with none are left alone.)

Embedding tables (token and position, `layers.Embedding`) are input weights, as the
`mup` package treats nn.Embedding: SP's N(0, 1) init, no multiplier, Adam LR x1, SGD
LR x m (the `(input, weight)` entries of LR_POWERS).

An embedding tied to the readout (model=custom, GPT-2's `wte`/`lm_head`) is one tensor,
as in `mup`'s `MuSharedReadout`: the embedding's rules (init, LR), with the readout's
forward multiplier on its readout use only; never zeroed. Its init is the embedding's
(`tied_init=embedding`, nanoGPT-mup's) or that times sqrt(m) (`tied_init=readout`, the
factor `set_base_shapes` applies to a MuReadout's weight, shared or not).

The readout is zero-initialised by default (`readout_zero_init`). Attention,
for the transformer: logits scaled by 1/d_head instead of 1/sqrt(d_head)
(`attention_scale`, equal to SP's at the base width; `attn_mult / d_head` where set) and
zero-initialised queries (atoms tagged "query", `zero_query`; of a fused projection, its
`query_outputs`). nanoGPT-mup's constants, where they differ from the rules by a constant:
`hidden_std` (its init_std for every hidden weight) and `attn_mult=1`. Weight decay stays decoupled from the LR
unless `optim.decay_scaling=lr` asks otherwise; then it follows each tensor's LR.
Under Muon (`ORTHOGONALIZED`), hidden matrices get LR x 1: the orthogonalised update's
spectral norm is ~1 at every width (`optim.scale=jordan` or `spectral`), what muP asks
of a hidden matrix (Yang, Simon and Bernstein's spectral condition); every other tensor
is Adam-updated and follows the `ADAPTIVE` rules. `optim.scale=moonlight` makes the
hidden update's spectral norm grow as sqrt(width): no rule of muP's applies, and it is
refused (`check_with`).
Depth (which `mup` lacks): residual branches are multiplied by L^-depth_exponent, L the number
of branches (0.5: depth-muP's 1/sqrt(L)); the default 0 leaves depth as SP has it. A published
model's branches are multiplied at their output projections (`set_multipliers`). `completep`
adds a base depth and the LR and epsilon corrections that go with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from enum import Enum
from typing import ClassVar, Optional

import torch
from torch import Tensor

from lrtransfer.nn import FIXED, HIDDEN, INPUT, OUTPUT, VECTOR, Atom
from lrtransfer.options.param.base import Parameterization, tensor_update
from lrtransfer.options.param.sde import SdeOptions
from lrtransfer.options.schema import ADAPTIVE, GRADIENT, ORTHOGONALIZED, ConfigError, positive, within


class TiedInit(str, Enum):
    """How a token table that is also the readout (a tied head) starts: as the embedding it is
    (`embedding`: nanoGPT-mup keeps it at its init_std), or rescaled as a readout (`readout`:
    x sqrt(m), as `mup`'s MuSharedReadout after set_base_shapes)."""

    embedding = "embedding"
    readout = "readout"


@dataclass
class MupOptions(SdeOptions):
    # Bumped when the rules change while the options do not, so that a job's identity
    # (`config.semantic`) changes and records made under the old rules are not reused.
    # 1: hidden biases start at SP's draw x sqrt(fan-in width multiplier), as mup's set_base_shapes.
    # 2: Adam's epsilon / m (eps_by_width), a tied table keeps its embedding init (tied_init), muP's
    #    zero query reaches the known fused projections of model=custom (GPT-2's and nanoGPT's c_attn).
    REVISION: ClassVar[int] = 2
    # May vary across a job's runs (grid.param.output_mult): a (K,) readout multiplier, a (K,) attention factor
    # (model=transformer; a published model's attention takes one per job).
    PER_RUN: ClassVar[tuple[str, ...]] = ("output_mult", "attn_mult")
    # Keys that act only on attention logits: set on a model without attention, refused (`validate`).
    ATTENTION_KEYS: ClassVar[tuple[str, ...]] = ("attn_mult",)

    name: str = "mup"
    base_width: int = 128  # muP equals SP at this width (with readout_zero_init=false)
    readout_zero_init: bool = True
    output_mult: float = 1.0
    zero_query: bool = True  # attention queries start at zero (for transformers)
    depth_exponent: float = 0.0  # residual branches x L^-depth_exponent (0.5: depth-muP); 0: width only
    eps_by_width: bool = True  # Adam's epsilon / m for every tensor (nanoGPT-mup; Everett et al. 2024)
    tied_init: TiedInit = TiedInit.embedding  # a tied table: its embedding init (nanoGPT-mup), or x sqrt(m) (mup)
    # > 0: every hidden weight N(0, hidden_std^2 / m), nanoGPT-mup's init_std (which drops nanoGPT's
    # 1/sqrt(2 n_layer) on c_proj); 0: the model's own init (PyTorch's, model.init=torch) by muP's rule
    hidden_std: float = 0.0
    # attention logits x attn_mult / d_head (mup's attn_mult; 1 is nanoGPT-mup's 1/d); None:
    # sqrt(d_head at the base width), so that muP's scale is SP's 1/sqrt(d_head) at the base width
    attn_mult: Optional[float] = None

    def check(self) -> None:
        positive("param.base_width", self.base_width)
        positive("param.output_mult", self.output_mult)
        if not self.depth_exponent >= 0:
            raise ConfigError(f"param.depth_exponent must be >= 0, got {self.depth_exponent!r}")
        if not self.hidden_std >= 0:
            raise ConfigError(f"param.hidden_std must be >= 0 (0: the model's own init), got {self.hidden_std!r}")
        within("param.hidden_std", self.hidden_std, MAX_HIDDEN_STD, "(the std of a hidden weight's entries at the base "
               "width: nanoGPT-mup's is 0.02; at 1 a layer already multiplies its input's scale by sqrt(width))")
        if self.attn_mult is not None:
            positive("param.attn_mult", self.attn_mult)

    def check_with(self, cfg) -> None:
        """muP's rule for orthogonalised hidden updates (LR x 1) holds only when their
        spectral norm does not grow with the width (`width_growth` of the optimizer's options)."""
        growth = getattr(cfg.optim, "width_growth", lambda: None)()
        if growth is not None:
            raise ConfigError(f"param=mup has no sound rule for {growth}")


OPTIONS = MupOptions

# param.hidden_std's bound: entries of std 1 make a hidden layer multiply the scale of its input by
# sqrt(fan_in) (11x at width 128), an init that explodes with depth; beyond it (1e300 overflows float32 at
# the first draw) no value is an init anyone means.
MAX_HIDDEN_STD = 1.0

# Per-tensor LR multiplier as a power of m, per kind of update the optimizer makes, role and tensor.
# "tensor": a trained tensor outside any layer (model=custom), by mup's count of its
# growing dimensions: matrix-like (hidden) LR / m under Adam, vector-like x m under SGD.
LR_POWERS = {
    ADAPTIVE: {(INPUT, "weight"): 0, (HIDDEN, "weight"): -1, (OUTPUT, "weight"): 0,
             (INPUT, "bias"): 0, (HIDDEN, "bias"): 0, (OUTPUT, "bias"): 0, (HIDDEN, "gain"): 0,
             (FIXED, "weight"): 0, (FIXED, "bias"): 0, (FIXED, "gain"): 0,
             (HIDDEN, "tensor"): -1, (VECTOR, "tensor"): 0, (FIXED, "tensor"): 0},
    GRADIENT: {(INPUT, "weight"): 1, (HIDDEN, "weight"): 0, (OUTPUT, "weight"): 1,
            (INPUT, "bias"): 1, (HIDDEN, "bias"): 1, (OUTPUT, "bias"): 0, (HIDDEN, "gain"): 1,
            (FIXED, "weight"): 0, (FIXED, "bias"): 0, (FIXED, "gain"): 0,
            (HIDDEN, "tensor"): 0, (VECTOR, "tensor"): 1, (FIXED, "tensor"): 0},
    # Muon's orthogonalised hidden matrices (every other tensor is ADAPTIVE: `tensor_update`)
    ORTHOGONALIZED: {(HIDDEN, "weight"): 0},
}


class MuP(Parameterization):
    name = "mup"
    attention_rule = "muP's 1/d attention scale"

    def __init__(self, options: MupOptions, *, width: int, update: str, depth: int | None = None, **job) -> None:
        super().__init__(options, width=width, update=update, depth=depth, **job)
        p = options
        if update not in LR_POWERS:
            raise ConfigError(
                f"param=mup has no rule for an optimizer whose updates are {update}; "
                f"valid kinds: {', '.join(sorted(LR_POWERS))}"
            )
        self.base_width = p.base_width
        self.m = self.width / p.base_width
        self.readout_zero_init = p.readout_zero_init
        self.output_mult = p.output_mult
        self.zero_query = p.zero_query
        self.depth_exponent = p.depth_exponent
        self.eps_by_width, self.tied_init, self.hidden_std, self.attn_mult = (
            p.eps_by_width, TiedInit(p.tied_init), p.hidden_std, p.attn_mult)

    def residual_scales(self, depth: int) -> tuple[float, float]:
        return 1.0, float(depth) ** -self.depth_exponent

    def scales_depth(self) -> bool:
        return self.depth_exponent != 0

    def multipliers(self, atom: Atom) -> tuple[float, float]:
        if atom.role == OUTPUT:
            return self.output_mult / self.m, 1.0
        return 1.0, 1.0

    # ---- init: a tensor's init at the base width, times muP's width rule for its role
    def variance_rule(self, atom: Atom) -> float:
        """A weight's init variance at this width over its variance at the base width: 1/m for a
        hidden weight (variance 1/fan_in), 1 for input, output and fixed ones; a table tied to the
        readout keeps its embedding's 1 (tied_init=embedding) or takes a readout's m (tied_init=readout)."""
        if atom.tied is not None:
            return self.m if self.tied_init == TiedInit.readout else 1.0
        return 1.0 / self.m if atom.role == HIDDEN else 1.0

    def zeroed(self, atom: Atom) -> bool:
        """A readout (never a tied table: its embedding reads it) under readout_zero_init."""
        return atom.role == OUTPUT and self.readout_zero_init

    def without_query(self, atom: Atom, w: Tensor, matrix: bool) -> Tensor:
        """w with its attention query's outputs at zero (zero_query): all of a query's, the first
        `query_outputs` of a fused projection's (model=custom: GPT-2's c_attn). w: the (fan_in,
        fan_out) view (`matrix`), or the storage shape."""
        if atom.tag != "query" or not self.zero_query:
            return w
        keep = torch.ones(atom.fan_in, atom.fan_out, dtype=w.dtype)
        keep[:, : atom.query_outputs or atom.fan_out] = 0
        return w * (keep if matrix else atom.from_matrix(keep).reshape(w.shape))

    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        """From PyTorch's draw at this width (the built-in models, model.init=torch), whose std
        1/sqrt(fan_in) is its base width's / sqrt(fan-in multiplier); or, for a hidden weight
        under hidden_std, N(0, hidden_std^2) at the base width."""
        if atom.role == HIDDEN and self.hidden_std:
            w = torch.randn(atom.fan_in, atom.fan_out, generator=gen) * (self.hidden_std * self.variance_rule(atom) ** 0.5)
        else:
            # SP's draws are made even for a zeroed tensor, so every other tensor of a seed starts exactly as under SP.
            # (a hidden weight's: SP's variance 1/fan_in is muP's rule already)
            w = super().init_weight(atom, gen)
            factor = 1.0 if atom.role == HIDDEN else math.sqrt(self.fan_in_mult(atom) * self.variance_rule(atom))
            w = w if factor == 1.0 else w * factor
        if self.zeroed(atom):
            return torch.zeros_like(w)
        return self.without_query(atom, w, matrix=True)

    def from_own(self, atom: Atom, name: str, own: Tensor) -> Tensor | None:
        """From the model's own init (model.init=own): its own draw at this width times
        `atom.own_ratio` is its init at the base width (measured: `own_init.OwnInit.base_ratios`).
        A fixed tensor (no dimension grows) keeps its own init at every width."""
        if atom.role == FIXED:
            return own
        if self.zeroed(atom):
            return torch.zeros_like(own)  # the readout's weight and bias
        if name != "weight":
            return own * atom.own_ratio  # a bias: its init at the base width
        if atom.role == HIDDEN and self.hidden_std:
            return None  # drawn by init_weight
        factor = atom.own_ratio * self.variance_rule(atom) ** 0.5
        return self.without_query(atom, own if factor == 1.0 else own * factor, matrix=False)

    def fan_in_mult(self, atom: Atom) -> float:
        """The width multiplier of the atom's fan-in: 1 from a fixed-size input (or a fixed layer), else m."""
        return 1.0 if atom.role in (INPUT, FIXED) else self.m

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        """SP's draw x sqrt(fan-in multiplier), its base width's: mup's rescale_linear_bias (and
        MuReadout's rescale, the same factor for the readout)."""
        b = super().init_bias(atom, gen)
        if atom.role == OUTPUT and self.readout_zero_init:
            return torch.zeros_like(b)
        return b * math.sqrt(self.fan_in_mult(atom))

    def lr_multiplier(self, atom: Atom, name: str) -> float:
        kind = tensor_update(self.update, atom, name)
        power = LR_POWERS[kind].get((atom.role, name))
        if power is None:
            raise ConfigError(f"param=mup has no rule for a {name} of role {atom.role} (kind {atom.kind}); "
                              f"rules: {', '.join(sorted(f'{r} {n}' for r, n in LR_POWERS[kind]))}")
        return self.m ** power

    def eps_multiplier(self, atom: Atom, name: str) -> float:
        """Adam's epsilon / m for every tensor (eps_by_width), nanoGPT-mup's rule: muP's updates
        keep their size as the width grows while the gradients they come from shrink, so a fixed
        epsilon would come to dominate sqrt(v) (Everett et al. 2024)."""
        return 1.0 / self.m if self.eps_by_width else 1.0

    def attention_scale(self, d_head: int) -> float:
        """sqrt(d_base) / d_head with d_base = d_head / m (heads fixed): 1/d_head scaling
        that equals SP's 1/sqrt(d_head) at the base width (written as SP's scale / sqrt(m),
        = sqrt(d_base) / d_head, so that at m = 1 it is SP's number exactly); attn_mult / d_head
        where attn_mult is set."""
        if self.attn_mult is not None:
            return self.attn_mult / d_head
        return super().attention_scale(d_head) / math.sqrt(self.m)

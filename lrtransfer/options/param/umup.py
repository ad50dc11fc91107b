"""u-muP (Blake et al., ICLR 2025), as Graphcore's `unit-scaling` 0.3.5 states it.

Every weight starts at unit variance and the scale lives in forward multipliers fixed by
each layer's own shape, so activations stay near 1 at any width and depth, and u-muP's
hyperparameters (the multipliers below) mean the same at every size. No base width: the
rules are absolute. Per tensor (fan_in: a Linear's inputs, a conv's c_in k^d):

| tensor                                   | init    | forward (weight and bias)  | Adam LR        | the package's |
|------------------------------------------|---------|----------------------------|----------------|---------------|
| weight of a Linear or conv (not readout) | N(0, 1) | 1 / sqrt(fan_in)           | fan_in^-1/2    | `Linear`, mup_type "weight" |
| readout weight                           | N(0, 1) | loss_mult / fan_in         | 1              | `LinearReadout` ("output"); `cross_entropy(mult)` |
| embedding table (num x width)            | N(0, 1) | 1                          | width^-1/2     | `Embedding` ("weight": its fan_in is the width) |
| bias                                     | 0       | its weight's               | 1              | "bias" |
| norm gain, norm bias                     | 1, 0    | 1                          | 1              | `LayerNorm(elementwise_affine)`: "norm", "bias" |
| a vector outside any layer (model=custom) | its own | (its own use)             | 1              | "bias" or "norm": both x 1 |
| any of these inside a residual branch    |         |                            | x depth^-1/2   | `DepthSequential`: depth = its layers, not branches |

The loss softmax multiplier is the package's `cross_entropy(mult)`: the loss of mult x logits,
folded into the readout's multiplier (the same loss and gradients; accuracy unchanged).

The built-in models' own operations, in their unit-scaled forms (`set_multipliers`, `residual_stack`):
- residual adds: z -> (tau branch(z) + z) / sqrt(1 + tau^2), tau_i = a_i / sqrt(E + sum_{j<i} a_j^2)
  for branch i (`taus`): the package's `transformer_residual_scaling_rule` for the transformer's
  alternating attention and MLP branches (a_mlp = residual_mult sqrt(2 / (1 + r^2)), a_attn = r a_mlp,
  r = residual_attn_ratio, E = the number of blocks); ResNet-S's one kind of branch gets the same
  rule with a = residual_mult and E = its blocks (each kind's branches together contribute
  residual_mult^2 times the input layer, as each of the transformer's kinds does);
- nonlinearities: gain x f(act_mult x) / act_mult, GELU's gain the package's empirical model
  (`gelu_gain`), ReLU's the exact 1 / std of ReLU on N(0, 1), sqrt(2 / (1 - 1/pi)), which is the
  package's GELU gain as its mult grows (the package has no ReLU); tanh and the scaled forms have
  none and are refused;
- attention: logits x attn_mult / d_head, output x the package's empirical scale for causal
  attention over T tokens (`attention_gain`);
- the transformer's token and position embeddings added as the package's `add`: (tok + pos) / sqrt(2).

Weight decay: `optim.decay_scaling=independent` (the default) is the package's
`independent_weight_decay=True` (decay wd per step whatever the LR: its groups' wd / lr); `lr` is
its `False` (lr x lr_mult x wd). No epsilon rule, and the backward pass is the loss's own: the
package also rescales gradients in its backward (`scale_bwd`: a Linear's weight gradient by
1/sqrt(batch), the loss's by its vocabulary and batch, a branch's by 1/tau), which multiplies each
tensor's gradient by a constant of its own. Adam's update is the same under such a constant except
through epsilon, so only Adam-type optimizers are allowed (the package's SGD rules assume its
rescaled gradients).

A published model (model=custom) gets the table's init, forward multipliers and LRs where its roles
are found, its readout's loss_mult and its attention's logit scale (where the module exposes it);
its own residual adds, nonlinearities, norms and attention output keep the module's own scales
(`notes`), so act_mult and the residual multipliers, which could not reach them, are refused there,
and so are what the package has no rule for: a table tied to the readout (an embedding's LR or a
readout's?) and a matrix outside any layer (its multiplier is its layer's, unseen here).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import torch
from torch import Tensor

from lrtransfer.nn import OUTPUT, Activation, Atom, Module, Residual, Sequential, Sum
from lrtransfer.options.param.base import Parameterization
from lrtransfer.options.param.sde import SdeOptions
from lrtransfer.options.schema import ADAPTIVE, ConfigError, Grid, positive

KEYS = ("act_mult", "attn_mult", "loss_mult", "residual_mult", "residual_attn_ratio")
MODELS = ("mlp", "resnet", "transformer", "custom")  # the models it has unit-scaled forms for
ACTIVATIONS = ("relu", "gelu")
ATTENTION_MODELS = ("transformer", "custom")  # attn_mult reaches these
UNIT_RESIDUALS = ("resnet", "transformer")  # their residual adds are u-muP's (residual_mult)
MIXED_BRANCHES = ("transformer",)  # attention and MLP branches (residual_attn_ratio)


@dataclass
class UmupOptions(SdeOptions):
    """u-muP's hyperparameters: each 1 is the package's default."""

    PER_RUN: ClassVar[tuple[str, ...]] = KEYS  # each may vary across a job's runs (grid.param.<key>)
    LR_GRIDS: ClassVar[dict[str, Grid]] = {ADAPTIVE: Grid(-8, 2)}

    name: str = "umup"
    act_mult: float = 1.0  # nonlinearities: gain x f(act_mult x) / act_mult
    attn_mult: float = 1.0  # attention logits x attn_mult / d_head
    loss_mult: float = 1.0  # the loss of loss_mult x logits
    residual_mult: float = 1.0  # the residual branches' share against the input layer
    residual_attn_ratio: float = 1.0  # attention branches' share against MLP branches

    def check(self) -> None:
        for key in KEYS:
            value = getattr(self, key)
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise ConfigError(f"param.{key}={value!r} must be a number")
            positive(f"param.{key}", value)

    def check_with(self, cfg) -> None:
        """What u-muP cannot do right on this config, refused before anything is built."""
        model, update = cfg.model.name, type(cfg.optim).UPDATE
        if update != ADAPTIVE:
            raise ConfigError(f"param=umup has rules for Adam-type optimizers only (optim=adam), not optim={cfg.optim.name}: "
                              "the package's SGD rules assume its own rescaled gradients")
        if model not in MODELS:
            raise ConfigError(f"param=umup has unit-scaled forms for model={', '.join(MODELS)}, not model={model} "
                              "(u-muP has no unit-scaled pooling)")
        act = getattr(cfg.model, "activation", None)
        act = None if act is None else act.value if act.value != "auto" else type(cfg.model).ACTIVATION
        if act is not None and act not in ACTIVATIONS:
            raise ConfigError(f"model.activation={act}: param=umup has unit-scaled forms of {', '.join(ACTIVATIONS)} only")
        rule = getattr(cfg.model, "residual", None)
        if rule is not None and rule.value != "auto":
            raise ConfigError(f"model.residual={rule.value}: param=umup mixes each residual add by its own taus "
                              "(param.residual_mult, param.residual_attn_ratio); valid: model.residual=auto")
        for key, models, why in (
            ("act_mult", () if model == "custom" or act == "relu" else MODELS,
             "relu(mult x) / mult is relu(x)" if act == "relu" else "it cannot reach a published model's own nonlinearities"),
            ("attn_mult", ATTENTION_MODELS, f"model={model} has no attention"),
            ("residual_mult", UNIT_RESIDUALS, f"model={model} has no residual adds of lrtransfer's" if model != "custom"
             else "it cannot reach a published model's own residual adds"),
            ("residual_attn_ratio", MIXED_BRANCHES, f"model={model} has no attention branches" if model != "custom"
             else "it cannot reach a published model's own residual adds"),
        ):
            if model not in models and any(v != 1 for v in _values(cfg, key)):
                raise ConfigError(f"param.{key}={_shown(cfg, key)} does nothing here ({why}): leave it at 1")
        if model == "custom" and len(_values(cfg, "attn_mult")) > 1:
            raise ConfigError("grid.param.attn_mult: a published model's attention takes one scale for all its runs; "
                              "set param.attn_mult=... per job (a sweep over it) instead")


def _values(cfg, key: str) -> list:
    """The key's value and, where it is the job's inner grid, its grid values."""
    grid = getattr(getattr(cfg, "grid", None), "param", None)
    more = getattr(grid, key, None) if grid is not None else None
    return [getattr(cfg.param, key), *(more or [])]


def _shown(cfg, key: str) -> str:
    values = _values(cfg, key)
    return f"{values[0]:g}" if len(values) == 1 else f"{values[0]:g} with grid.param.{key}={list(values[1:])}"


OPTIONS = UmupOptions


# ---------------------------------------------------------------- the package's scaling formulas
def log_interpolation(alpha: float, lower: float, upper: float) -> float:
    """lower^(1 - alpha) upper^alpha: the package's interpolation between a flat and a peaked limit."""
    return math.exp(alpha * math.log(upper) + (1 - alpha) * math.log(lower))


RELU_GAIN = (2 / (1 - 1 / math.pi)) ** 0.5  # 1 / std of relu(z), z ~ N(0, 1)


def gelu_gain(mult: float) -> float:
    """The output gain of the package's unit-scaled GELU, gelu(mult x) / mult: an empirical model
    from 2 (mult -> 0: x/2) to relu's (mult -> infinity)."""
    return log_interpolation(1 / (1 + 0.25 / mult**2), 2.0, RELU_GAIN)


GAINS: dict[str, Callable[[float], float]] = {"relu": lambda mult: RELU_GAIN, "gelu": gelu_gain}


def attention_gain(d_head: int, seq_len: int, mult: float) -> float:
    """The factor on causal attention's output over `seq_len` tokens at logits mult / d_head: the
    package's empirical model, from a uniform average's sqrt(log(T) / T) to a one-hot's 1."""
    if seq_len < 2:
        raise ConfigError(f"param=umup's unit-scaled attention needs sequences of 2 tokens or more, got {seq_len}")
    lower = (math.log(seq_len) / seq_len) ** 0.5
    return 1 / log_interpolation(1 / (1 + 4 * d_head / mult**2), lower, 1.0)


def taus(kinds: Sequence[str], residual_mult: float, attn_ratio: float) -> list[float]:
    """Each residual branch's tau, in order; kinds: "attention" or "mlp" per branch."""
    a_mlp = residual_mult * (2 / (1 + attn_ratio**2)) ** 0.5
    alpha = {"attention": attn_ratio * a_mlp, "mlp": a_mlp}
    base = len(kinds) / len(set(kinds))  # the input layer's share: the branches of one kind
    out = []
    for i, kind in enumerate(kinds):
        before = kinds[:i]
        n_attn, n_mlp = before.count("attention"), before.count("mlp")
        out.append(alpha[kind] / (base + n_attn * alpha["attention"] ** 2 + n_mlp * alpha["mlp"] ** 2) ** 0.5)
    return out


def per_value(fn: Callable[..., float], *args: float | Tensor) -> float | Tensor:
    """fn of floats; where an argument is a (K,) per-run tensor, a (K,) float64 tensor of fn at each
    run's values, each computed as the float would be (a run with value v computes what a job with v does)."""
    if not any(isinstance(a, Tensor) for a in args):
        return fn(*args)
    K = next(len(a) for a in args if isinstance(a, Tensor))
    cols = [a.tolist() if isinstance(a, Tensor) else [a] * K for a in args]
    return torch.tensor([fn(*vals) for vals in zip(*cols)], dtype=torch.float64)


class Umup(Parameterization):
    name = "umup"
    attention_rule = "u-muP's attn_mult / d_head attention scale"
    adaptive_only = True

    def __init__(self, options: UmupOptions, *, width: int, update: str, depth: int | None = None, **job) -> None:
        super().__init__(options, width=width, update=update, depth=depth, **job)
        self.act_mult, self.attn_mult, self.loss_mult = options.act_mult, options.attn_mult, options.loss_mult
        self.residual_mult, self.residual_attn_ratio = options.residual_mult, options.residual_attn_ratio

    # ---- forward
    def multipliers(self, atom: Atom) -> tuple[float | Tensor, float | Tensor]:
        if atom.kind in ("embedding", "gain", "tensor"):
            return 1.0, 1.0
        if atom.role == OUTPUT:  # the readout (or a tied table's readout use), the loss's multiplier folded in
            m = per_value(lambda mult: (1 / atom.fan_in) * mult, self.loss_mult)
            return m, m
        return 1 / atom.fan_in**0.5, 1 / atom.fan_in**0.5

    def set_multipliers(self, model: Module) -> None:
        loose = [a for a in model.atoms() if a.kind == "tensor" and a.tensor.dim() > 2]  # (K, ...): 2+ dims a run
        if loose:
            names = ", ".join(sorted(a.user_names["tensor"] for a in loose)[:3])
            raise ConfigError(f"param=umup has no rule for a matrix outside a Linear, conv or embedding "
                              f"({names}{', ...' if len(loose) > 3 else ''}): u-muP's multiplier of a weight is set by "
                              "the layer that multiplies by it, which lrtransfer cannot see here")
        tied = next((a for a in model.atoms() if a.tied is not None), None)
        if tied is not None:
            raise ConfigError(f"param=umup: {tied.user_names['weight']} is tied to the readout {tied.tied.name}, and u-muP "
                              "has no rule for one tensor that is both a table (Adam LR x width^-1/2) and a readout "
                              "(LR x 1); untie them (transformers' models: tie_word_embeddings: false)")
        super().set_multipliers(model)
        for m in model.modules():
            if isinstance(m, Activation):
                if m.name not in GAINS:
                    raise ConfigError(f"model.activation={m.name}: param=umup has unit-scaled forms of "
                                      f"{', '.join(GAINS)} only")
                m.unit_scale(self.act_mult, per_value(GAINS[m.name], self.act_mult))
            elif isinstance(m, Sum):  # unit-scaled addition of unit-scaled parts
                m.scales = (len(m.scales) ** -0.5,) * len(m.scales)

    def attention_scale(self, d_head: int) -> float | Tensor:
        return per_value(lambda mult: mult / d_head, self.attn_mult)

    def attention_output_mult(self, d_head: int):
        mult = self.attn_mult
        return lru_cache(maxsize=None)(lambda T: per_value(lambda a: attention_gain(d_head, T, a), mult))

    # ---- residual adds
    def residual_stack(self, blocks: Sequence[Module], *, rule: str = "auto", mass: float = 1.0) -> Sequential:
        if rule != "auto":
            raise ConfigError(f"model.residual={rule}: param=umup mixes each residual add by its own taus "
                              "(param.residual_mult, param.residual_attn_ratio); valid: model.residual=auto")
        kinds = ["attention" if any(a.tag == "query" for a in b.atoms()) else "mlp" for b in blocks]
        if len(set(kinds)) == 1:
            kinds = ["mlp"] * len(kinds)  # one kind: residual_mult alone (the ratio is refused: check_with)
        ratio = self.residual_attn_ratio if len(set(kinds)) > 1 else 1.0
        mixed = []  # (skip, branch) of each block: (1, tau) / sqrt(1 + tau^2), the package's residual_split/add
        for i in range(len(blocks)):
            tau = lambda rm, r, i=i: taus(kinds, rm, r)[i]  # noqa: E731
            mixed.append((per_value(lambda rm, r: 1 / (1 + tau(rm, r) ** 2) ** 0.5, self.residual_mult, ratio),
                          per_value(lambda rm, r: tau(rm, r) / (1 + tau(rm, r) ** 2) ** 0.5, self.residual_mult, ratio)))
        for block in blocks:
            for atom in block.atoms():
                atom.in_branch = True
        return Sequential([Residual(b, skip=skip, branch=branch) for b, (skip, branch) in zip(blocks, mixed)])

    # ---- init: N(0, 1) weights, zero biases, whatever the model's own
    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        if atom.kind == "embedding":
            return torch.randn(atom.fan_in, atom.fan_out, generator=gen)
        return torch.randn(atom.fan_out, atom.fan_in, generator=gen).t()  # drawn in torch's (out, in) order

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        return torch.zeros(atom.fan_out)

    def from_own(self, atom: Atom, name: str, own: Tensor) -> Tensor | None:
        return None  # drawn by init_weight and init_bias

    # ---- learning rates
    def lr_multiplier(self, atom: Atom, name: str) -> float:
        depth = self.depth**-0.5 if atom.in_branch and self.depth else 1
        if name != "weight" or atom.role == OUTPUT:
            return float(depth)
        fan_in = atom.fan_out if atom.kind == "embedding" else atom.fan_in  # a table's fan-in is its width
        return depth * fan_in**-0.5

    def notes(self, model: Module) -> list[str]:
        out = ["note: param=umup reaches the module's layers (init, forward multipliers, LRs), its readout "
               "(loss_mult) and its attention's logit scale, not its own code: its residual adds, nonlinearities, "
               "norms and attention output keep their own scales (u-muP's taus, unit-scaled nonlinearities and "
               "attention output scale are the built-in models')"]
        if not any(a.in_branch for a in model.atoms()):
            out.append("note: no residual branches found: no tensor gets u-muP's depth^-1/2 LR; if the model has "
                       "some, name each branch's last Linear with model.branch_outputs='*.proj'")
        return out

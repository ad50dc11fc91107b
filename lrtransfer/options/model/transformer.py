"""A GPT-style decoder for next-token prediction on token data (data=text).

    z_0 = (tok(x) + pos(0..T-1)) / 2                   token and position embeddings
    z   <- (skip) z + (branch) attn(LN(z))              `depth` pre-norm blocks, each two
    z   <- (skip) z + (branch) mlp(LN(z))               residual branches
    logits = head(LN(z))                               (K, B, T, vocab)

Causal multi-head self-attention with `model.heads` heads of d_head = width / heads:
Q, K, V and the output projection O are Linears (Q tagged "query": muP starts it at
zero); logits q.k are scaled by `param.attention_scale(d_head)` (SP 1/sqrt(d_head),
muP and modular 1/d_head, u-muP attn_mult/d_head), and the output by `param.attention_output_mult`
where a rule has one (u-muP's unit-scaled attention). The MLP is Linear(width, mlp_ratio * width), the
activation, Linear back. The residual trunk is built by `param.residual_stack` from
the 2 * depth branches, so `model.residual` (or the parameterization's own rule)
applies to each, with L = 2 * depth (Modula's GPT: skip 1 - 1/(2L'), branch 1/(2L')
for L' = depth blocks).

The modular norm's structure is Modula's GPT (modula/compound.py, `GPT` and
`Attention`): the embeddings are `1/2 tok + 1/2 pos` tared to mass 1; the blocks are
tared to mass 5 (`TRUNK_MASS`, times `param.blocks_mass`); the head (final LN and
Linear) has mass 1; attention is `O o F o (1/3) o (Q, K, V)`, the 1/3
(`param.attention_qkv_mult`, 1 under every other parameterization) making the
tuple's sensitivity 3 into 1; the MLP's nonlinearity is Modula's ScaledGELU (sqrt(2) *
GELU, sensitivity 1: `model.activation=auto` under param=modular). Modula's LayerNorm has no weights: here every LN keeps
its gain and bias (trained under the other parameterizations) with mass 0, so under
param=modular they stay at the identity and the targets are Modula's.

Every tensor carries the leading run axis K; attention mixes positions within one
sequence of one run, never across runs or sequences.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor
from torch.nn import functional as F

from lrtransfer.nn import (
    HIDDEN, OUTPUT, Activation, Embedding, Enumerate, LayerNorm, Linear, Module, Sequential, Sum, scaled, set_scalar,
    tare,
)
from lrtransfer.options.schema import TOKENS, ConfigError, ResidualRule, positive
from lrtransfer.options.schema import Activation as ActivationName

TRUNK_MASS = 5.0  # the residual blocks' total mass under the modular norm, as Modula's GPT


@dataclass
class TransformerOptions:
    """A GPT-style decoder: token + position embeddings, `depth` pre-norm blocks
    z + attn(LN(z)), z + mlp(LN(z)) (causal self-attention, `heads` heads of width / heads),
    a final LN and a linear head predicting the next token at every position."""

    MIN_DEPTH: ClassVar[int] = 1  # transformer blocks (each an attention and an MLP residual branch)
    READS: ClassVar[tuple[str, ...]] = (TOKENS,)
    PARTS: ClassVar[tuple[str, ...]] = ("attention", "mlp")  # roles of per-module hyperparameters (`hp.attention.*`)
    ATTENTION: ClassVar[bool] = True  # computes attention (a parameterization's attention keys act on it)

    name: str = "transformer"
    heads: int = 4  # fixed number of heads: d_head = width / heads grows with the width
    mlp_ratio: int = 4  # MLP hidden width = mlp_ratio * width
    ACTIVATION: ClassVar[str] = "gelu"  # what activation=auto means (scaled under param=modular)
    activation: ActivationName = ActivationName.auto
    bias: bool = True
    residual: ResidualRule = ResidualRule.auto

    def check(self) -> None:
        positive("model.heads", self.heads)
        positive("model.mlp_ratio", self.mlp_ratio)

    def check_with(self, cfg) -> None:
        if cfg.width % self.heads != 0:
            valid = ", ".join(str(self.heads * i) for i in (1, 2, 4, 8, 16))
            raise ConfigError(
                f"width={cfg.width} is not divisible by model.heads={self.heads} (d_head = width / heads); "
                f"valid widths: multiples of {self.heads} ({valid}, ...), or a model.heads dividing {cfg.width}"
            )


OPTIONS = TransformerOptions


class CausalSelfAttention(Module):
    """O(attention(m q, m k, m v)) with q, k, v = Q z, K z, V z, per head, causal.

    m = `qkv_mult`, `scale` the factor on the logits (a float, or a (K,) tensor: one per run),
    `out_mult(T)` a factor on attention's output for sequences of T tokens (u-muP's unit-scaled
    attention; None: 1). As a compound (Modula's
    `W @ FunctionalAttention * 1/3 @ (Q, K, V)` with m = 1/3): the tuple (Q, K, V)
    (sensitivity s_Q + s_K + s_V), the scalar m, the attention itself (a bond of
    sensitivity 1, as Modula counts it), then O. Mass mu = mu_Q + mu_K + mu_V + mu_O;
    sensitivity |m| (s_Q + s_K + s_V) s_O; O gets (mu_O / mu) T and each of Q, K, V
    (mu_i / mu) T / (|m| s_O).
    """

    def __init__(self, width: int, heads: int, *, runs: int, bias: bool, scale: float | Tensor, qkv_mult: float,
                 out_mult: Callable[[int], float | Tensor] | None = None, context: int = 0) -> None:
        super().__init__()
        self.heads, self.d_head, self.qkv_mult, self.out_mult = heads, width // heads, qkv_mult, out_mult
        # the logits' factor: one float, or each run's (kept as Python floats, as a job with that value has it)
        self.scale = scale.tolist() if isinstance(scale, Tensor) else float(scale)
        self.context = context  # the task's sequence length: its output factor is held ready (moved with the model)
        set_scalar(self, "out_at_context", out_mult(context) if out_mult is not None and context else 1.0)
        self.q = Linear(width, width, role=HIDDEN, runs=runs, bias=bias, tag="query")
        self.k = Linear(width, width, role=HIDDEN, runs=runs, bias=bias, tag="key")
        self.v = Linear(width, width, role=HIDDEN, runs=runs, bias=bias, tag="value")
        self.o = Linear(width, width, role=HIDDEN, runs=runs, bias=bias, tag="attn_out")
        for lin in (self.q, self.k, self.v, self.o):
            within(lin, "attention")

    def _heads(self, t: Tensor) -> Tensor:
        # (K, B, T, width) -> (K, B, heads, T, d_head)
        return t.unflatten(-1, (self.heads, self.d_head)).transpose(-3, -2)

    def forward(self, z: Tensor) -> Tensor:
        # z: (K, B, T, width)
        q, k, v = (self._heads(lin(z)) for lin in (self.q, self.k, self.v))  # each (K, B, H, T, d_head)
        if self.qkv_mult != 1.0:
            q, k, v = q * self.qkv_mult, k * self.qkv_mult, v * self.qkv_mult
        K, B, H, T, D = q.shape
        with _float32_on_cpu(q) as full:
            q, k, v = (full(t).reshape(K, B, H, T, D) for t in (q, k, v))
            if isinstance(self.scale, list):  # one scale per run: each run's sequences with its own
                y = torch.cat([attend(q[r], k[r], v[r], self.scale[r]) for r in range(K)])
            else:  # (K * B, H, T, d_head): one sequence of one run at a time
                y = attend(q.flatten(0, 1), k.flatten(0, 1), v.flatten(0, 1), self.scale)
        y = y.view(K, B, H, T, D).transpose(-3, -2).flatten(-2)  # (K, B, T, width)
        if self.out_mult is not None:
            y = scaled(y, self.out_at_context if T == self.context else _on(self.out_mult(T), y))
        return self.o(y)

    @property
    def sensitivity(self) -> float:
        return abs(self.qkv_mult) * (self.q.sensitivity + self.k.sensitivity + self.v.sensitivity) * self.o.sensitivity

    def split(self, target: float) -> list[tuple[Module, float]]:
        mass = self.mass
        if mass <= 0:
            return [(m, 0.0) for m in (self.q, self.k, self.v, self.o)]
        after = abs(self.qkv_mult) * 1.0 * self.o.sensitivity  # the scalar, the attention bond, then O
        qkv = [(m, m.mass / mass * target / after) for m in (self.q, self.k, self.v)]
        return qkv + [(self.o, self.o.mass / mass * target)]

    def extra_repr(self) -> str:
        scale = f"{self.scale:.4g}" if isinstance(self.scale, float) else "one per run"
        return f"heads={self.heads}, d_head={self.d_head}, scale={scale}, qkv_mult={self.qkv_mult:.4g}"


def attend(q: Tensor, k: Tensor, v: Tensor, scale: float) -> Tensor:
    """Causal attention of (N, H, T, d_head) sequences with `scale` on the logits."""
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=scale)


def _on(mult: float | Tensor, like: Tensor) -> float | Tensor:
    return mult.to(like.device, like.dtype) if isinstance(mult, Tensor) else mult


@contextmanager
def _float32_on_cpu(t: Tensor):
    """Attention in float32 in a bf16 step on a CPU, where PyTorch's bfloat16 attention kernel is
    slower than its float32 one (docs/performance.md) and less exact; on a GPU bfloat16
    attention is the fast one, and autocast keeps it. Yields the cast to apply to q, k and v."""
    if t.device.type != "cpu" or not torch.is_autocast_enabled("cpu"):
        yield lambda x: x
        return
    with torch.autocast("cpu", enabled=False):
        yield lambda x: x.float()


def within(atom: Linear, part: str) -> Linear:
    """The atom, marked as a matrix of the model's attention or MLP (`hp.attention.*`, `hp.mlp.*`)."""
    atom.within = (part,)
    return atom


def layer_norm(width: int, runs: int) -> LayerNorm:
    """LN with gain and bias; mass 0, as Modula's weightless LayerNorm (see the module doc)."""
    ln = LayerNorm(width, runs=runs)
    for atom in ln.atoms():
        atom.mass = 0.0
    return ln


def build(options: TransformerOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Sequential:
    (context,) = input_shape  # token ids (T,) per example; output_dim: the vocabulary
    m = options
    heads, act, bias = m.heads, m.activation.value, m.bias
    hidden = m.mlp_ratio * width

    embed = Sum(
        [Embedding(output_dim, width, runs=runs, tag="token"),
         Sequential([Enumerate(), Embedding(context, width, runs=runs, tag="position")])],
        scales=(0.5, 0.5),
    )  # ids (B, T) or (K, B, T) -> (K, B, T, width)
    tare(embed, 1.0)

    def attention() -> Sequential:
        return Sequential([
            layer_norm(width, runs),
            CausalSelfAttention(width, heads, runs=runs, bias=bias, scale=param.attention_scale(width // heads),
                                qkv_mult=param.attention_qkv_mult(), out_mult=param.attention_output_mult(width // heads),
                                context=context),
        ])

    def mlp() -> Sequential:
        return Sequential([
            layer_norm(width, runs),
            within(Linear(width, hidden, role=HIDDEN, runs=runs, bias=bias), "mlp"),  # (K, B, T, width) -> (K, B, T, hidden)
            Activation(act),
            within(Linear(hidden, width, role=HIDDEN, runs=runs, bias=bias), "mlp"),  # -> (K, B, T, width)
        ])

    branches = [b for _ in range(depth) for b in (attention(), mlp())]
    head = Sequential([layer_norm(width, runs), Linear(width, output_dim, role=OUTPUT, runs=runs, bias=bias)])
    trunk = param.residual_stack(branches, rule=m.residual.value, mass=TRUNK_MASS)
    return Sequential([embed, trunk, head])  # -> (K, B, T, vocab)


"""A stand-in for karpathy/nanoGPT's `GPT(config)`, written for these tests (it is not nanoGPT's
file, which this project does not ship), so the published-model tests need no checkout of it.

It keeps what lrtransfer sees of nanoGPT and what the fixtures measured on nanoGPT's own file:
- the parameter names (transformer.wte, transformer.h.0.attn.c_attn, ..., lm_head) and the order the
  modules are built and drawn in, so one seed gives the same numbers as the original;
- the init: every Linear and Embedding weight N(0, 0.02), biases zero, each residual output
  projection (`c_proj`) N(0, 0.02 / sqrt(2 n_layer)), the token table tied to the readout;
- a LayerNorm of its own with an optional bias, GELU MLPs four times the width, attention through
  `scaled_dot_product_attention` at its default scale (where muP's 1/d must reach from outside);
- the parameter count printed by the constructor, and `forward(idx, targets) -> (logits, loss)`
  with every position's logits only when given targets.

Set LRTRANSFER_NANOGPT=/path/to/nanoGPT/model.py to run the same tests on the original file.
"""

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn


@dataclass
class GPTConfig:
    block_size: int = 1024
    vocab_size: int = 50304
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    dropout: float = 0.0
    bias: bool = True


class LayerNorm(nn.Module):
    """nn.LayerNorm has no bias-free form in older PyTorch; nanoGPT has its own for that."""

    def __init__(self, width: int, bias: bool):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(width))
        self.bias = nn.Parameter(torch.zeros(width)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0, "the heads must split the width"
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # queries, keys, values fused
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.heads, self.p = cfg.n_head, cfg.dropout

    def forward(self, x):  # x: (batch, time, width)
        b, t, w = x.shape

        def heads(z):  # (batch, time, width) -> (batch, heads, time, width / heads)
            return z.view(b, t, self.heads, w // self.heads).transpose(1, 2)

        q, k, v = self.c_attn(x).split(w, dim=2)
        k, q, v = heads(k), heads(q), heads(v)
        p = self.p if self.training else 0
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=p, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(b, t, w)
        return F.dropout(self.c_proj(y), self.p, self.training)


class MLP(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)
        self.p = cfg.dropout

    def forward(self, x):
        return F.dropout(self.c_proj(F.gelu(self.c_fc(x))), self.p, self.training)


class Block(nn.Module):
    """Pre-norm: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1, self.attn = LayerNorm(cfg.n_embd, cfg.bias), CausalSelfAttention(cfg)
        self.ln_2, self.mlp = LayerNorm(cfg.n_embd, cfg.bias), MLP(cfg)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = cfg = config
        tables = dict(wte=nn.Embedding(cfg.vocab_size, cfg.n_embd), wpe=nn.Embedding(cfg.block_size, cfg.n_embd))
        blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.transformer = nn.ModuleDict({**tables, "h": blocks, "ln_f": LayerNorm(cfg.n_embd, cfg.bias)})
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.transformer.wte.weight = self.lm_head.weight  # tied: the readout's draw below is the table's
        for m in self.modules():  # leaves in the order nanoGPT's self.apply visits them
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, mean=0.0, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
        for block in blocks:  # GPT-2's scaled residual projections, drawn again
            for proj in (block.attn.c_proj, block.mlp.c_proj):
                nn.init.normal_(proj.weight, mean=0.0, std=0.02 / math.sqrt(2 * cfg.n_layer))
        print("number of parameters: %.2fM" % (self.get_num_params() / 1e6,))

    def get_num_params(self, non_embedding=True):
        n = sum(p.numel() for p in self.parameters())
        return n - self.transformer.wpe.weight.numel() if non_embedding else n

    def forward(self, idx, targets=None):  # idx: (batch, time) token ids
        t = idx.shape[1]
        assert t <= self.config.block_size, f"Cannot forward sequence of length {t}, block size is only {self.config.block_size}"
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(0, t, dtype=torch.long, device=idx.device))
        x = F.dropout(x, self.config.dropout, self.training)
        for block in self.transformer.h:
            x = block(x)
        x = self.transformer.ln_f(x)
        if targets is None:  # generation: the last position only
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)  # (batch, time, vocab)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

"""Whether a token model reads ahead: its logits at a position change when a later token does.

The token tasks train next-token prediction: position t's target is token t+1, which is
also the input at t+1. A model without a causal mask (BERT, any encoder) sees it, and its
loss falls by copying its inputs, not by modelling language: a study of it measures the
wrong thing. The config's own flags (`is_decoder`, `is_causal`) exist only in some
families and say nothing of a user's own model, so the model is asked directly: two
forwards of one short sequence, the second with its later half changed, and the earlier
half's logits compared. A causal model's are the same to the bit (GPT-2, Llama and
nanoGPT: 0 difference in float32); BERT's at its own init move by 3e-3 (width 32) to 0.12
(width 1024) of their largest magnitude, far above the 1e-5 taken as a change
(docs/published-models.md has the numbers).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor

PROBE_LENGTH = 8  # tokens: the later half changed, the earlier half read (a short sequence: the signal is not diluted)
CHANGE = 1e-5  # a difference above this fraction of the logits' largest magnitude is a change


def reads_ahead(logits: Callable[[Tensor], Tensor], length: int, vocab: int) -> bool | None:
    """Whether `logits` ((1, T) token ids -> (1, T, V), the module in eval mode) at the first T/2
    positions depend on the later tokens; None where it cannot tell (a context under 2 tokens,
    logits of another shape, all zero, or a forward that fails: the first real forward says why)."""
    n = min(length, PROBE_LENGTH)
    if n < 2 or vocab < 2:
        return None
    x = torch.randint(0, vocab, (1, n), generator=torch.Generator().manual_seed(0))
    y = x.clone()
    y[:, n // 2:] = (y[:, n // 2:] + 1) % vocab  # every later token another one
    try:
        with torch.no_grad(), torch.random.fork_rng():
            a, b = logits(x), logits(y)
    except Exception:
        return None
    if not (isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape == b.shape and a.dim() == 3
            and a.shape[:2] == (1, n) and a.is_floating_point()):
        return None
    scale = float(a.detach().abs().max())
    if not 0 < scale < float("inf"):
        return None
    early = (a[:, : n // 2] - b[:, : n // 2]).abs().max()
    return bool(early > CHANGE * scale)

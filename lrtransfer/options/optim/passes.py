"""One pass per run: the loop of an optimizer's `update`, where each update is rate x direction.

The tensors carry the run axis first, so one run's slice of each is contiguous memory: a
fused kernel takes it as it is, and applies that run's own rate and decay with the
direction in the same pass, where the direction path makes five (direction, scale,
decay, subtract, clear). The tensors of a run that share a rate, a decay and the
optimizer's settings (Adam's beta1, beta2 and epsilon: each tensor's own, each run's own
where they are per run) go in one call. A small tensor (a bias,
a gain, a narrow model's matrix) is in cache whatever the path, and one call per run
costs more than it saves: those are updated for every run at once, the direction
path's way (`whole`).

Gradients arrive in the dtype the forward computed in (bfloat16 for the matrices of a
bf16 step): each run's slice is converted where it is used, while it is in cache, and
each run's bfloat16 copies are written from its freshly updated slices.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import torch
from torch import Tensor

from lrtransfer.nn.linalg import run_view

# Elements of a run's slice from which its tensor is updated run by run: below it the K calls
# cost more than the memory passes they save (measured: docs/performance.md).
PER_RUN_MIN = 2**15


def split(tensors: Sequence[Tensor]) -> tuple[list[int], list[int]]:
    """(indices of the tensors updated for every run at once, of those updated run by run)."""
    each = [i for i, t in enumerate(tensors) if t[0].numel() >= PER_RUN_MIN]
    return [i for i in range(len(tensors)) if i not in each], each


def pick(values: Sequence | None, idx: Sequence[int]) -> list | None:
    """values[i] for each i of idx (None stays None)."""
    return None if values is None else [values[i] for i in idx]


def groups(k: int, rates, decays, keys: Sequence) -> Iterator[tuple[float, float, object, list[int]]]:
    """(rate, decay, key, indices) of run k's tensors, grouped by equal (rate, decay, key).

    rates: per tensor, K floats; decays: the same, or None (no decay); keys: per tensor, run k's
    settings of the optimizer that must be equal within one call (Adam's (beta1, beta2, eps))."""
    found: dict[tuple, list[int]] = {}
    for i, (r, key) in enumerate(zip(rates, keys)):
        found.setdefault((r[k], decays[i][k] if decays is not None else 0.0, key), []).append(i)
    for (rate, decay, key), idx in found.items():
        yield rate, decay, key, idx


def floats(values: Sequence[Tensor] | None) -> list[list[float]] | None:
    """(K,) host tensors as Python floats, what a fused kernel takes (None stays None)."""
    return None if values is None else [v.tolist() for v in values]


def runs_of(tensors: Sequence[Tensor | None]) -> list:
    """Each (K, ...) tensor's K slices (views); None stays None."""
    return [None if t is None else t.unbind(0) for t in tensors]


def like(g: Tensor, master: Tensor) -> Tensor:
    """A gradient in its master's dtype (a bfloat16 slice read into float32)."""
    return g if g.dtype == master.dtype else g.to(master.dtype)


def whole(tensors, directions, rates, decays, copies) -> None:
    """w <- (1 - decay) w - rate d for every run at once, (K,) rates and decays (host tensors,
    decays None: no decay) along the run axis: the direction path's arithmetic
    (`engine.apply_updates`); then each copy (or None) written from its tensor. The
    directions are scratch: scaled in place."""
    for i, (w, d, c) in enumerate(zip(tensors, directions, copies)):
        # on a GPU, (K,) host numbers copied without waiting for the device (a blocking copy
        # synchronises the stream: one wait a tensor, a step, seen on an H200)
        if decays is not None:
            w.mul_(1 - run_view(decays[i].to(w.device, non_blocking=True), w))
        w.sub_(d.mul_(run_view(rates[i].to(w.device, non_blocking=True), d)))
        if c is not None:
            c.copy_(w)


def write_copies(k: int, masters, copies) -> None:
    """Run k's low-precision copies (per tensor: K slices, or None) from its masters' slices."""
    pairs = [(c[k], w[k]) for w, c in zip(masters, copies) if c is not None]
    if pairs:
        torch._foreach_copy_([c for c, _ in pairs], [w for _, w in pairs])

"""The one place that calls PyTorch's private fused optimizer kernels.

`torch._fused_adam_` does Adam's whole update in a single pass over memory; our
plain formula takes about ten. On a (11, 1024, 1024) ensemble it measured 7 ms
against 82 ms per step. It is private, so it is wrapped here, checked against the
plain formula by a test, and any failure falls back to that formula: a PyTorch
upgrade can cost speed, never correctness.

The kernel updates a parameter in place: p <- p - lr * m_hat / (sqrt(v_hat) + eps).
Called on a zeroed buffer with lr = -1 it leaves the *direction*
m_hat / (sqrt(v_hat) + eps) in the buffer, which is what lrtransfer's optimizers
return (the parameterization then turns directions into updates). Where the update
is the LR times that direction, `adam_update_` instead runs the kernel on the weights
themselves, with the LR and the decoupled decay (AdamW's form), once per run: one
pass over memory instead of five. Its numbers are those of the direction path
exactly when the LR multiplies exactly (a power of two: every integer log2 LR of
the default grids); otherwise the two round differently, in the last bit.

The kernel takes one beta1, beta2 and epsilon per call. Each tensor has its own (a
parameterization's multipliers, `Slot.eps_mult`, `beta1_mult`), and each may be one value for
every run or one per run (`Setting`): `plan` makes the calls, once, that give every tensor of
every run its own: one for the tensors that share a setting across all runs; for a large tensor
whose setting differs between runs, one per run on that run's slice (contiguous: the run axis is
first), grouped by the run's values; and for the small ones among those, one pass over the whole
tensors with each run's values along the run axis (`along`: one call a run would cost more).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import NamedTuple

import torch
from torch import Tensor

from lrtransfer.options.optim import along
from lrtransfer.options.optim.passes import PER_RUN_MIN

# Tests set this to False to exercise the plain formula.
use_fused = True


class CountsSteps:
    """An optimizer's step count: `t` on the host (what a checkpoint saves) and `_step`, a 0-dim
    tensor on the device, where the fused kernels read it, so that a step replayed as a CUDA graph
    reads each step's count, not the one at capture."""

    t: int
    _step: Tensor

    def advance(self) -> None:
        """Count a step, on the host and on the device."""
        self.t += 1
        self._step.fill_(self.t)


# One of Adam's settings (beta1, beta2, epsilon) of one tensor: a float shared by every run of the
# ensemble, or a tuple of one float per run.
Setting = float | tuple[float, ...]
EVERY_RUN = -1


class Call(NamedTuple):
    """One call: the settings, the tensors it updates (indices), and how: None, the whole tensors at
    one setting every run shares (the fused kernel); a run k, run k's slices at its values (the fused
    kernel); or EVERY_RUN, the whole tensors, each run at its own values (`along`), where beta1,
    beta2 and eps are each tensor's Setting, in the order of the tensors, and `runs` the same as
    arrays."""

    beta1: Setting | list[Setting]
    beta2: Setting | list[Setting]
    eps: Setting | list[Setting]
    tensors: list[int]
    how: int | None
    runs: along.RunSettings | None = None


def at(setting: Setting, k: int) -> float:
    """Run k's value of a setting."""
    return setting[k] if isinstance(setting, tuple) else setting


def per_tensor(value: Setting | list[Setting], n: int) -> list[Setting]:
    """One setting for each of n tensors: a list is each tensor's own; a float (or a tuple of one
    per run) is every tensor's."""
    if isinstance(value, list):
        return value
    return [float(value) if not isinstance(value, tuple) else value] * n


def plan(beta1: Sequence[Setting], beta2: Sequence[Setting], eps: Sequence[Setting], runs: int,
         small: Collection[int] = ()) -> list[Call]:
    """The calls that give each tensor i, in each of the ensemble's `runs` runs, its own beta1[i],
    beta2[i] and eps[i]: a fused call per setting every run shares; for the tensors whose settings
    differ between runs, one pass along the run axis over those of them that are `small` (`along`:
    a call per run costs more than the passes it saves, `passes.split`), and a fused call per run
    and setting over the others."""
    whole: dict[tuple, list[int]] = {}
    each, apart = [], []
    for i, key in enumerate(zip(beta1, beta2, eps)):
        if not any(isinstance(x, tuple) for x in key):
            whole.setdefault(key, []).append(i)
        else:
            (apart if i in small else each).append(i)
    calls = [Call(*key, idx, None) for key, idx in whole.items()]
    if apart:
        settings = [[x[i] for i in apart] for x in (beta1, beta2, eps)]
        calls.append(Call(*settings, apart, EVERY_RUN, along.RunSettings(*settings, runs)))
    for k in range(runs if each else 0):
        found: dict[tuple, list[int]] = {}
        for i in each:
            found.setdefault((at(beta1[i], k), at(beta2[i], k), at(eps[i], k)), []).append(i)
        calls += [Call(*key, idx, k) for key, idx in found.items()]
    return calls


def adam_directions_(
    out: Sequence[Tensor],
    grads: Sequence[Tensor],
    m: Sequence[Tensor],
    v: Sequence[Tensor],
    step: Tensor | int,
    beta1: Setting | list[Setting],
    beta2: Setting | list[Setting],
    eps: Setting | list[Setting],
    calls: Sequence[Call] | None = None,
) -> None:
    """Update Adam's moments m, v with `grads` (in place) and write m_hat/(sqrt(v_hat)+eps) into `out`.

    step: the step count, best a 0-dim tensor on the tensors' device, read there by the kernel
    (so a CUDA graph that replays this reads the count of each step, not the one at capture).

    beta1, beta2, eps: one value, or a list of one per tensor, each a float or a tuple of one per
    run (`Setting`): the fused kernel takes one of each, so it runs once per distinct setting
    (`plan`). calls: the plan, where the caller made it once (settings do not change from step
    to step)."""
    if not isinstance(step, Tensor):
        step = torch.tensor(float(step), device=out[0].device if out else None)
    if calls is None:
        n = len(out)
        calls = plan(per_tensor(beta1, n), per_tensor(beta2, n), per_tensor(eps, n), out[0].shape[0] if n else 0,
                     small=[i for i, o in enumerate(out) if o[0].numel() < PER_RUN_MIN])
    # each run's slices of a tensor updated run by run, taken at once (unbind: one call, not one a run)
    each = {i for c in calls if c.how is not None and c.how != EVERY_RUN for i in c.tensors}
    runs = {i: [t[i].unbind(0) for t in (out, grads, m, v)] for i in each}
    for c in calls:
        if c.how is None or c.how == EVERY_RUN:
            parts = [[t[i] for i in c.tensors] for t in (out, grads, m, v)]
        else:
            parts = [[runs[i][j][c.how] for i in c.tensors] for j in range(4)]
        if c.how == EVERY_RUN:
            along.directions_(*parts, step, c.runs)
        else:
            _adam_directions_(*parts, step, c.beta1, c.beta2, c.eps)


_per_run: dict[tuple, Tensor] = {}  # (values, device, dtype, dims) -> the values along the run axis


def per_run(setting: Setting, like: Tensor) -> float | Tensor:
    """A setting as a number, or its runs' values as a (K, 1, ...) tensor against `like` (K, ...),
    made once per place and kept (a CUDA graph replays its first)."""
    if not isinstance(setting, tuple):
        return setting
    key = (setting, like.device, like.dtype, like.dim())
    if key not in _per_run:
        _per_run[key] = torch.tensor(setting, dtype=like.dtype, device=like.device).view(-1, *[1] * (like.dim() - 1))
    return _per_run[key]


def _adam_directions_(out, grads, m, v, step: Tensor, beta1: float, beta2: float, eps: float) -> None:
    global use_fused
    grads = [g if g.is_contiguous() else g.contiguous() for g in grads]
    if use_fused and hasattr(torch, "_fused_adam_"):
        try:
            torch._foreach_zero_(list(out))
            torch._fused_adam_(
                list(out), grads, list(m), list(v), [], [step] * len(out),
                lr=-1.0, beta1=beta1, beta2=beta2, weight_decay=0.0, eps=eps, amsgrad=False, maximize=False,
            )
            return
        except (RuntimeError, TypeError, NotImplementedError):
            use_fused = False  # this build cannot: the plain formula from now on
    step = int(step)
    c1 = 1.0 / (1.0 - beta1**step)
    c2 = 1.0 / math.sqrt(1.0 - beta2**step)
    for o, g, mi, vi in zip(out, grads, m, v):
        mi.mul_(beta1).add_(g, alpha=1.0 - beta1)
        vi.mul_(beta2).addcmul_(g, g, value=1.0 - beta2)
        torch.div(mi, vi.sqrt().mul_(c2).add_(eps), out=o).mul_(c1)


def adam_update_(
    params: Sequence[Tensor],
    grads: Sequence[Tensor],
    m: Sequence[Tensor],
    v: Sequence[Tensor],
    step: Tensor,
    beta1: float,
    beta2: float,
    eps: float,
    lr: float,
    decay: float,
) -> None:
    """p <- (1 - decay) * p - lr * m_hat / (sqrt(v_hat) + eps) for each tensor, moments updated,
    in one pass (torch's fused AdamW kernel). step: a scalar tensor holding the step count.

    AdamW's kernel decays by lr * weight_decay, so it is given decay / lr; where lr is a power of
    two that quotient and product are exact, and 1 - decay is the direction path's number.
    """
    global use_fused
    grads = [g if g.is_contiguous() else g.contiguous() for g in grads]
    if use_fused and hasattr(torch, "_fused_adamw_"):
        try:
            if decay and not lr:  # no step to divide by (a rule with a zero LR multiplier)
                torch._foreach_mul_(list(params), 1.0 - decay)
            kernel, wd = (torch._fused_adamw_, decay / lr) if decay and lr else (torch._fused_adam_, 0.0)
            kernel(list(params), grads, list(m), list(v), [], [step] * len(params),
                   lr=lr, beta1=beta1, beta2=beta2, weight_decay=wd, eps=eps, amsgrad=False, maximize=False)
            return
        except (RuntimeError, TypeError, NotImplementedError):
            use_fused = False
    out = [torch.empty_like(p) for p in params]
    _adam_directions_(out, grads, m, v, step, beta1, beta2, eps)
    for p, d in zip(params, out):
        if decay:
            p.mul_(1.0 - decay)
        p.sub_(d.mul_(lr))

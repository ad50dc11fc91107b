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
every run or one per run (`Setting`): `plan` makes the fewest calls that give every tensor of
every run its own, one call for the tensors that share a setting across all runs, and, for a
tensor whose setting differs between runs, one call per run on that run's slice (contiguous:
the run axis is first), grouped by the run's values.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

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
# One call of the kernel: (beta1, beta2, eps, the tensors it updates, the run whose slices it
# updates: None for the whole tensors, every run at once)
Call = tuple[float, float, float, list[int], int | None]


def at(setting: Setting, k: int) -> float:
    """Run k's value of a setting."""
    return setting[k] if isinstance(setting, tuple) else setting


def per_tensor(value: Setting | list[Setting], n: int) -> list[Setting]:
    """One setting for each of n tensors: a list is each tensor's own; a float (or a tuple of one
    per run) is every tensor's."""
    if isinstance(value, list):
        return value
    return [float(value) if not isinstance(value, tuple) else value] * n


def plan(beta1: Sequence[Setting], beta2: Sequence[Setting], eps: Sequence[Setting], runs: int) -> list[Call]:
    """The fused kernel's calls that give each tensor i, in each of the ensemble's `runs` runs, its
    own beta1[i], beta2[i] and eps[i]: one per setting shared by every run, one per run and setting
    of the tensors whose settings differ between runs."""
    whole: dict[tuple, list[int]] = {}
    each: list[int] = []
    for i, key in enumerate(zip(beta1, beta2, eps)):
        if any(isinstance(x, tuple) for x in key):
            each.append(i)
        else:
            whole.setdefault(key, []).append(i)
    calls: list[Call] = [(*key, idx, None) for key, idx in whole.items()]
    for k in range(runs if each else 0):
        found: dict[tuple, list[int]] = {}
        for i in each:
            found.setdefault((at(beta1[i], k), at(beta2[i], k), at(eps[i], k)), []).append(i)
        calls += [(*key, idx, k) for key, idx in found.items()]
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
    run (`Setting`): the
    fused kernel takes one of each, so it runs once per distinct setting (`plan`). calls: the
    plan, where the caller made it once (its settings do not change from step to step)."""
    if not isinstance(step, Tensor):
        step = torch.tensor(float(step), device=out[0].device if out else None)
    if calls is None:
        n = len(out)
        calls = plan(per_tensor(beta1, n), per_tensor(beta2, n), per_tensor(eps, n), out[0].shape[0] if n else 0)
    for b1, b2, e, idx, k in calls:
        pick = (lambda ts: [ts[i] for i in idx]) if k is None else (lambda ts: [ts[i][k] for i in idx])  # noqa: E731
        _adam_directions_(pick(out), pick(grads), pick(m), pick(v), step, b1, b2, e)


def _adam_directions_(out, grads, m, v, step: Tensor, beta1: float, beta2: float, eps: float) -> None:
    global use_fused
    grads = [g if g.is_contiguous() else g.contiguous() for g in grads]
    if use_fused and hasattr(torch, "_fused_adam_"):
        try:
            for o in out:
                o.zero_()
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

"""What a saved training state may hold: the checks a checkpoint passes before it is resumed.

A checkpoint is untrusted input (`sweeps/checkpoint.py`): `weights_only=True` keeps it from
running code, not from holding any numbers at all. Every field is checked against what training
this job can produce before anything is restored (`Ensemble.check_state`, `check_finished`), so
that a state that passes resumes exactly as the job would have gone on, and one that does not is
rejected with the reason, never half restored.
"""

from __future__ import annotations

import math
import reprlib

import torch
from torch import Tensor

from lrtransfer.training.results import RunResult

class DamagedState(ValueError):
    """A saved training state that no training of this job reaches; its message says which field."""


# A saved value as a message shows it: a few items of a few levels, whatever the file holds (a
# list that holds one list many times over is a few kB on disk and gigabytes as full text)
_BRIEF = reprlib.Repr()
_BRIEF.maxlevel, _BRIEF.maxlist, _BRIEF.maxtuple, _BRIEF.maxdict, _BRIEF.maxother = 2, 8, 8, 4, 60


def brief(x) -> str:
    return _BRIEF.repr(x)


def require(ok: bool, why: str) -> None:
    if not ok:
        raise DamagedState(why)


def is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)


def is_finite(x) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def check_finished(entries, keys: list, steps: int) -> list[RunResult]:
    """The saved results of the runs before the resumed chunk, each well-formed for the run
    (`run_key`) it stands for: they go into the record as they are, unchecked by training."""
    require(isinstance(entries, list) and len(entries) == len(keys),
             f"done holds {len(entries) if isinstance(entries, list) else type(entries).__name__} results "
             f"for the {len(keys)} runs before its chunk")
    out = []
    for i, (entry, key) in enumerate(zip(entries, keys)):
        require(isinstance(entry, dict), f"done[{i}] is a {type(entry).__name__}")
        r = RunResult(**entry)
        why = result_fault(r, key, steps)
        require(why is None, f"done[{i}]: {why}")
        out.append(r)
    return out


def result_fault(r: RunResult, key: tuple, steps: int) -> str | None:
    """Why `r` cannot be the result of the run `key` trained `steps` steps (None: it can be)."""
    log2_lr, seed, *grid = key
    grid = dict(zip(grid[::2], grid[1::2]))
    if (r.log2_lr, r.lr, r.seed, r.grid) != (round(log2_lr, 10), 2.0**log2_lr, seed, grid):
        return f"log2_lr={brief(r.log2_lr)}, lr={brief(r.lr)}, seed={brief(r.seed)}, grid={brief(r.grid)} are not its run's"
    if not isinstance(r.diverged, bool):
        return f"diverged={brief(r.diverged)} is not a boolean"
    if r.diverged:
        if not (is_int(r.diverged_step) and 0 <= r.diverged_step < steps):
            return f"diverged_step={brief(r.diverged_step)} is not a step of a {steps}-step run"
        if (r.final_loss, r.eval_loss, r.eval_acc) != (None, None, None):
            return "a diverged run with a final_loss, eval_loss or eval_acc"
    else:
        if r.diverged_step is not None:
            return f"diverged_step={brief(r.diverged_step)} for a run that did not diverge"
        for name in ("initial_loss", "final_loss"):
            if not is_finite(getattr(r, name)):
                return f"{name}={brief(getattr(r, name))} is not a finite number"
        for name in ("eval_loss", "eval_acc"):
            if getattr(r, name) is not None and not is_finite(getattr(r, name)):
                return f"{name}={brief(getattr(r, name))} is not a finite number"
    if r.initial_loss is not None and not is_finite(r.initial_loss):
        return f"initial_loss={brief(r.initial_loss)} is not a finite number"
    at, losses = r.history_step, r.history_loss
    if not (isinstance(at, list) and isinstance(losses, list) and len(at) == len(losses) and at
            and all(map(is_int, at)) and at == sorted(set(at)) and 0 <= at[0] and at[-1] < steps):
        return "history_step, history_loss are not a curve's steps and losses"
    if not all(x is None and r.diverged or is_finite(x) for x in losses):
        return "history_loss holds a loss that is not a finite number"
    return None


def is_tensor_like(x, like: Tensor) -> bool:
    """Whether `x` is a tensor of `like`'s shape and dtype (on any device: checkpoints load onto the CPU)."""
    return isinstance(x, Tensor) and x.shape == like.shape and x.dtype == like.dtype


def finite_for(t: Tensor, live: Tensor, K: int) -> bool:
    """Whether a saved tensor is finite for the runs still training (those that go on from its
    numbers; a frozen run's are not read), or throughout where it has no run axis first."""
    return bool(torch.isfinite(t[live.to(t.device)] if t.dim() and t.shape[0] == K else t).all())


def tensors_in(state) -> list[Tensor]:
    if isinstance(state, Tensor):
        return [state]
    if isinstance(state, dict):
        state = list(state.values())
    return [t for v in state for t in tensors_in(v)] if isinstance(state, (list, tuple)) else []


def described(x) -> str:
    return f"({x.dtype}, {tuple(x.shape)})" if isinstance(x, Tensor) else f"(a {type(x).__name__})"

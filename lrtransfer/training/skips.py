"""A step whose forward did not use a trained tensor, for some runs or all: a user's module that
takes a branch on some steps only, or holds a layer it never calls (model=custom).

The reference is a plain PyTorch loop for each run: `opt.zero_grad(set_to_none=True);
loss.backward(); opt.step()`. A parameter the forward did not use has no gradient there, and
torch's optimizers skip it that step: no update, no weight decay, its moments and momentum
left as they are, and its step count (Adam's bias correction) counts only the steps that used
it. The engine does the same, for each run and tensor:

- a tensor a run has not used yet, skipped by that run now, gets a zero gradient and no decay:
  its optimizer state is still zero, so the ordinary step leaves it and its state as they are
  (a layer the forward never calls stays as it starts, at no cost);
- a tensor used at every step so far, used now, takes the ordinary step;
- any other (skipped after a use, or used after a skip) is set aside before the ordinary step
  and given its own: the optimizer's `skip_update`, each run at its own step count. Only an
  optimizer that has one, under a parameterization whose update is each tensor's rate times its
  own direction (`Parameterization.scales_directions`), can; elsewhere (Muon, the spectral
  condition) the job stops with one line naming the parameter, rather than train otherwise than
  the module says.

The engine's ensemble counts the steps each run used each tensor (`uses`, None while every run
used every tensor at every step; checkpoints carry it) and hands the step what it works on
(`Trained`: the tensors, their slots and copies, the optimizer, the parameterization), never
itself. A CUDA graph replays one step's kernels without
running its Python, so it cannot skip: once a tensor was skipped the ensemble's steps run eagerly
(and a module whose use of its tensors first changes after the graph was captured, past its
first few steps, is replayed as captured: `engine.graphs=never` for such a module on a GPU).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from lrtransfer.errors import ConfigError
from lrtransfer.nn import Slot
from lrtransfer.options.param import Parameterization


@dataclass(frozen=True)
class Trained:
    """What a step updates: each slot's tensor (the master), its bf16 copy (None: the master is what
    the forward reads), the optimizer that holds their state, the parameterization that sets their
    rates and decays, the optimizer's per-run options (weight decay), and the model, as a refusal
    names it (`model.target=...`, or "the model")."""

    slots: Sequence[Slot]
    tensors: Sequence[Tensor]
    copies: Sequence[Tensor | None]
    opt: Any
    param: Parameterization
    optim: Any
    who: str


def skipped(slots: Sequence[Slot], grads: Sequence[Tensor | None], some: dict, every_run: Tensor
            ) -> list[Tensor | None] | None:
    """Per slot: None where every run's forward used its tensor this step, else a (K,) bool on the
    host, True for each run whose forward did not; None when every run used every tensor. A tensor
    no run used has no gradient (under vmap the runs are one graph); the model says which runs did
    not use one where they went one at a time (`some`: its `Custom.skipping()`, {(id(atom), name): (K,)});
    `every_run`: (K,) all True."""
    out = [some.get((id(s.atom), s.name), every_run if g is None else None) for s, g in zip(slots, grads)]
    return out if any(m is not None for m in out) else None


def without_skipped(decays: list[Tensor] | None, skips: Sequence[Tensor | None] | None) -> list[Tensor] | None:
    """Each slot's (K,) decays, 0 for a run that skipped its tensor this step (new tensors: a
    parameterization may hand one tensor to several slots)."""
    if decays is None or skips is None:
        return decays
    return [d if s is None else torch.zeros_like(d) if bool(s.all()) else d * ~s.to(d.device)
            for d, s in zip(decays, skips)]


def step(t: Trained, grads: Sequence[Tensor | None], skips: list[Tensor | None] | None, *, uses: Tensor | None,
         done: int, alive: Tensor, lr: Tensor, factor, update: Callable[[list[Tensor]], None]) -> Tensor:
    """The step's update where some run skipped some tensor, now or before (see the module's docstring).
    uses: (n slots, K) steps each run used each tensor before this one (None: all `done` of them);
    alive: (K,) bool on the host, False for a frozen run; lr: (K,) each run's LR (0 once frozen);
    update(grads): the ordinary update of every tensor. Returns the uses after this step."""
    if torch.cuda.is_available() and torch.cuda.is_current_stream_capturing():
        raise RuntimeError("a step that skips a tensor for some runs is not replayed as a graph")
    n, K, device = len(t.slots), alive.numel(), lr.device
    used = torch.ones(n, K, dtype=torch.bool)
    for i, s in enumerate(skips or ()):
        if s is not None:
            used[i] = ~s
    before = uses if uses is not None else torch.full((n, K), done, dtype=torch.long)
    ordinary = (used & (before == done)) | (~used & (before == 0)) | ~alive
    own = [i for i in range(n) if not bool(ordinary[i].all())]
    if own:  # the first of them, at its first run whose step is not the ordinary one
        _check_can_skip(t, own[0], bool(used[own[0], int((~ordinary[own[0]]).nonzero()[0])]), done)
    grads = [torch.zeros_like(w) if g is None else g for g, w in zip(grads, t.tensors)]
    held = {i: [x.clone() for x in (t.tensors[i], *t.opt.tensor_state(i))] for i in own}
    update(grads)
    if own:
        rates = t.param.rates(t.slots, lr * factor)
        decays = t.param.decays(t.slots, lr, factor, t.optim)
        for i in own:
            for dst, src in zip((t.tensors[i], *t.opt.tensor_state(i)), held[i]):
                dst.copy_(src)
            runs = (used[i] & alive).to(device)  # a frozen run stays as it was frozen
            t.opt.skip_update(i, grads[i], runs, (before[i] + used[i]).to(device), rates[i],
                              None if decays is None else decays[i])
            if t.copies[i] is not None:
                t.copies[i].copy_(t.tensors[i])
    return before + used


def _check_can_skip(t: Trained, i: int, now: bool, done: int) -> None:
    """Refuse in one line, naming the parameter, where the parameterization or the optimizer cannot
    skip a tensor for one step as torch's optimizers do."""
    if t.param.scales_directions and hasattr(t.opt, "skip_update"):
        return
    slot = t.slots[i]
    name = getattr(slot.atom, "user_names", {}).get(slot.name, slot.name)
    what, fix = ((f"optim={t.optim.name}", "use optim=adam or sgd") if t.param.scales_directions else
                 (f"param={t.param.name}", "use param=standard, mup, equalized or completep"))
    raise ConfigError(f"{t.who} uses {name} at some steps and not at others ({'used' if now else 'skipped'} at step "
                      f"{done + 1}, {'skipped' if now else 'used'} before), which {what} cannot skip for a "
                      f"step as torch's optimizers skip a parameter without a gradient; {fix}, or a forward that "
                      "uses it at every step (or never)")

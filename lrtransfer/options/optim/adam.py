"""Adam (Kingma & Ba), as a direction: m_hat / (sqrt(v_hat) + eps).

Each tensor has its own beta1, beta2 and epsilon: the options' values times the
parameterization's multipliers (`Slot.beta1_mult` scales 1 - beta1, `eps_mult` epsilon), and
each may differ between the runs of a job (`grid.optim.beta1=[...]`, `PER_RUN`): `settings`
makes them, `kernels.plan` the fused kernel's calls that apply them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, ClassVar

import torch
from torch import Tensor

from lrtransfer.nn.linalg import run_view
from lrtransfer.options.optim import passes
from lrtransfer.options.optim import along
from lrtransfer.options.optim.kernels import (EVERY_RUN, CountsSteps, Setting, adam_directions_, adam_update_, at, per_run,
                                             plan)
from lrtransfer.options.schema import ADAPTIVE, DecayScaling, Grid, added, in_unit, non_negative, positive, scaled_beta


if TYPE_CHECKING:
    from lrtransfer.nn import Slot


@dataclass
class AdamOptions:
    UPDATE: ClassVar[str] = ADAPTIVE
    # may vary across a job's runs (grid.optim.weight_decay=[...])
    PER_RUN: ClassVar[tuple[str, ...]] = ("weight_decay", "beta1", "beta2", "eps")
    LR_GRID: ClassVar[Grid] = Grid(-14, -4)  # log2 learning rates every job trains, unless overridden

    name: str = "adam"
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8
    weight_decay: float = 0.0
    decay_scaling: DecayScaling = DecayScaling.independent
    decay_1d: bool = added(True)  # false: biases and norm gains do not decay (nanoGPT's and GPT-2's recipes)

    def check(self) -> None:
        check_adam(self)


def check_adam(options) -> None:
    """Adam's keys, for every optimizer that has them (Muon's AdamW part)."""
    in_unit("optim.beta1", options.beta1)
    in_unit("optim.beta2", options.beta2)
    positive("optim.eps", options.eps)
    non_negative("optim.weight_decay", options.weight_decay)


OPTIONS = AdamOptions


def settings(options, slots: Sequence[Slot]) -> tuple[list[Setting], list[Setting], list[Setting]]:
    """Each tensor's beta1, beta2 and epsilon (`kernels.Setting`: a float, or a tuple of one per run
    where the option or the tensor's `hp.*` value is per run): the tensor's own betas where it has
    them (`Slot.beta1`: hp.<role>.beta1), else the options', with the tensor's multipliers."""
    def runs(value) -> Setting:  # a per-run value arrives as a (K,) float64 tensor
        return tuple(value.tolist()) if isinstance(value, Tensor) else float(value)

    def each(value: Setting, f) -> Setting:
        return tuple(f(x) for x in value) if isinstance(value, tuple) else f(value)

    b1, b2 = runs(options.beta1), runs(options.beta2)
    own = lambda x, shared: shared if x is None else runs(x)  # noqa: E731
    return ([each(own(s.beta1, b1), lambda b, s=s: scaled_beta(b, s.beta1_mult)) for s in slots],
            [each(own(s.beta2, b2), lambda b, s=s: scaled_beta(b, s.beta2_mult)) for s in slots],
            [eps_of(runs(options.eps), runs(s.eps_mult)) for s in slots])


def eps_of(eps: Setting, mult: Setting) -> Setting:
    """A tensor's epsilon: the option's times its multiplier (hp.<role>.eps_mult in it), either per run."""
    if not isinstance(eps, tuple) and not isinstance(mult, tuple):
        return eps * mult
    n = len(eps) if isinstance(eps, tuple) else len(mult)
    return tuple(at(eps, k) * at(mult, k) for k in range(n))


class Optimizer(CountsSteps):
    def __init__(self, options: AdamOptions, slots: Sequence[Slot]) -> None:
        tensors = [s.tensor for s in slots]
        self.beta1, self.beta2, self.eps = settings(options, slots)  # each tensor's, each a float or per run
        self.m = [torch.zeros_like(t) for t in tensors]
        self.v = [torch.zeros_like(t) for t in tensors]
        self.tensors = tensors
        self._split = passes.split(tensors)  # (tensors updated for every run at once, run by run)
        # the fused kernel's calls (`kernels.plan`), made once: for every tensor (`directions`), for
        # the small ones (`update`); and the large ones' settings, shared by every run or per run
        runs = tensors[0].shape[0] if tensors else 0
        pick = passes.pick
        self._calls = plan(self.beta1, self.beta2, self.eps, runs, small=self._split[0])
        self._small = tuple(pick(x, self._split[0]) for x in (self.beta1, self.beta2, self.eps))
        self._small_calls = plan(*self._small, runs, small=range(len(self._split[0])))
        self._large = list(zip(*(pick(x, self._split[1]) for x in (self.beta1, self.beta2, self.eps))))
        self._large_shared = not any(isinstance(x, tuple) for key in self._large for x in key)
        small = set(self._split[0])
        # where `directions` writes; `update` needs it only for the small tensors
        self._scratch = [torch.empty_like(t) if i in small else None for i, t in enumerate(tensors)]
        self.t = 0
        self._step = torch.zeros((), device=tensors[0].device if tensors else None)  # the fused kernels read t here

    @property
    def state(self) -> list[Tensor]:
        return self.m + self.v

    @property
    def scratch(self) -> list[Tensor]:
        """The direction of every tensor (`directions`): the large ones' made on first use."""
        if any(d is None for d in self._scratch):
            self._scratch = [torch.empty_like(t) if d is None else d for d, t in zip(self._scratch, self.tensors)]
        return self._scratch

    @torch.no_grad()
    def directions(self, grads: Sequence[Tensor], advance: bool = True) -> list[Tensor]:
        """advance False: the step was counted already (`advance`, outside a CUDA graph's step)."""
        if advance:
            self.advance()
        adam_directions_(self.scratch, grads, self.m, self.v, self._step, self.beta1, self.beta2, self.eps,
                         calls=self._calls)
        return self.scratch

    def tensor_state(self, i: int) -> tuple[Tensor, ...]:
        """Tensor i's moments."""
        return self.m[i], self.v[i]

    @torch.no_grad()
    def skip_update(self, i: int, grad: Tensor, used: Tensor, steps: Tensor, rate: Tensor, decay: Tensor | None) -> None:
        """Tensor i's step for the runs `used` ((K,) bool) alone, each at its own step count `steps`
        ((K,): the steps that used it, this one included), as torch.optim.Adam (AdamW with a decay)
        steps a parameter that has a gradient at some steps only; the other runs' tensor and
        moments stay as they are. rate, decay (None: none): (K,) on the device (`training/skips.py`)."""
        w, m, v = self.tensors[i], self.m[i], self.v[i]
        g, keep = passes.like(grad, w), run_view(used, w)
        shaped = lambda x: run_view(x.to(w.dtype), w)  # noqa: E731
        count = shaped(steps.clamp(min=1))
        b1, b2, eps = (per_run(x[i], w) for x in (self.beta1, self.beta2, self.eps))
        m1 = m.lerp(g, 1 - b1)
        v1 = v.mul(b2)
        v1 = v1.addcmul_(g, g, value=1 - b2) if not isinstance(b2, Tensor) else v1.addcmul_(g * (1 - b2), g)
        denom = v1.sqrt().div_((1 - b2**count).sqrt()).add_(eps)
        w1 = w if decay is None else w * (1 - shaped(decay))
        w1 = w1 - shaped(rate) / (1 - b1**count) * m1 / denom
        for dst, new in ((w, w1), (m, m1), (v, v1)):
            dst.copy_(torch.where(keep, new, dst))

    @torch.no_grad()
    def update(self, grads: Sequence[Tensor], rates, decays, runs: Sequence[int], copies=None) -> None:
        """The whole step, where each update is a rate times Adam's direction: for each run k and
        tensor i, w_i[k] <- (1 - decays[i][k]) w_i[k] - rates[i][k] m_hat / (sqrt(v_hat) + eps_i).
        rates, decays (or None): per tensor, a (K,) host tensor; runs: the live runs, those the
        large tensors are updated for, each in one fused pass (`passes`); copies: per tensor a
        lower-precision copy to write from it, or None."""
        self.advance()
        pick = passes.pick
        copies = copies if copies is not None else [None] * len(self.tensors)
        small, large = self._split
        if small:  # every run at once, the direction path's way
            ws = pick(self.tensors, small)
            gs = [passes.like(g, w) for g, w in zip(pick(grads, small), ws)]
            ds, ms, vs = pick(self._scratch, small), pick(self.m, small), pick(self.v, small)
            calls = [c for c in self._small_calls if c.how != EVERY_RUN]
            adam_directions_(ds, gs, ms, vs, self._step, *self._small, calls=calls)
            fused = [i for c in calls for i in c.tensors]
            passes.whole(pick(ws, fused), pick(ds, fused), pick(pick(rates, small), fused),
                         pick(pick(decays, small), fused), pick(pick(copies, small), fused))
            for c in (c for c in self._small_calls if c.how == EVERY_RUN):
                # the tensors whose settings differ between runs: their whole step in one pass
                idx = c.tensors
                along.update_(*(pick(x, idx) for x in (ws, gs, ms, vs)), self._step, c.runs,
                              pick(pick(rates, small), idx), pick(pick(decays, small), idx),
                              pick(pick(copies, small), idx))
        if not large:
            return
        w, m, v, g, c = (passes.runs_of(pick(x, large)) for x in (self.tensors, self.m, self.v, grads, copies))
        r, dec = passes.floats(pick(rates, large)), passes.floats(pick(decays, large))
        for k in runs:
            keys = self._large if self._large_shared else [tuple(at(x, k) for x in key) for key in self._large]
            for rate, decay, (b1, b2, eps), idx in passes.groups(k, r, dec, keys):
                adam_update_([w[i][k] for i in idx], [passes.like(g[i][k], w[i][k]) for i in idx],
                             [m[i][k] for i in idx], [v[i][k] for i in idx], self._step,
                             b1, b2, eps, rate, decay)
            passes.write_copies(k, w, c)

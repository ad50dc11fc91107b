"""The parameterization hook object.

A parameterization is a small object that decides, for every weight of a model:
its initial distribution, the forward multiplier applied at run time, its
per-tensor learning-rate multiplier, and how the base optimizer's direction
becomes an update. The model and the engine call these hooks and nothing else, so
a new parameterization is one module (its options and one subclass) and one YAML
file; the engine never branches on a parameterization's name.

A parameterization sees its own options, the width and the kind of update the
optimizer makes (`schema.ADAPTIVE`, `GRADIENT`, ...), never the whole config: the
rules that differ between optimizers key on the kind, so a new optimizer of a
known kind works under every parameterization.

The base class *is* the standard parameterization (SP): PyTorch's default init,
no multipliers, one global learning rate. Subclasses override only the hooks
whose rule differs.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

from lrtransfer.nn.linalg import run_view
from lrtransfer.nn import Atom, Module, Residual, Sequential, Slot, is_hidden_matrix, is_one_dimensional
from lrtransfer.options.param.sde import Rule
from lrtransfer.options.param.tuning import Tuning, on, product
from lrtransfer.options.schema import ADAPTIVE, ORTHOGONALIZED, ConfigError




def tensor_update(update: str, atom: Atom, name: str) -> str:
    """The kind of update one tensor gets from an optimizer whose updates are `update`.

    An ORTHOGONALIZED optimizer (Muon) orthogonalises the hidden matrices only and updates
    every other tensor adaptively (AdamW), so a rule keyed on the kind (muP's per-tensor LR)
    looks each tensor's kind up here, and the optimizer and the parameterization agree.
    """
    if update == ORTHOGONALIZED and not is_hidden_matrix(atom, name):
        return ADAPTIVE
    return update


# model.residual -> (skip, branch) for L blocks: z -> skip * z + branch * block(z)
RESIDUAL_RULES = {
    "one": lambda L: (1.0, 1.0),  # the lecture notes' ResNet-S
    "sqrt_depth": lambda L: (1.0, L**-0.5),  # depth-muP
    "convex": lambda L: (1.0 - 1.0 / L, 1.0 / L),  # the modular norm (Modula)
}


class Parameterization:
    name = "standard"
    base_width: int | None = None  # the width its rules are relative to (muP's); None: no base (SP)
    attention_rule = ""  # its attention rule in words, for notes (empty: "param=NAME's attention rule")
    adaptive_only = False  # its rules are for Adam-type updates (ADAPTIVE) alone: any other refused

    # The job's per-module hyperparameters (`hp.<role>.<name>`), applied on top of this rule's own
    # multipliers (`slots`, `decays`, `initialize`); none by default. Set by the builder (`tuned`).
    tune: Tuning = Tuning()

    def __init__(self, options, *, width: int, update: str, depth: int | None = None,
                 batch_size: int | None = None, steps: int | None = None) -> None:
        if self.adaptive_only and update != ADAPTIVE:
            raise ConfigError(f"param={self.name} has rules for Adam-type optimizers only (their updates are "
                              f"{ADAPTIVE}), not for one whose updates are {update}; use optim=adam")
        self.options, self.width, self.update, self.depth = options, width, update, depth
        # param.sde_rule for the job's batch and steps (`sde.py`): its factors on every tensor's LR,
        # betas, epsilon and decay, on top of this rule's own (all 1 without the rule or at its base)
        self.sde = Rule.of(options, batch_size, steps)
        self._copies: dict = {}  # per-run values on a device (`tuning.on`)

    def tuned(self, tune: Tuning) -> Parameterization:
        """This parameterization with the job's `hp.*` values (each a float, or per run) on top."""
        self.tune = tune
        return self

    # ---- hooks the model builder calls
    def residual_scales(self, depth: int) -> tuple[float, float]:
        """(skip, branch) multipliers of a residual block: z -> skip*z + branch*block(z)."""
        return RESIDUAL_RULES["one"](depth)

    def residual_stack(self, blocks: Sequence[Module], *, rule: str = "auto", mass: float = 1.0) -> Sequential:
        """The L = len(blocks) residual blocks of a network, applied in order, each
        wrapped by the residual rule: `rule` when it names one (the model's
        `residual` option, to compare rules under one parameterization), else this
        parameterization's own (`residual_scales`). Architectures build their
        residual trunk with this, so a rule that also re-weights the blocks' masses
        (the modular norm's tare) sees the whole trunk at once; `mass` is the trunk's
        own total mass, which only such a rule reads."""
        L = len(blocks)
        skip, branch = self.residual_scales(L) if rule == "auto" else RESIDUAL_RULES[rule](L)
        for block in blocks:
            for atom in block.atoms():
                atom.in_branch = True
        return Sequential([Residual(b, skip=skip, branch=branch) for b in blocks])

    def scales_depth(self) -> bool:
        """Whether this rule multiplies residual branches by a depth rule of its own (a published
        model must then have branch outputs to apply it to, `nn/roles.find_branch_outputs`); SP: no."""
        return False

    def attention_scale(self, d_head: int) -> float:
        """The factor on attention logits q.k; SP: 1/sqrt(d_head)."""
        return 1.0 / math.sqrt(d_head)

    def attention_output_mult(self, d_head: int):
        """T -> the factor on attention's output for sequences of T tokens (u-muP's unit-scaled
        attention), or None; SP: None (no factor)."""
        return None

    def attention_qkv_mult(self) -> float:
        """The factor on q, k and v before attention (part of the compound's forward); SP: 1."""
        return 1.0

    def rescales_attention(self) -> bool:
        """Whether this rule for attention differs from SP's: a model can apply it only where it
        builds the attention itself (a user's module says so when it cannot, `inspect`)."""
        d = 64
        return (self.attention_scale(d), self.attention_qkv_mult()) != (
            Parameterization.attention_scale(self, d), Parameterization.attention_qkv_mult(self))

    # ---- forward multipliers, set once on the built model
    def multipliers(self, atom: Atom) -> tuple[float | Tensor, float | Tensor]:
        """(weight_mult, bias_mult): the atom computes weight_mult * x W + bias_mult * b.
        Each a float, or a (K,) tensor where it follows a per-run option (muP's output_mult)."""
        return 1.0, 1.0

    def set_multipliers(self, model: Module) -> None:
        """Each atom's forward multipliers; the last layer of each of the model's own residual branches
        (`Atom.branch_output`, a published model's) also carries the branch multiplier, exactly
        as multiplying the branch: y = x W + b is its last operation."""
        outputs = [a for a in model.atoms() if a.branch_output]
        skip, branch = self.residual_scales(len(outputs)) if outputs else (1.0, 1.0)
        if skip != 1.0:
            raise ConfigError(f"param={self.name}'s residual rule multiplies the skip connection by {skip:.4g}: "
                              "a model's own residual additions cannot be changed from outside it")
        for atom in model.atoms():
            w, b = self.multipliers(atom)
            if atom.branch_output:
                atom.branch_mult = branch
                w, b = w * branch, b * branch
            atom.set_multipliers(w, b)

    # ---- initialisation, one run at a time so that a run's weights depend on its seed only
    def init_weight(self, atom: Atom, gen: torch.Generator) -> Tensor:
        """One run's weight, (fan_in, fan_out). SP: PyTorch's own init of the layer
        (`Atom.torch_init`): nn.Linear's kaiming_uniform(a=sqrt(5)), nn.Embedding's N(0, 1)."""
        return atom.torch_init(gen)

    def init_bias(self, atom: Atom, gen: torch.Generator) -> Tensor:
        """One run's bias, (fan_out,). SP: U(-1/sqrt(fan_in), 1/sqrt(fan_in)), as nn.Linear."""
        bound = 1.0 / math.sqrt(atom.fan_in)
        return torch.empty(atom.fan_out).uniform_(-bound, bound, generator=gen)

    def from_own(self, atom: Atom, name: str, own: Tensor) -> Tensor | None:
        """One run's weight or bias from the model's own init of it (`Atom.own_draw`, storage shape):
        SP trains the model as published, so it keeps it. None: this rule draws it itself
        (`init_weight`, `init_bias`), as a parameterization that defines its own init does."""
        return own

    def init_tensor(self, atom: Atom, name: str, gen: torch.Generator) -> Tensor:
        """One run's initial value of the atom's tensor `name`, in storage shape (without K)."""
        own = atom.own_init(name)
        if own is not None:
            return own
        drawn = atom.own_draw(name)
        mine = self.from_own(atom, name, drawn) if drawn is not None else None
        if mine is not None:
            return mine
        if name == "weight":
            return atom.from_matrix(self.init_weight(atom, gen))
        return self.init_bias(atom, gen)

    @torch.no_grad()
    def initialize(self, model: Module, seeds: Sequence[int]) -> None:
        """Initialise run k from seeds[k]; runs sharing a seed start identical (and share the model's
        own draws, where it starts from them: one construction of a published model per seed)."""
        for seed in dict.fromkeys(seeds):
            runs = [k for k, s in enumerate(seeds) if s == seed]
            gen = torch.Generator().manual_seed(seed)
            model.draw_own_init(seed, runs)
            for atom in model.atoms():
                for name, t in atom.trained():
                    value = self.init_tensor(atom, name, gen).reshape(t.shape[1:])
                    mult = self.tune.value(atom, name, "init_mult")  # hp.<role>.init_mult: a float or per run
                    for k in runs:
                        m = mult if not isinstance(mult, Tensor) else float(mult[k])
                        t[k].copy_(value if m is None else value * m)
        model.draw_own_init(None)

    # ---- learning rates and updates
    def lr_multiplier(self, atom: Atom, name: str) -> float:
        """Per-tensor learning-rate multiplier; SP: 1 for every tensor."""
        return 1.0

    def eps_multiplier(self, atom: Atom, name: str) -> float:
        """Per-tensor multiplier of Adam's epsilon. Adam's update is m / (sqrt(v) + eps): where a
        rule shrinks the gradients with the width, a fixed eps comes to dominate the update, so
        the rule shrinks eps with them (Everett et al. 2024). SP: 1."""
        return 1.0

    def wd_multiplier(self, atom: Atom, name: str) -> float:
        """Per-tensor multiplier of the weight decay (`decays`); SP: 1."""
        return 1.0

    def target_norm(self, slot: Slot) -> float | None:
        """The norm of the slot's update at LR 1, where the LR is a norm (the modular norm's share
        of a total target, the spectral condition's sqrt(fan_out/fan_in)); None where the LR
        multiplies the optimizer's direction as it comes (`lr_multiplier`)."""
        return None

    def slots(self, model: Module) -> list[Slot]:
        """Each trained tensor with its multipliers: this rule's, times the SDE rule's (`self.sde`), times
        the job's `hp.*` where set (`tune`)."""
        tune, sde = self.tune, self.sde
        return [Slot(atom, name, t, tune.times(self.lr_multiplier(atom, name) * sde.lr, atom, name, "lr_mult"),
                     tune.times(self.eps_multiplier(atom, name) * sde.eps, atom, name, "eps_mult"),
                     self.wd_multiplier(atom, name), wd_tuned=tune.times(1.0, atom, name, "wd_mult"),
                     beta1_mult=sde.beta, beta2_mult=sde.beta, beta1=tune.value(atom, name, "beta1"),
                     beta2=tune.value(atom, name, "beta2"))
                for atom in model.atoms() for name, t in atom.trained()]

    def rates(self, slots: Sequence[Slot], lr: Tensor) -> list[Tensor]:
        """Each slot's (K,) learning rate this step: the runs' lr (schedule applied) x its lr_mult
        (per run: rounded to lr's dtype first, as a float multiplier is)."""
        return [lr * on(s.lr_mult, lr.device, lr.dtype, self._copies) for s in slots]

    def updates(self, slots: Sequence[Slot], directions: Sequence[Tensor], lr: Tensor) -> list[Tensor]:
        """Map the base optimizer's directions to updates (w <- w - update).

        lr: (K,) this step's learning rate of each run (schedule applied). The
        directions are the optimizer's scratch tensors: scale them in place.
        """
        return [d.mul_(run_view(r, d)) for r, d in zip(self.rates(slots, lr), directions)]

    @property
    def scales_directions(self) -> bool:
        """Whether each update is the slot's rate (`rates`) times the optimizer's direction, as this
        class's `updates` makes it: then an optimizer that can (`Optimizer.update`) applies the
        direction, the rate, the decay and the update in one pass over each run's tensors. A rule
        that overrides `updates` (the modular norm, spectral) keeps its own pass, never this one."""
        return type(self).updates is Parameterization.updates

    def notes(self, model: Module) -> list[str]:
        """What this rule cannot do to a user's module from outside it (model=custom), for `inspect`; SP: nothing."""
        return []

    def state_dict(self) -> dict:
        """What the parameterization carries from step to step (saved in checkpoints); SP: nothing."""
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass

    def decay_mults(self, slots: Sequence[Slot], optim) -> list[float]:
        """Each slot's factor on the weight decay by this rule: its wd_mult, 0 for a bias or norm gain
        under `decay_1d: false`. (A tensor the forward did not use at a step does not decay that step:
        `training/skips.py`.)"""
        keep_1d = getattr(optim, "decay_1d", True)
        return [s.wd_mult if keep_1d or not is_one_dimensional(s) else 0.0 for s in slots]

    def decay_factors(self, slots: Sequence[Slot], optim) -> list[float]:
        """Each slot's factor on the weight decay in the formula of `optim.decay_scaling` (`decays`):
        this rule's (`decay_mults`) times the SDE rule's, which keeps the per-step decay x kappa."""
        mults, rule = self.decay_mults(slots, optim), self.sde.decay(optim.decay_scaling.value)
        return mults if rule == 1.0 else [w * rule for w in mults]

    def decays(self, slots: Sequence[Slot], lr: Tensor, factor: float, optim) -> list[Tensor] | None:
        """Decoupled weight decay of each tensor, (K,) per slot: w <- (1 - decay) * w.

        lr: (K,) each run's base learning rate (0 for a frozen run, which must not
        decay either); factor: the schedule's factor at this step; optim: the
        optimizer's options (`weight_decay`, `decay_scaling`). With
        `decay_scaling: independent` (default) decay = wd * wd_mult * factor, so an LR
        sweep does not also sweep the decay; with `lr` it is lr * lr_mult * wd * wd_mult *
        factor, as torch's AdamW with each tensor's own LR and decay. None: no decay.

        `weight_decay` may be one value per run (`grid.optim.weight_decay`): a (K,)
        float64 tensor, combined with the factors in float64 and rounded once, as a
        Python scalar is, so each run decays exactly as a job with its value would.
        With `decay_1d: false` biases and norm gains (`is_one_dimensional`) do not decay.
        """
        wd = optim.weight_decay
        # this rule's factor and the SDE rule's, times hp.<role>.wd_mult (after the rules: a rule that replaces
        # its own keeps it); per-run values on lr's device, copied once (`tuning.on`): a step replayed as a
        # CUDA graph copies none
        dev = lr.device
        mults = [w if isinstance(s.wd_tuned, float) and s.wd_tuned == 1.0 else w * on(s.wd_tuned, dev, cache=self._copies)
                 for s, w in zip(slots, self.decay_factors(slots, optim))]
        with_lr = optim.decay_scaling.value == "lr"
        if not isinstance(wd, Tensor) and not any(isinstance(x, Tensor) for x in mults) \
                and not (with_lr and any(isinstance(s.lr_mult, Tensor) for s in slots)):
            if not wd:
                return None
            if with_lr:
                return [lr * (factor * wd * s.lr_mult * w) for s, w in zip(slots, mults)]
            alive = (lr > 0).to(lr.dtype)
            shared = alive * (factor * wd)
            return [shared if w == 1 else alive * (factor * wd * w) for w in mults]
        # Some factor per run: the same products in float64, each rounded once to lr's dtype
        rounded = lambda terms: on(product(terms, lr.device), lr.device, lr.dtype)  # noqa: E731
        if with_lr:
            return [lr * rounded([factor, wd, on(s.lr_mult, dev, cache=self._copies), w]) for s, w in zip(slots, mults)]
        alive = (lr > 0).to(lr.dtype)
        shared = alive * rounded([factor, wd])
        return [shared if isinstance(w, float | int) and w == 1 else alive * rounded([factor, wd, w]) for w in mults]

"""The SDE rule for batch size and training horizon (`param.sde_rule`), an option of every parameterization.

Adam's SDE (Malladi et al. 2022) and Complete^(d) (Mlodozeniec et al. 2025) move the optimizer's
settings with the batch B and the examples (or tokens) trained D = B x steps, relative to a base
(B0, D0) where they were tuned:

    kappa = (B / B0) / (D / D0) = base_steps / steps     (D = B x steps: the batch cancels)

and then, with the LR's exponent e (`sde`: e = 1/2, the square-root rule):

    LR           x kappa^e
    1 - beta1    x kappa        (both moments' averaging windows stay a fixed fraction of training)
    1 - beta2    x kappa
    epsilon      x kappa^-e     (eps x LR fixed: the SDE sees Adam's epsilon only through it)
    decay/step   x kappa        (AdamW's timescale 1/(LR x decay) stays a fixed fraction of training)

The per-step decay is the weight's factor 1 - decay: `decay_scaling: independent` makes it wd, so
wd x kappa; `lr` makes it LR x wd (torch's coupled AdamW), so wd x kappa^(1-e) (x sqrt(kappa)
under `sde`, Complete^(d)'s). At e = 1/2 this is Complete^(d)'s rule term for term; a number e
changes the LR's exponent and, with it, epsilon's, and keeps every timescale's. Why these powers
and not the others an SDE argument could give (docs/axes.md, "The SDE rule").

At kappa = 1 every factor is exactly 1.0, so a job at its base is the job without the rule number
for number; `none` (the default) is no rule at all, and every job's id stays as it was.

The parameterization applies the factors (`Parameterization.slots`, `decay_factors`): the LR's and
epsilon's on each tensor's multipliers, the betas' as each tensor's multiplier of 1 - beta
(`Slot.beta1_mult`), which the optimizer turns into the tensor's own betas. An optimizer without
betas or epsilon (SGD) gets the LR and decay parts only, said once (`Rule.note`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from lrtransfer.options.schema import ConfigError, added, inert, scaled_beta

SDE_EXPONENT = 0.5  # `sde`: the square-root rule
TINY = 1e-12  # a beta the rule leaves at or below this is 0, rounding aside


@dataclass
class SdeOptions:
    """The rule's keys, a base of every parameterization's options (`param.sde_rule`, ...)."""

    name: str = ""  # each option's own (declared here so that it stays the first key, before the rule's)
    # none | sde | a number e (LR x kappa^e); a string so that a name and a number share one key
    sde_rule: str = added("none")
    # The base point (B0, steps0) the rule is relative to: where the LR, betas, eps and decay were tuned.
    # base_batch_size cancels out of kappa (D = batch x steps): it names the base for `inspect`.
    base_batch_size: int = inert(64)
    base_steps: int = added(300, idle_while=("sde_rule", "none"))


def exponent(rule: str) -> float | None:
    """The LR's exponent e of a rule (LR x kappa^e); None for `none`. Raises ConfigError for a rule
    that is neither a name nor a finite number."""
    rule = str(rule).strip()
    if rule == "none":
        return None
    if rule == "sde":
        return SDE_EXPONENT
    try:
        e = float(rule)
    except ValueError:
        e = math.nan
    if not math.isfinite(e):
        raise ConfigError(f"param.sde_rule={rule!r} is neither a rule nor a finite number; valid: none, sde "
                          "(LR x kappa^0.5, Complete^(d)'s), or a number e (LR x kappa^e, e.g. 0.31)")
    return e


@dataclass(frozen=True)
class Rule:
    """What `param.sde_rule` makes of one job's batch and steps: kappa and each setting's factor."""

    e: float | None  # the LR's exponent; None: no rule (every factor 1)
    kappa: float = 1.0

    @classmethod
    def of(cls, options, batch_size: int | None, steps: int | None) -> Rule:
        """The rule of a parameterization's options for a job of `steps` steps of `batch_size` (None:
        not known, as where a model is built without a job: no rule)."""
        e = exponent(getattr(options, "sde_rule", "none"))
        if e is None or steps is None:
            return cls(None)
        return cls(e, kappa(options.base_batch_size, options.base_steps, batch_size or options.base_batch_size, steps))

    @property
    def on(self) -> bool:
        return self.e is not None

    @property
    def lr(self) -> float:
        """x each tensor's LR (or, where the LR is a norm, its target: param=modular, spectral)."""
        return self.kappa**self.e if self.on else 1.0

    @property
    def eps(self) -> float:
        """x Adam's epsilon."""
        return self.kappa**-self.e if self.on else 1.0

    @property
    def beta(self) -> float:
        """x 1 - beta1 and x 1 - beta2."""
        return self.kappa if self.on else 1.0

    def decay(self, decay_scaling: str) -> float:
        """x the weight decay in the formula of `decay_scaling`, so that the per-step decay is x kappa."""
        if not self.on:
            return 1.0
        return self.kappa if decay_scaling == "independent" else self.kappa ** (1.0 - self.e)


def kappa(base_batch_size: int, base_steps: int, batch_size: int, steps: int) -> float:
    """(B / B0) / (D / D0) with D = B x steps: base_steps / steps, computed as that quotient so that
    a job at its base steps gets exactly 1.0 whatever its batch."""
    return base_steps / steps


def check(param, optim, *, batch_size: int, steps: int, grid: tuple[str, list[float]] | None = None,
          own: dict[str, list[float]] | None = None) -> None:
    """The rule's keys, and the betas it makes for this job's batch and steps: each in (0, 1) where
    the configured one is (a large kappa pushes 1 - beta past 1: one line naming the batch and steps
    that do it). `grid`: the job's per-run key and values (grid.optim.beta1=[...]), each checked;
    `own`: the tensors' own betas (hp.<role>.beta1: key -> its values), each checked too."""
    e = exponent(getattr(param, "sde_rule", "none"))
    for key in ("base_batch_size", "base_steps"):
        value = getattr(param, key, 1)
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise ConfigError(f"param.{key} must be a positive number of {'examples' if 'batch' in key else 'steps'}, "
                              f"got {value!r}")
    if e is None:
        return
    rule = Rule.of(param, batch_size, steps)
    for name in ("beta1", "beta2"):
        if not hasattr(optim, name):
            continue
        values = grid[1] if grid is not None and grid[0] == f"optim.{name}" else [getattr(optim, name)]
        keyed = [(f"optim.{name}", b) for b in values]
        keyed += [(k, b) for k, bs in (own or {}).items() if k.endswith(f".{name}") for b in bs]
        for key, beta in keyed:
            new = scaled_beta(beta, rule.beta)
            # 0 within rounding (beta1 0.9 at kappa 10: 2e-16) is 0: no moment left
            if TINY < new < 1 or (new == 0 and beta == 0):
                continue
            if new <= TINY:
                why = (f"pushes {name}={beta:g} to {0.0 if abs(new) <= TINY else new:.4g} (it stays in (0, 1) "
                       f"while train.steps > {math.floor(param.base_steps * (1 - beta) + 1e-9)}); use more steps, "
                       f"a smaller param.base_steps or {key} nearer 1")
            else:
                why = f"rounds {name}={beta:g} to 1; use fewer steps, a larger param.base_steps or a smaller value of {key}"
            raise ConfigError(f"param.sde_rule={param.sde_rule} at train.batch_size={batch_size}, train.steps={steps}: "
                              f"kappa = {rule.kappa:.4g} (base: {param.base_steps} steps of batch {param.base_batch_size}) "
                              f"{why}")


def note(rule: Rule, optim_name: str, has: dict[str, bool]) -> str | None:
    """What the rule leaves alone under an optimizer without some of Adam's settings (SGD: its
    betas and epsilon), said once; None where it applies whole."""
    if not rule.on:
        return None
    missing = [k for k in ("beta1", "beta2", "eps") if not has.get(k)]
    if not missing:
        return None
    return (f"param.sde_rule under optim={optim_name}: only its LR (x kappa^{rule.e:g}) and decay parts apply; "
            f"optim={optim_name} has no {', '.join(missing)} (SGD's momentum is left as set; SGD's own SDE rule "
            "scales the LR linearly: param.sde_rule=1)")

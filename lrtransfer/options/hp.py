"""Per-module hyperparameters, `hp.<role>.<name>`: the key space, its checks and which role a tensor has.

A researcher who tunes more than one global LR sets, for a whole role of tensors, each
tensor's LR multiplier, init multiplier, Adam betas and epsilon, and weight decay:

    roles   embedding   input weights (token and position tables, the input layer, a stem convolution)
            hidden      the width-to-width matrices
            readout     the output weight (the logits')
            vector      biases, norm gains and other one-dimensional tensors
            attention   the hidden matrices of the transformer's attention (Q, K, V, O)
            mlp         the hidden matrices of its MLP
            group       a published model's layers named by a glob (`model.group`), every tensor of them
    names   lr_mult     x the tensor's LR (on top of the parameterization's own multiplier)
            init_mult   x its initial value
            beta1       Adam's beta1 for it
            beta2       Adam's beta2 for it
            eps_mult    x Adam's epsilon for it (on top of the parameterization's)
            wd_mult     x its weight decay (on top of the parameterization's)

A tensor takes each value from the most specific role that sets it: `group`, then `attention` or
`mlp`, then its base role; unset everywhere, it keeps what it had (`hp.*` unset: every job, id and
record as before). A tensor no dimension of which grows with the width (a published model's
`fixed` one) has no base role. Every key may also differ between the runs of a job (a grid, a
search): each run then carries its own value (`training/build.per_run`). The forward
multipliers stay the parameterization's own keys (`param.output_mult`).

This module imports nothing heavy: the config types its node with `schema`.
"""

from __future__ import annotations

import math
from dataclasses import field, fields, make_dataclass
from functools import cache
from typing import List, Optional

from lrtransfer.errors import ConfigError, choices

BASE_ROLES = ("embedding", "hidden", "readout", "vector")
PART_ROLES = ("attention", "mlp")  # a model's named parts: the transformer's, a published one's (`model.attention`)
ROLES = (*BASE_ROLES, *PART_ROLES, "group")
NAMES = ("lr_mult", "init_mult", "beta1", "beta2", "eps_mult", "wd_mult")
# The names only an optimizer with Adam's moments has, and the option key each one needs
ADAM_NAMES = {"beta1": "beta1", "beta2": "beta2", "eps_mult": "eps"}
SPECIFIC_FIRST = ("group", *PART_ROLES)  # the roles that override a tensor's base role, most specific first


def key(role: str, name: str) -> str:
    return f"hp.{role}.{name}"


ALL_KEYS = tuple(key(r, n) for r in ROLES for n in NAMES)


@cache
def schema(of_lists: bool = False) -> type:
    """The `hp` node's dataclass: `hp.<role>.<name>`, a float (or, for the `grid` node, a list of
    floats), null by default. Classes are named (HpHidden, HpGridHidden, ...) so that pickle finds
    them by name in `config.keys` (a launcher sends configs to other processes)."""
    kind = Optional[List[float]] if of_lists else Optional[float]
    prefix = "HpGrid" if of_lists else "Hp"
    roles = []
    for role in ROLES:
        cls = make_dataclass(f"{prefix}{role.title()}", [(n, kind, None) for n in NAMES])
        roles.append((role, cls, field(default_factory=cls)))
    return make_dataclass(prefix if not of_lists else "HpGrid", roles)


def classes() -> dict[str, type]:
    """Every class `schema` makes, by name."""
    out = {}
    for lists in (False, True):
        root = schema(lists)
        out[root.__name__] = root
        out.update({f.type.__name__: f.type for f in fields(root)})
    return out


def set_values(node) -> dict[str, float]:
    """{"hp.hidden.lr_mult": 2.0, ...}: the keys set (not null) in an `hp` node (a dataclass or a
    mapping, a record's)."""
    out = {}
    for role in ROLES:
        sub = node.get(role) if isinstance(node, dict) else getattr(node, role, None)
        for name in NAMES:
            value = sub.get(name) if isinstance(sub, dict) else getattr(sub, name, None)
            if value is not None:
                out[key(role, name)] = value
    return out


def split(k: str) -> tuple[str, str]:
    """("hidden", "lr_mult") of "hp.hidden.lr_mult"; one line naming the valid ones otherwise."""
    parts = k.split(".")
    if len(parts) != 3 or parts[0] != "hp":
        raise ConfigError(f"{k} is not a key hp.<role>.<name>; roles: {', '.join(ROLES)}; names: {', '.join(NAMES)}")
    _, role, name = parts
    if role not in ROLES:
        raise ConfigError(f"unknown role '{role}' in {k}{choices(ROLES, role)}")
    if name not in NAMES:
        raise ConfigError(f"unknown hyperparameter '{name}' in {k}{choices(NAMES, name)}")
    return role, name


def check_value(k: str, value: float) -> None:
    """A value of `k` a tensor can train with: a multiplier of an LR, a decay or an init >= 0, of an
    epsilon > 0, a beta in [0, 1)."""
    _, name = split(k)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{k}={value!r} must be a finite number")
    if name in ("beta1", "beta2"):
        if not 0 <= value < 1:
            raise ConfigError(f"{k}={value!r} must be in [0, 1) (Adam's {name} of those tensors)")
    elif name == "eps_mult":
        if not value > 0:
            raise ConfigError(f"{k}={value!r} must be positive (a multiplier of Adam's epsilon)")
    elif not value >= 0:
        raise ConfigError(f"{k}={value!r} must be >= 0 (a multiplier of those tensors' {name[:-5]})")


def check_applies(k: str, optim, model, param=None) -> None:
    """Refuse a key the job cannot apply: beta1, beta2 or eps_mult under an optimizer without
    Adam's moments (SGD), `group` without a glob naming it, attention or mlp in a model that has
    no such parts (`model`'s options declare theirs, `PARTS`). Whether the built model has a
    tensor of the role is checked once it is built (`unused_roles`)."""
    role, name = split(k)
    if name in ADAM_NAMES and not hasattr(optim, ADAM_NAMES[name]):
        raise ConfigError(f"{k}: optim={optim.name} has no {ADAM_NAMES[name]} (it is not Adam-like); "
                          f"valid names here: {', '.join(n for n in NAMES if n not in ADAM_NAMES)}")
    if name in ADAM_NAMES and role in ("hidden", *PART_ROLES) and getattr(optim, "UPDATE", "") == "orthogonalized":
        raise ConfigError(f"{k}: optim={optim.name} orthogonalises the hidden matrices (momentum, no Adam {ADAM_NAMES[name]}); "
                          f"its Adam part's tensors take it: roles embedding, readout, vector")
    parts = roles_of_model(model)
    if role not in parts:
        raise ConfigError(f"{k}: model={model.name} has no role {role}"
                          + (" (set model.group=GLOB, a glob over its layers' names, to name one)"
                             if role == "group" and "group" in getattr(model, "PARTS", ()) else "")
                          + f"; roles here: {', '.join(parts)}")


def roles_of_model(model) -> tuple[str, ...]:
    """The roles a model's options say it may have: the four base roles, its `PARTS` (the transformer's
    attention and mlp), and `group` where a glob names it (`model.group`)."""
    parts = [p for p in getattr(model, "PARTS", ()) if p != "group"]
    if "group" in getattr(model, "PARTS", ()) and getattr(model, "group", ""):
        parts.append("group")
    return (*BASE_ROLES, *parts)

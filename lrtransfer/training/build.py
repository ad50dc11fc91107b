"""What a job trains, made once from its validated config.

Every option is turned into objects here and nowhere else: the task (on the
device, selected once), and factories for the parameterization, the model and the
optimizer, which the engine calls once per ensemble (a parameterization carries
state from step to step, so each ensemble gets its own). Each builder hands an
option module only its own options and the few numbers it needs (width, depth,
the optimizer's kind of update, the task's shapes), never the whole config, so
the engine below receives objects and knows no config schema of any group.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
import dataclasses
from dataclasses import dataclass
from typing import Any

import torch

from lrtransfer import options
from lrtransfer.config import (Config, Engine, Train, has_points, inner_grid, model_activation, tuned_keys,
                               varied_keys)
from lrtransfer.options.data import Task
from lrtransfer.options.data import build as build_task
from lrtransfer.errors import ConfigError, UserError, warn
from lrtransfer.nn import Module
from lrtransfer.nn import Slot
from lrtransfer.options import hp
from lrtransfer.options.param import Parameterization, parameterization_class, sde
from lrtransfer.options.param.tuning import Tuning
from lrtransfer.options.schema import Activation

# train.dtype -> the dtype of weights, optimizer state and losses
DTYPES = {"float32": torch.float32, "float64": torch.float64, "bf16": torch.float32, "bf16_autocast": torch.float32,
          "tf32": torch.float32}


class DeviceError(UserError, RuntimeError):
    """The requested device is not available on this machine."""


def select_device(spec: str) -> torch.device:
    """`auto` picks CUDA when present; asking for CUDA without it is an error, not a fallback.
    A CUDA device is returned with its index (the current one where none is given), so that
    every tensor's `.device` compares equal to it."""
    if spec == "auto":
        spec = "cuda" if torch.cuda.is_available() else "cpu"
    device = torch.device(spec)
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceError(f"engine.device={spec} but CUDA is not available here; use engine.device=cpu or auto")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise DeviceError(
                f"engine.device={spec} but only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
        if device.index is None:
            device = torch.device("cuda", torch.cuda.current_device())
    return device


def per_run(node, prefix: str, values: dict | None):
    """`node` (a dataclass: a group's options, a role's `hp`) with each of its keys among `values`
    ({"optim.weight_decay": (K,) tensor}, {"hp.hidden.lr_mult": ...}; `prefix` "optim", "hp.hidden")
    set to the runs' values instead of its scalar: the code reading it then computes with one value
    per run (the keys an option declares in PER_RUN, every `hp.*`)."""
    own = {k[len(prefix) + 1:]: v for k, v in (values or {}).items() if k.rpartition(".")[0] == prefix}
    return dataclasses.replace(node, **own) if own else node


def tuning(cfg: Config, values: dict | None = None) -> Tuning:
    """The job's `hp.<role>.<name>` values (each a float, or (K,) float64 on the host per run)."""
    found = {}
    for role in hp.ROLES:
        node = per_run(getattr(cfg.hp, role), f"hp.{role}", values)
        set_ = {n: v for n, v in vars(node).items() if v is not None}
        found[role] = {n: v.detach().cpu() if isinstance(v, torch.Tensor) else float(v) for n, v in set_.items()}
    return Tuning(found)


def parameterization(cfg: Config, values: dict | None = None) -> Parameterization:
    """The parameterization of `cfg.param`, told the width, the optimizer's kind of update and the
    job's batch and steps (its SDE rule's kappa, `param.sde_rule`), with the job's per-module
    hyperparameters on top (`hp.*`)."""
    update = options.of("optim")[cfg.optim.name].UPDATE
    param = parameterization_class(cfg.param.name)(per_run(cfg.param, "param", values), width=cfg.width, update=update,
                                                     depth=cfg.depth, batch_size=cfg.train.batch_size,
                                                     steps=cfg.train.steps)
    said = sde.note(param.sde, cfg.optim.name, {k: hasattr(cfg.optim, k) for k in ("beta1", "beta2", "eps")})
    if said:
        warn(said)
    return param.tuned(tuning(cfg, values))


def model(cfg: Config, param: Parameterization, *, runs: int, input_shape: Sequence[int], output_dim: int) -> Module:
    """The model of `cfg.model` for `runs` runs, with `param`'s multipliers set (not yet initialised)."""
    own = cfg.model
    if getattr(own, "activation", None) is not None:  # `auto` resolved for the model (a model may have none)
        own = dataclasses.replace(own, activation=Activation(model_activation(cfg)))
    net = options.module("model", cfg.model.name).build(
        own, param, width=cfg.width, depth=cfg.depth, runs=runs, input_shape=tuple(input_shape),
        output_dim=output_dim,
    )
    if param.scales_depth() and not any(atom.in_branch for atom in net.atoms()):
        raise ConfigError(f"param={param.name} multiplies residual branches by its depth rule, and model={cfg.model.name} "
                          f"has none (its layers are one chain): a depth study under it would measure the rule without "
                          f"its depth part; models with residual branches: {', '.join(with_branches())}, and custom "
                          "where they are found or named (model.branch_outputs)")
    param.set_multipliers(net)
    return net


def with_branches() -> list[str]:
    """The built-in models with residual branches: those with a residual rule to choose (`model.residual`)."""
    return [name for name, schema in options.of("model").items()
            if "residual" in {f.name for f in dataclasses.fields(schema)}]


def optimizer(cfg: Config, slots: Sequence[Slot], values: dict | None = None):
    """The optimizer of `cfg.optim` for the parameterization's slots: each trained tensor with
    its atom (role, fan_in, fan_out), so a matrix optimizer knows which tensors are hidden matrices."""
    return options.module("optim", cfg.optim.name).Optimizer(per_run(cfg.optim, "optim", values), slots)


def task(cfg: Config, device: torch.device, dtype: torch.dtype, *, writing: bool = True) -> Task:
    """The job's task; `writing=False` (a plan): one that writes nothing (`options.data.build`)."""
    return build_task(cfg.data, device, dtype, writing=writing)


@dataclass(frozen=True)
class Built:
    """Everything the engine trains with."""

    task: Task
    train: Train
    engine: Engine
    device: torch.device
    dtype: torch.dtype
    # Each factory takes the ensemble's per-run values ({"optim.weight_decay": (K,) tensor},
    # `runs.per_run_values`; none by default), which replace those keys' scalars.
    new_param: Callable[..., Parameterization]  # (values) -> a parameterization
    new_model: Callable[[Parameterization, int], Module]  # (param, runs) -> a model, multipliers set
    new_optimizer: Callable[..., Any]  # (slots, values) -> an optimizer for the parameterization's slots
    optim_options: Callable[..., Any]  # (values) -> the optimizer's options, whose weight decay the parameterization applies
    hp_keys: tuple[str, ...] = ()  # the per-module hyperparameters the job sets (`hp.*`, or per run): `check`'s
    # one run's values of each key the runs vary ({"param.attn_mult": (1,) tensor}): what `check` builds with, so
    # that a builder that cannot take a key per run (a published model's attention) refuses it before training
    sample_values: dict = dataclasses.field(default_factory=dict)


def job(cfg: Config, device: torch.device | None = None, *, data: Task | None = None) -> Built:
    """Build what a validated config trains, on `device` (default: `engine.device`'s); `data`:
    a task already built for the same data, to reuse (the sweep's planning sizes many jobs on one)."""
    device = device if device is not None else select_device(cfg.engine.device)
    dtype = DTYPES[cfg.train.dtype.value]
    the_task = data if data is not None else task(cfg, device, dtype)
    shape, classes = the_task.input_shape, the_task.output_dim
    return Built(
        task=the_task, train=cfg.train, engine=cfg.engine, device=device, dtype=dtype,
        new_param=lambda values=None: parameterization(cfg, values),
        new_model=lambda param, runs: model(cfg, param, runs=runs, input_shape=shape, output_dim=classes),
        new_optimizer=lambda slots, values=None: optimizer(cfg, slots, values),
        optim_options=lambda values=None: per_run(cfg.optim, "optim", values),
        hp_keys=tuple(tuned_keys(cfg)),
        sample_values=sample_values(cfg),
    )


def sample_values(cfg: Config) -> dict:
    """One run's value of each per-run key of the job (its first row's, its grid's first value), as the
    engine hands them: (1,) float64."""
    keys = varied_keys(cfg)
    if not keys:
        return {}
    first = cfg.points.values[0] if has_points(cfg) else [inner_grid(cfg)[1][0]]
    return {k: torch.tensor([float(v)], dtype=torch.float64) for k, v in zip(keys, first)}


def check(built: Built) -> None:
    """Build the parameterization, a one-run model and the optimizer on the meta device
    (nothing allocated), so that a builder's refusal (optim=muon on a model without a
    hidden matrix, an `hp.<role>` no tensor of the model has) is a one-line error before any
    job trains."""
    with torch.device("meta"):
        values = built.sample_values  # on the host: what the engine's values are copied from
        param = built.new_param(values)
        slots = param.slots(built.new_model(param, 1))
        built.new_optimizer(slots, values)
    unused_roles(param.tune, slots, built.hp_keys)


def unused_roles(tune: Tuning, slots: Sequence[Slot], keys: Sequence[str]) -> None:
    """Refuse an `hp.<role>.*` key (set, or varied per run) whose role holds no tensor of the model."""
    held = tune.used_roles((s.atom, s.name) for s in slots)
    tied = any(s.atom.tied is not None for s in slots)
    for k in keys:
        role = k.split(".")[1]
        if role not in held:
            why = " (its readout is its token table, one tensor: an embedding's)" if role == "readout" and tied else ""
            raise ConfigError(f"{k}: no tensor of this model has the role {role}{why}; roles it has: "
                              f"{', '.join(r for r in hp.ROLES if r in held)}")

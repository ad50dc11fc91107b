"""Checks of one group's option against another's (a model that cannot read the data, a
parameterization's key where the model has nothing it acts on, decay against the grid's top LR,
the SDE rule's betas at this job's batch and steps). `validate`
runs them once each group's own values are valid.
"""

from __future__ import annotations

from dataclasses import fields

from lrtransfer import options
from lrtransfer.config.keys import Config
from lrtransfer.config.runs import inner_grid
from lrtransfer.options import hp
from lrtransfer.options.schema import INPUT_KINDS, VECTOR, ConfigError


def check_attention_keys(cfg: Config) -> None:
    """A parameterization's key that acts only on attention (its options' ATTENTION_KEYS), set on a
    model that computes none (its options' ATTENTION), would change the job's id and nothing it
    computes: a study of jobs that differ in name only. Refused, naming the models it acts on."""
    if getattr(cfg.model, "ATTENTION", False):
        return
    defaults = {f.name: f.default for f in fields(cfg.param)}
    for key in getattr(cfg.param, "ATTENTION_KEYS", ()):
        if getattr(cfg.param, key) != defaults.get(key):
            able = [name for name, schema in options.of("model").items() if getattr(schema, "ATTENTION", False)]
            raise ConfigError(f"param.{key}={getattr(cfg.param, key)} does nothing here: it acts on attention logits, "
                              f"and model={cfg.model.name} computes no attention; leave it out (models with attention: "
                              f"{', '.join(able)})")


def check_decay(cfg: Config) -> None:
    """Weight decay takes `decay` of each weight a step: LR x weight_decay under optim.decay_scaling=lr
    (torch's AdamW), weight_decay itself under `independent`. At 1 or more, at the grid's top LR, it
    wipes out (or flips) every weight at its first step, and every run there diverges or dies:
    refused, naming both values (each value of a grid.optim.weight_decay too)."""
    scaling = getattr(getattr(cfg.optim, "decay_scaling", None), "value", None)
    if scaling is None or not hasattr(cfg.optim, "weight_decay"):
        return
    found = inner_grid(cfg)
    values = found[1] if found and found[0] == "optim.weight_decay" else [cfg.optim.weight_decay]
    top = max(cfg.lr.values())
    for wd in values:
        if scaling == "lr" and 2.0**top * wd >= 1:
            raise ConfigError(f"optim.weight_decay={wd:g} with optim.decay_scaling=lr takes LR x decay = 2^{top:g} x "
                              f"{wd:g} = {2.0**top * wd:.3g} of each weight a step at the grid's top LR (lr.log2_max="
                              f"{cfg.lr.log2_max:g}): 1 or more wipes out every weight at the first step; give a "
                              f"weight decay below {2.0**-top:.3g} (1 / the top LR), or a lower lr.log2_max")
        if scaling == "independent" and wd >= 1:
            raise ConfigError(f"optim.weight_decay={wd:g} with optim.decay_scaling=independent takes {wd:g} of each "
                              "weight a step: 1 or more wipes out every weight at the first step; give one below 1 "
                              "(e.g. 0.1), or optim.decay_scaling=lr for torch's LR x weight_decay")


def check_sde_rule(cfg: Config) -> None:
    """param.sde_rule, its bases, and the betas it makes at this job's batch and steps (`sde.check`)."""
    from lrtransfer.options.param import sde  # the options' modules (and torch) load with the config's groups

    own = {k: [v] for k, v in hp.set_values(cfg.hp).items() if k.endswith((".beta1", ".beta2"))}
    grid = inner_grid(cfg)
    if grid is not None and grid[0].startswith("hp."):
        own[grid[0]] = list(grid[1])
    sde.check(cfg.param, cfg.optim, batch_size=cfg.train.batch_size, steps=cfg.train.steps, grid=grid, own=own)


def reads(model_schema) -> tuple[str, ...]:
    return getattr(model_schema, "READS", (VECTOR,))


def check_model_reads_data(cfg: Config) -> None:
    kind = getattr(cfg.data, "INPUTS", VECTOR)
    if kind in reads(cfg.model):
        return
    able = [name for name, schema in options.of("model").items() if kind in reads(schema)]
    raise ConfigError(
        f"model={cfg.model.name} cannot read data={cfg.data.name}, which gives {INPUT_KINDS[kind]}; "
        f"models that can: {', '.join(able) if able else 'none yet'}"
    )


def check_param_has_tree(cfg: Config) -> None:
    """A parameterization that walks the module tree (its options' NEEDS_MODULE_TREE) needs a
    model that has one (its options' MODULE_TREE, true unless said otherwise)."""
    if not getattr(cfg.param, "NEEDS_MODULE_TREE", False) or getattr(cfg.model, "MODULE_TREE", True):
        return
    able = [name for name, schema in options.of("param").items() if not getattr(schema, "NEEDS_MODULE_TREE", False)]
    raise ConfigError(
        f"param={cfg.param.name} needs the model's tree of modules (masses, sensitivities), which "
        f"model={cfg.model.name} does not have; parameterizations that work: {', '.join(able)}"
    )

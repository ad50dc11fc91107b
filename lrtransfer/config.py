"""The root config behind `conf/config.yaml`, the LR grid's precedence, and the checks Hydra's types cannot express.

The options of each group (model, param, optim, data, tracker) are typed by dataclasses in
their own modules (see `options.py`); this module types the rest (sizes, seeds, the
LR grid, training, the engine) and registers both in Hydra's ConfigStore, so Hydra
rejects an unknown key or a value of the wrong type while composing, before any job
starts. `validate` adds the value checks and returns typed objects.

This module imports no torch; `register` (run when `lrtransfer.conf` is imported,
that is when a config is composed) imports the option modules.
"""

from __future__ import annotations

import copy
import math
from functools import cache
from dataclasses import dataclass, field, fields, make_dataclass, replace
from enum import Enum
from typing import Any, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf, open_dict

from lrtransfer import options
from lrtransfer.options import GROUPS
from lrtransfer.errors import choices
from lrtransfer.schema import INPUT_KINDS, RUN_SETTINGS, VECTOR, ConfigError, Grid, finite_fields, positive

__all__ = ["Config", "ConfigError", "LRGrid", "validate", "semantic", "register"]


# ---------------------------------------------------------------- choices
class Schedule(str, Enum):
    constant = "constant"
    linear = "linear"
    cosine = "cosine"


class DType(str, Enum):
    """Training precision. Weights and optimizer state are float32 except under float64;
    bf16_autocast runs the forward's matmuls in bfloat16 (torch.autocast); tf32 lets
    CUDA matmuls and convolutions use TensorFloat-32, forward and backward, which the
    others forbid (no effect on a CPU)."""

    float32 = "float32"
    float64 = "float64"
    bf16_autocast = "bf16_autocast"
    tf32 = "tf32"


# ---------------------------------------------------------------- shared keys
@dataclass
class LRGrid:
    """Learning rates 2**log2_min ... 2**log2_max, log2_step octaves apart.

    Each key's value, by precedence: the command line (`lr.log2_min=-16`), else
    the parameterization's own grid for the optimizer's kind of update (its
    options' `LR_GRIDS`: where its LR means something else, as the modular norm's
    target), else the optimizer's (its options' `LR_GRID`). conf/config.yaml
    fills each key through `lr_default`.
    """

    log2_min: float = MISSING
    log2_max: float = MISSING
    log2_step: float = MISSING

    def size(self) -> int:
        return int(math.floor((self.log2_max - self.log2_min) / self.log2_step + 1e-9)) + 1

    def values(self) -> list[float]:
        """The grid's log2 learning rates, endpoints included."""
        return [self.log2_min + i * self.log2_step for i in range(self.size())]


def default_grid(param: str, optim: str) -> Grid:
    """The LR grid of a parameterization under an optimizer, when the command line sets none."""
    optimizer = options.of("optim")[optim]
    own = getattr(options.of("param")[param], "LR_GRIDS", {})
    return own.get(optimizer.UPDATE, optimizer.LR_GRID)


def lr_default(key: str, *, _root_: DictConfig) -> float:
    """`${lrt_lr:KEY}`: KEY of `default_grid` for the chosen parameterization and optimizer."""
    return float(getattr(default_grid(_root_.param.name, _root_.optim.name), key))


@dataclass
class Train:
    steps: int = 300
    batch_size: int = 64
    schedule: Schedule = Schedule.constant
    warmup_steps: int = 0
    # The final loss is the mean training loss over this fraction of the last steps.
    final_window: float = 0.1
    # How many points of each run's loss curve the record keeps.
    history_points: int = 100
    # A run counts as diverged when its loss is NaN/inf or exceeds this multiple of
    # its initial loss.
    diverge_factor: float = 20.0
    dtype: DType = DType.float32


@dataclass
class Engine:
    """How a job runs; none of it changes what is computed, so it is not part of a job's identity."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # 0: OMP_NUM_THREADS when a launcher set it, else every core
    batched: bool = True  # train a job's runs as one ensemble; false: one run at a time
    # Runs per ensemble: 0 = as many as fit in max_memory_gb (estimated), N = at most N.
    chunk: int = 0
    max_memory_gb: float = 4.0
    progress: bool = True
    # Save the training state at most this often (seconds; 0: never), and when a stop
    # is requested; a re-run of an unfinished job resumes from it.
    checkpoint_s: float = 300.0


# ---------------------------------------------------------------- the whole
@dataclass
class Config:
    model: Any = MISSING
    param: Any = MISSING
    optim: Any = MISSING
    data: Any = MISSING
    name: str = "default"
    results_dir: str = "results"
    width: int = 128
    depth: int = 3
    seed: int = 0
    n_seeds: int = 1
    lr: LRGrid = field(default_factory=LRGrid)
    # A second inner axis beside the LR: `grid.optim.weight_decay=[0,1e-3,1e-2]` trains
    # every LR of the grid at each value, in the same job (see `inner_grid`). Typed by
    # `grid_schema` when registered: one list per key an option declares PER_RUN.
    grid: Any = field(default_factory=dict)
    train: Train = field(default_factory=Train)
    engine: Engine = field(default_factory=Engine)
    tracker: Any = MISSING  # where results also go (lrtransfer/tracker/): no part of a job's identity


@cache
def grid_schema() -> type:
    """The `grid` node's dataclass: `grid.<group>.<key>`, a list of floats (default null), for
    every key some option of the group declares in its `PER_RUN` (the numeric options whose
    code takes one value per run: a (K,) tensor), so Hydra accepts `grid.optim.weight_decay=[...]`
    and refuses any other key while composing."""
    nodes = []
    for group in GROUPS:
        keys = sorted({k for o in options.of(group).values() for k in getattr(o, "PER_RUN", ())})
        if keys:
            node = make_dataclass(f"{group.title()}Grid", [(k, Optional[List[float]], None) for k in keys])
            nodes.append((group, node, field(default_factory=node)))
    return make_dataclass("InnerGrid", nodes)


def register() -> None:
    """Make the root schema and every option's dataclass (`schema/<group>/<name>`) visible to Hydra; idempotent."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    root = OmegaConf.structured(Config)
    root.grid = OmegaConf.structured(grid_schema())
    cs.store(name="lrtransfer_schema", node=root)
    for group in GROUPS:
        for name, node in options.of(group).items():
            cs.store(group=f"schema/{group}", name=name, node=node)
    if not OmegaConf.has_resolver("lrt_lr"):
        OmegaConf.register_new_resolver("lrt_lr", lr_default, use_cache=False)


# ---------------------------------------------------------------- value checks
# Sane bounds, refused before any training rather than met as a MemoryError or an overflow.
MAX_RUNS_PER_JOB = 10_000  # LR grid points x seeds
MAX_ABS_LOG2_LR = 100  # learning rates 2^-100 .. 2^100, well inside float32
MAX_DEPTH = 1024  # layers or blocks: sizing a deeper model alone (engine.check_fits) takes minutes


def _check_lr_grid(cfg: Config) -> None:
    lr = cfg.lr
    if not all(math.isfinite(v) for v in (lr.log2_min, lr.log2_max, lr.log2_step)):
        raise ConfigError(f"lr grid values must be finite, got {lr}")
    for key in ("log2_min", "log2_max"):
        value = getattr(lr, key)
        if abs(value) > MAX_ABS_LOG2_LR:
            raise ConfigError(f"lr.{key}={value:g} is out of range; valid: -{MAX_ABS_LOG2_LR} .. {MAX_ABS_LOG2_LR}")
    positive("lr.log2_step", lr.log2_step)
    if lr.log2_min > lr.log2_max:
        raise ConfigError(
            f"empty LR grid: lr.log2_min={lr.log2_min} is above lr.log2_max={lr.log2_max}"
        )
    points = lr.size()
    if points > MAX_RUNS_PER_JOB:
        raise ConfigError(f"lr.log2_step={lr.log2_step:g} gives an LR grid of {points} points; "
                          f"at most {MAX_RUNS_PER_JOB} runs a job (use a larger lr.log2_step)")
    if points * cfg.n_seeds > MAX_RUNS_PER_JOB:
        raise ConfigError(f"n_seeds={cfg.n_seeds} x {points} learning rates = {points * cfg.n_seeds} runs in a job; "
                          f"at most {MAX_RUNS_PER_JOB} (sweep seed=... as separate jobs instead)")


def inner_grid(cfg: Config | dict) -> tuple[str, list[float]] | None:
    """The job's second inner axis, `("optim.weight_decay", [0.0, 0.001, 0.01])`, or None.

    `cfg` a typed Config or a resolved config dict (a record's); only the keys set
    (not null) count.
    """
    node = cfg.get("grid") if isinstance(cfg, dict) else cfg.grid
    found = [(k, v) for k, v in flatten(node).items() if v is not None]
    if not found:
        return None
    if len(found) > 1:
        raise ConfigError(f"grid takes one key (one more axis beside the LR), got {', '.join('grid.' + k for k, _ in found)}")
    return found[0]


def flatten(node, prefix: str = "") -> dict:
    """A nested node (a dataclass, a mapping, a DictConfig) as {"group.key": value}: a grid node's
    keys, or a whole config's as trackers show them."""
    if node is None:
        return {}
    if not isinstance(node, dict) and hasattr(node, "__dataclass_fields__"):
        node = {f.name: getattr(node, f.name) for f in fields(node)}
    if isinstance(node, DictConfig):
        node = OmegaConf.to_container(node)
    if not isinstance(node, dict):
        return {prefix.rstrip("."): node}
    out = {}
    for k, v in node.items():
        out.update(flatten(v, f"{prefix}{k}.") if isinstance(v, dict) or hasattr(v, "__dataclass_fields__") else {f"{prefix}{k}": v})
    return out


def per_run_keys(cfg: Config) -> list[str]:
    """The keys of this job whose value may differ between its runs (`grid.<key>`)."""
    return [f"{g}.{k}" for g in GROUPS for k in getattr(getattr(cfg, g), "PER_RUN", ())]


def _check_inner_grid(cfg: Config) -> None:
    found = inner_grid(cfg)
    if found is None:
        return
    key, values = found
    valid = per_run_keys(cfg)
    if key not in valid:
        group, _, leaf = key.partition(".")
        why = f"{group}={getattr(cfg, group).name} has no such key" if group in GROUPS and not hasattr(getattr(cfg, group), leaf) \
            else "its value cannot differ between the runs of a job"
        raise ConfigError(f"grid.{key}: {why}; keys that may vary per run here: {', '.join(valid) or 'none'}")
    if not isinstance(values, list) or not values:
        raise ConfigError(f"grid.{key}={values!r} must be a non-empty list of numbers, e.g. grid.{key}=[0,1e-3,1e-2]")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ConfigError(f"grid.{key}={values}: every value must be finite, got {bad[0]}")
    if len(set(values)) < len(values):
        raise ConfigError(f"grid.{key}={values} repeats a value; each value is trained once")
    group, _, leaf = key.partition(".")
    node = getattr(cfg, group)
    for v in values:  # the option's own checks, for each value (weight_decay >= 0, output_mult > 0)
        try:
            if hasattr(node, "check"):
                replace(node, **{leaf: v}).check()
        except ConfigError as e:
            raise ConfigError(f"grid.{key}={values}: {e}") from None
    runs = cfg.lr.size() * len(values) * cfg.n_seeds
    if runs > MAX_RUNS_PER_JOB:
        raise ConfigError(f"grid.{key} has {len(values)} values x {cfg.lr.size()} learning rates x n_seeds={cfg.n_seeds} "
                          f"= {runs} runs in a job; at most {MAX_RUNS_PER_JOB}")


SECTIONS = {"lr": LRGrid, "train": Train, "engine": Engine}  # the typed nodes that are not groups


def _check_group_shape(cfg: DictConfig, group: str) -> None:
    """A group's YAML (a user's `--config-dir` one too) must be a mapping typed by its options."""
    known = options.of(group)
    node = cfg[group]
    name = OmegaConf.select(cfg, f"{group}.name", default=None) if isinstance(node, DictConfig) else None
    if name not in known:
        raise ConfigError(f"{group}: expected a mapping with name: one of {', '.join(known)}, "
                          f"got {OmegaConf.to_yaml(node).strip()[:60]!r}")
    if OmegaConf.get_type(node) is not known[name]:
        raise ConfigError(f"{group}={name}: its YAML file must start with "
                          f"'defaults: [/schema/{group}/{name}@_here_, _self_]' (see conf/{group}/)")


def _check_keys(cfg: DictConfig, schema: type | None = None, where: str = "") -> None:
    """Keys the schema lacks (`+foo=1`) or that were deleted (`~width`): Hydra lets both through."""
    schema = schema or Config
    known = [f.name for f in fields(schema)]
    extra = [k for k in cfg.keys() if k not in known]
    if extra:
        raise ConfigError(f"unknown key '{where}{extra[0]}'{choices(known, extra[0])}")
    missing = [k for k in known if k not in cfg]
    if missing:
        raise ConfigError(f"key '{where}{missing[0]}' is required (it cannot be deleted with ~){choices(known)}")
    if schema is Config:
        for group in GROUPS:
            _check_group_shape(cfg, group)
        known_grid = list(flatten(grid_schema()()))
        for key in flatten(cfg.grid):  # `+grid.optim.beta1=[...]` gets past Hydra, and to_object would drop it
            if key not in known_grid:
                raise ConfigError(f"unknown key 'grid.{key}'{choices(['grid.' + k for k in known_grid], 'grid.' + key)}")
        for key, node in cfg.items():
            sub = SECTIONS.get(key)
            if sub is None and key in GROUPS:
                sub = options.of(key).get(OmegaConf.select(cfg, f"{key}.name", default=None))
            if sub is not None and isinstance(node, DictConfig):
                _check_keys(node, sub, f"{key}.")


def validate(cfg: DictConfig | Config) -> Config:
    """Return `cfg` as typed objects, or raise ConfigError naming the bad value."""
    if isinstance(cfg, DictConfig):
        if "hydra" in cfg:  # a sweep's job config: drop Hydra's own node, as Hydra does for the task
            cfg = copy.deepcopy(cfg)
            with open_dict(cfg):
                del cfg["hydra"]
        _check_keys(cfg)
        cfg = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    if not isinstance(cfg, Config):
        raise ConfigError("the config does not follow lrtransfer's schema (conf/config.yaml must list lrtransfer_schema)")
    for key in ("width", "depth", "n_seeds"):
        positive(key, getattr(cfg, key))
    if cfg.depth > MAX_DEPTH:
        raise ConfigError(f"depth={cfg.depth} is beyond the sane bound of {MAX_DEPTH} layers or blocks")
    min_depth = getattr(cfg.model, "MIN_DEPTH", 1)
    if cfg.depth < min_depth:
        raise ConfigError(f"depth={cfg.depth}: model={cfg.model.name} needs depth >= {min_depth}")
    positive("train.steps", cfg.train.steps)
    positive("train.batch_size", cfg.train.batch_size)
    positive("train.history_points", cfg.train.history_points)
    positive("train.diverge_factor", cfg.train.diverge_factor)
    if not 0 < cfg.train.final_window <= 1:
        raise ConfigError(f"train.final_window must be in (0, 1], got {cfg.train.final_window!r}")
    if not 0 <= cfg.train.warmup_steps < cfg.train.steps:
        raise ConfigError(
            f"train.warmup_steps must be in [0, train.steps={cfg.train.steps}), got {cfg.train.warmup_steps!r}"
        )
    _check_lr_grid(cfg)
    if cfg.engine.chunk < 0:
        raise ConfigError(f"engine.chunk must be >= 0 (0 = automatic), got {cfg.engine.chunk}")
    positive("engine.max_memory_gb", cfg.engine.max_memory_gb)
    if not 0 <= cfg.engine.checkpoint_s < math.inf:
        raise ConfigError(f"engine.checkpoint_s must be a number of seconds >= 0 (0 = never), got {cfg.engine.checkpoint_s}")
    if cfg.engine.threads < 0:
        raise ConfigError(f"engine.threads must be >= 0 (0 = automatic), got {cfg.engine.threads}")
    device = cfg.engine.device
    if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ConfigError(f"engine.device={device!r} is not one of: auto, cpu, cuda, cuda:N")
    if not cfg.name or "/" in cfg.name or cfg.name.startswith("."):
        raise ConfigError(f"name={cfg.name!r} must be a non-empty folder name without '/'")
    for group in GROUPS:
        node = getattr(cfg, group)
        finite_fields(group, node)
        if hasattr(node, "check"):
            node.check()
        if hasattr(node, "check_with"):  # checks that need the rest of the config (model.heads vs width)
            node.check_with(cfg)
    _check_model_reads_data(cfg)
    _check_inner_grid(cfg)
    _check_param_has_tree(cfg)
    return cfg


def _reads(model_schema) -> tuple[str, ...]:
    return getattr(model_schema, "READS", (VECTOR,))


def _check_model_reads_data(cfg: Config) -> None:
    kind = getattr(cfg.data, "INPUTS", VECTOR)
    if kind in _reads(cfg.model):
        return
    able = [name for name, schema in options.of("model").items() if kind in _reads(schema)]
    raise ConfigError(
        f"model={cfg.model.name} cannot read data={cfg.data.name}, which gives {INPUT_KINDS[kind]}; "
        f"models that can: {', '.join(able) if able else 'none yet'}"
    )


def _check_param_has_tree(cfg: Config) -> None:
    """A parameterization that walks the module tree (its options' NEEDS_MODULE_TREE) needs a
    model that has one (its options' MODULE_TREE, true unless said otherwise)."""
    if not getattr(cfg.param, "NEEDS_MODULE_TREE", False) or getattr(cfg.model, "MODULE_TREE", True):
        return
    able = [name for name, schema in options.of("param").items() if not getattr(schema, "NEEDS_MODULE_TREE", False)]
    raise ConfigError(
        f"param={cfg.param.name} needs the model's tree of modules (masses, sensitivities), which "
        f"model={cfg.model.name} does not have; parameterizations that work: {', '.join(able)}"
    )


def activation_of(model_name: str, param_name: str, activation: str) -> str:
    """model.activation with `auto` resolved: the model's own nonlinearity (its options'
    ACTIVATION), scaled when the parameterization says its models use the scaled forms
    (its options' SCALED_ACTIVATION: param=modular, whose reference models use only
    sensitivity-1 nonlinearities, e.g. Modula's GPT its ScaledGELU)."""
    if activation != "auto":
        return activation
    name = getattr(options.of("model").get(model_name), "ACTIVATION", "relu")
    scaled = getattr(options.of("param").get(param_name), "SCALED_ACTIVATION", False)
    return f"scaled_{name}" if scaled else name


def model_activation(cfg: Config) -> str:
    """The nonlinearity a validated config's model uses (`activation_of`)."""
    return activation_of(cfg.model.name, cfg.param.name, cfg.model.activation.value)


def semantic(cfg: DictConfig | dict) -> dict:
    """The part of a resolved config that decides what is computed: a job's identity.

    Output locations (`results_dir`, `name`), how a job runs and where its results
    also go (`RUN_SETTINGS`: `engine`, `tracker`), Hydra's own settings and the
    fields a schema marks as `location` (where a dataset lives, whether it may be
    downloaded) are left out, so the same point is recognised whichever launcher,
    device, tracker, study folder or data folder ran it.
    What a choice resolves to is recorded, not the word `auto` (model.activation), and a
    parameterization's rule REVISION joins its options when non-zero.
    """
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[assignment]
    out = {k: v for k, v in cfg.items() if k not in ("hydra", "results_dir", "name", *RUN_SETTINGS)}
    grid = {k: v for k, v in flatten(out.pop("grid", None)).items() if v is not None}
    if grid:  # no grid (the default): the same identity as before grids existed
        out["grid"] = grid
    for group in GROUPS:
        node = out.get(group)
        schema = options.of(group).get(node.get("name")) if isinstance(node, dict) else None
        if schema is not None:
            hidden = {f.name for f in fields(schema) if f.metadata.get("location")}
            out[group] = {k: v for k, v in node.items() if k not in hidden}
    model, param = out.get("model"), out.get("param")
    if isinstance(model, dict) and isinstance(param, dict):
        if "activation" in model:
            act = activation_of(model.get("name"), param.get("name"), model["activation"])
            out["model"] = {**model, "activation": act}
        revision = getattr(options.of("param").get(param.get("name")), "REVISION", 0)
        if revision:
            out["param"] = {**param, "revision": revision}
    return out

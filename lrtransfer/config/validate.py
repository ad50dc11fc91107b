"""The checks Hydra's types cannot express: values, combinations, and keys Hydra lets through.

`validate` runs on every job of a sweep before any trains (and again in the job),
and returns the config as typed objects; every refusal is one `ConfigError` line
naming the bad value and the valid choices.
"""

from __future__ import annotations

import copy
import math
from dataclasses import fields, replace

from omegaconf import DictConfig, OmegaConf, open_dict

from lrtransfer import options
from lrtransfer.config.keys import (GRAPHS, SEARCH_POLICIES, Adaptive, Config, Engine, LRGrid, Train, grid_schema,
                                   search_schema)
from lrtransfer.config.runs import flatten, has_points, inner_grid, per_run_keys, search_ranges
from lrtransfer.errors import choices, lr_hint
from lrtransfer.options import GROUPS, hp
from lrtransfer.options.schema import (MAX_DEPTH, ConfigError, finite_fields, non_negative, positive,
                                      within)
from lrtransfer.options.trainer import ENGINE_GROUPS
import lrtransfer.config.combined as combined
import lrtransfer.config.booleans as booleans

# Sane bounds, refused before any training rather than met as a MemoryError or an overflow.
MAX_RUNS_PER_JOB = 10_000  # LR grid points x seeds
MAX_ABS_LOG2_LR = 100  # learning rates 2^-100 .. 2^100, well inside float32
MAX_STEPS = 10**9  # train.steps, train.history_points: a billion steps of the smallest model is years of work
MAX_THREADS = 4096  # engine.threads
MAX_INT = 2**63 - 1  # any integer key: a seed, a size or a count reaches torch as a 64-bit integer


def _check_lr_grid(cfg: Config) -> None:
    lr = cfg.lr
    for key in ("log2_min", "log2_max", "log2_step"):
        if not math.isfinite(getattr(lr, key)):
            raise ConfigError(f"lr.{key}={getattr(lr, key)} must be a finite number")
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


def _check_inner_grid(cfg: Config) -> None:
    found = inner_grid(cfg)
    if found is None:
        return
    key, values = found
    _check_per_run_key(cfg, key, f"grid.{key}")
    if not isinstance(values, list) or not values:
        raise ConfigError(f"grid.{key}={values!r} must be a non-empty list of numbers, e.g. grid.{key}=[0,1e-3,1e-2]")
    odd = [v for v in values if isinstance(v, bool) or not isinstance(v, (int, float))]
    if odd:  # a nested list gets past the schema's List[float]
        raise ConfigError(f"grid.{key}={values}: every value must be a number, got {odd[0]!r}")
    bad = [v for v in values if not math.isfinite(v)]
    if bad:
        raise ConfigError(f"grid.{key}={values}: every value must be finite, got {bad[0]}")
    if len(set(values)) < len(values):
        raise ConfigError(f"grid.{key}={values} repeats a value; each value is trained once")
    for v in values:
        try:
            check_per_run_value(cfg, key, v)
        except ConfigError as e:
            raise ConfigError(f"grid.{key}={values}: {e}") from None
    if has_points(cfg):
        raise ConfigError(f"grid.{key} and points both say the runs of the job; give one")
    runs = cfg.lr.size() * len(values) * cfg.n_seeds
    if runs > MAX_RUNS_PER_JOB:
        raise ConfigError(f"grid.{key} has {len(values)} values x {cfg.lr.size()} learning rates x n_seeds={cfg.n_seeds} "
                          f"= {runs} runs in a job; at most {MAX_RUNS_PER_JOB}")


def _check_per_run_key(cfg: Config, key: str, where: str) -> None:
    """`key` may differ between the runs of this job (`per_run_keys`), or one line says why not."""
    if key.startswith("hp."):
        hp.split(key)
        try:
            hp.check_applies(key, cfg.optim, cfg.model)
        except ConfigError as e:
            raise ConfigError(f"{where}: {str(e).partition(': ')[2]}") from None
        return
    valid = per_run_keys(cfg)
    if key not in valid:
        group, _, leaf = key.partition(".")
        why = f"{group}={getattr(cfg, group).name} has no such key" if group in GROUPS and not hasattr(getattr(cfg, group), leaf) \
            else "its value cannot differ between the runs of a job"
        shown = [k for k in valid if not k.startswith("hp.")] + ["hp.<role>.<name>"]
        raise ConfigError(f"{where}: {why}; keys that may vary per run here: {', '.join(shown)}")


def check_per_run_value(cfg: Config, key: str, value) -> None:
    """One run's value of a per-run key: a number the option's own checks accept (weight_decay >= 0,
    output_mult > 0), or one a per-module hyperparameter can take (`hp.check_value`)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ConfigError(f"{key}={value!r} is not a finite number")
    if key.startswith("hp."):
        hp.check_value(key, value)
        return
    group, _, leaf = key.partition(".")
    node = getattr(cfg, group)
    if hasattr(node, "check"):
        replace(node, **{leaf: value}).check()


def _check_hp(cfg: Config) -> None:
    """Every `hp.<role>.<name>` set: a value it can take, a role and name this job can apply."""
    for key, value in hp.set_values(cfg.hp).items():
        hp.check_value(key, value)
        hp.check_applies(key, cfg.optim, cfg.model)


MAX_POINT_RUNS = 100_000  # rows x seeds of a job's `points`
POINT_KINDS = ("search", "baseline", "confirm", "scan")


def _check_points(cfg: Config) -> None:
    """A job's runs as rows (`points`): per-run keys of this job, one finite value of each per row,
    an LR within the sane range, no row twice."""
    p = cfg.points
    if not has_points(cfg):
        if p.keys or p.values:
            raise ConfigError("points has no rows: give points.log2_lr and points.values, one row per run")
        return
    if len(p.values) != len(p.log2_lr):
        raise ConfigError(f"points has {len(p.log2_lr)} LRs and {len(p.values)} rows of values; give one row per LR")
    if len(set(p.keys)) < len(p.keys):
        raise ConfigError(f"points.keys={list(p.keys)} names a key twice")
    for k in p.keys:
        _check_per_run_key(cfg, k, f"points.keys: {k}")
    for i, (e, row) in enumerate(zip(p.log2_lr, p.values)):
        if not (isinstance(e, (int, float)) and math.isfinite(e) and abs(e) <= MAX_ABS_LOG2_LR):
            raise ConfigError(f"points.log2_lr[{i}]={e!r} is not a log2 LR in -{MAX_ABS_LOG2_LR} .. {MAX_ABS_LOG2_LR}")
        if len(row) != len(p.keys):
            raise ConfigError(f"points.values[{i}] has {len(row)} values for {len(p.keys)} keys ({', '.join(p.keys)})")
        for k, v in zip(p.keys, row):
            try:
                check_per_run_value(cfg, k, v)
            except ConfigError as e:
                raise ConfigError(f"points.values[{i}]: {e}") from None
    for name in ("centre", "reference"):
        point = getattr(p, name)
        if point and (len(point) != len(p.keys) + 1 or not all(math.isfinite(x) for x in point)):
            raise ConfigError(f"points.{name}={list(point)} must be a log2 LR and one finite value of each key")
    if p.kind not in POINT_KINDS:
        raise ConfigError(f"points.kind={p.kind!r}{choices(POINT_KINDS, p.kind)}")
    rows = [(float(e), *map(float, row)) for e, row in zip(p.log2_lr, p.values)]
    if len(set(rows)) < len(rows):
        raise ConfigError("points repeats a row (the same LR and values); each run is trained once")
    if len(rows) * cfg.n_seeds > MAX_POINT_RUNS:
        raise ConfigError(f"points has {len(rows)} rows x n_seeds={cfg.n_seeds} runs; at most {MAX_POINT_RUNS:,} in a job")


MIN_RESOLUTION = 1 / 64  # octaves: finer than this, a sweep would train LRs 1% apart
MAX_OCTAVES = 2 * MAX_ABS_LOG2_LR  # the widest LR grid there is: no step or extension goes further
MAX_SEEDS = 100_000  # seeds per scale of an adaptive sweep
MAX_BUDGET = 10**12  # run-steps: more than any sweep trains
MAX_BUDGET_S = 366 * 86400  # seconds: a year


def _check_adaptive(cfg: Config) -> None:
    """The adaptive sweep's keys (checked on every job, adaptive or not: a bad value in a study's
    YAML is refused whether or not this sweep is adaptive)."""
    a, res = cfg.adaptive, cfg.lr.resolution
    if not (math.isfinite(res) and res > 0):
        raise ConfigError(f"lr.resolution must be a positive number of octaves, got {res!r}")
    if res < MIN_RESOLUTION:
        raise ConfigError(f"lr.resolution={res:g} is finer than 1/64 octave; valid: {MIN_RESOLUTION:g} .. "
                          f"adaptive.coarse_step={a.coarse_step:g}")
    positive("adaptive.coarse_step", a.coarse_step)
    if res > a.coarse_step:
        raise ConfigError(f"lr.resolution={res:g} is coarser than adaptive.coarse_step={a.coarse_step:g}: "
                          "round 1's grid would already be finer")
    within("adaptive.coarse_step", a.coarse_step, MAX_OCTAVES, "octaves (the widest LR grid)")
    _check_budget("adaptive", a)
    positive("adaptive.max_seeds", a.max_seeds)
    within("adaptive.max_seeds", a.max_seeds, MAX_SEEDS, "seeds per scale")
    if not (math.isfinite(a.extend) and a.extend >= 0):
        raise ConfigError(f"adaptive.extend must be a number of octaves >= 0, got {a.extend!r}")
    within("adaptive.extend", a.extend, MAX_OCTAVES, "octaves (the widest LR grid)")


def _check_budget(section: str, node) -> None:
    """A section's `budget` (run-steps) and `budget_s` (seconds): null, or positive within sane bounds."""
    if node.budget is not None:
        positive(f"{section}.budget", node.budget)
        within(f"{section}.budget", node.budget, MAX_BUDGET, "run-steps")
    if node.budget_s is not None:
        positive(f"{section}.budget_s", node.budget_s)
        within(f"{section}.budget_s", node.budget_s, MAX_BUDGET_S, "seconds (a year)")


MAX_SCAN = 10  # octaves a transfer check's factor may move a tuned value


def _check_search(cfg: Config) -> None:
    """The search's keys (checked on every job, as the adaptive sweep's): its settings, and each
    range a two-number [lo, hi] with lo < hi of a key this job's runs can vary, whose ends are values
    the key can take (a key that must be positive, searched log-uniformly, must start above 0)."""
    s = cfg.search
    if s.policy not in SEARCH_POLICIES:
        raise ConfigError(f"search.policy={s.policy!r}{choices(SEARCH_POLICIES, s.policy)}")
    if s.metric not in ("train_loss", "eval_loss"):
        raise ConfigError(f"search.metric={s.metric!r}; valid: train_loss, eval_loss (a loss: lower is better)")
    positive("search.round_size", s.round_size)
    within("search.round_size", s.round_size, MAX_RUNS_PER_JOB, "points a round")
    positive("search.seeds", s.seeds)
    within("search.seeds", s.seeds, MAX_SEEDS, "seeds")
    _check_budget("search", s)
    if not 0 < s.radius <= 1:
        raise ConfigError(f"search.radius={s.radius!r} must be in (0, 1] (a half-side in the search box's unit coordinates)")
    if not 0 < s.shrink < 1:
        raise ConfigError(f"search.shrink={s.shrink!r} must be in (0, 1)")
    if not s.scan or not all(math.isfinite(x) and abs(x) <= MAX_SCAN for x in s.scan) or len(set(s.scan)) < len(s.scan):
        raise ConfigError(f"search.scan={list(s.scan)} must be distinct log2 factors within -{MAX_SCAN} .. {MAX_SCAN} "
                          "(e.g. [-2,-1,0,1,2])")
    for key, rng in search_ranges(cfg).items():
        where = f"search.{key}={rng}"
        if not (isinstance(rng, list) and len(rng) == 2):
            raise ConfigError(f"{where} must be a range [lo, hi] of two numbers")
        lo, hi = rng
        if not all(isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) for x in rng):
            raise ConfigError(f"{where}: each end must be a finite number")
        if not lo < hi:
            raise ConfigError(f"{where} is an empty range: give [lo, hi] with lo < hi")
        if key == "lr":
            if not lo > 0:
                raise ConfigError(f"{where}: learning rates are searched log-uniformly, so both ends must be positive")
            for x in rng:
                within("search.lr", abs(math.log2(x)), MAX_ABS_LOG2_LR, "octaves from 1")
            continue
        _check_per_run_key(cfg, key, f"search.{key}")
        for x in rng:
            try:
                check_per_run_value(cfg, key, x)
            except ConfigError as e:
                raise ConfigError(f"{where}: {e}") from None


def _check_int64(node, where: str = "") -> None:
    """Every integer key of the typed config (groups and sections included) within a 64-bit
    integer, which is what a seed, a size or a count becomes in torch: past it, a traceback
    from deep inside a job (`Overflow when unpacking long long`) instead of this line."""
    for f in fields(node):
        value = getattr(node, f.name)
        if hasattr(value, "__dataclass_fields__"):
            _check_int64(value, f"{where}{f.name}.")
        elif isinstance(value, int) and not isinstance(value, bool) and abs(value) > MAX_INT:
            raise ConfigError(f"{where}{f.name}={value} is beyond the sane bound of 2^63 - 1 (a 64-bit integer)")


SECTIONS = {"lr": LRGrid, "train": Train, "engine": Engine, "adaptive": Adaptive}  # the typed nodes that are not groups


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
        raise ConfigError(f"unknown key '{where}{extra[0]}'{choices(known, extra[0])}{lr_hint(where + extra[0])}")
    missing = [k for k in known if k not in cfg]
    if missing:
        raise ConfigError(f"key '{where}{missing[0]}' is required (it cannot be deleted with ~){choices(known)}")
    if schema is Config:
        for group in GROUPS:
            _check_group_shape(cfg, group)
        known_hp = [k.partition(".")[2] for k in hp.ALL_KEYS]
        for key in flatten(cfg.hp):  # `+hp.foo.lr_mult=2` gets past Hydra
            if key not in known_hp:
                role, _, name = key.partition(".")
                hp.split(f"hp.{key}")  # the unknown role or name, with the valid ones
                raise ConfigError(f"unknown key 'hp.{key}'")
        known_search = list(flatten(search_schema()()))
        for key in flatten(cfg.search):  # `+search.optim.beta1=[...]` gets past Hydra too
            if key not in known_search:
                raise ConfigError(f"unknown key 'search.{key}'{choices(['search.' + k for k in known_search], 'search.' + key)}")
        known_grid = list(flatten(grid_schema()()))
        for key in flatten(cfg.grid):  # `+grid.optim.beta1=[...]` gets past Hydra, and to_object would drop it
            if key.startswith("hp."):
                hp.split(key)  # the unknown role or name, with the valid ones
            if key not in known_grid:
                own = ['grid.' + k for k in known_grid if not k.startswith("hp.")]
                raise ConfigError(f"unknown key 'grid.{key}'{choices(own, 'grid.' + key)}, grid.hp.<role>.<name>")
        for key, node in cfg.items():
            sub = SECTIONS.get(key)
            if sub is None and key in GROUPS:
                sub = options.of(key).get(OmegaConf.select(cfg, f"{key}.name", default=None))
            if sub is not None and isinstance(node, DictConfig):
                _check_keys(node, sub, f"{key}.")


def validate(cfg: DictConfig | Config, overrides: list[str] | None = None) -> Config:
    """Return `cfg` as typed objects, or raise ConfigError naming the bad value. `overrides`: the
    command line's (a sweep's job config holds its own, `hydra.overrides.task`)."""
    if isinstance(cfg, DictConfig):
        if "hydra" in cfg:  # a sweep's job config: drop Hydra's own node, as Hydra does for the task
            if overrides is None:
                overrides = list(OmegaConf.select(cfg, "hydra.overrides.task", default=None) or [])
            booleans.check_yaml_booleans(cfg)
            cfg = copy.deepcopy(cfg)
            with open_dict(cfg):
                del cfg["hydra"]
        _check_keys(cfg)
        booleans.check_booleans(cfg, overrides or [])
        cfg = OmegaConf.to_object(cfg)  # type: ignore[assignment]
    if not isinstance(cfg, Config):
        raise ConfigError("the config does not follow lrtransfer's schema (conf/config.yaml must list lrtransfer_schema)")
    _check_int64(cfg)
    for key in ("width", "depth", "n_seeds"):
        positive(key, getattr(cfg, key))
    if cfg.depth > MAX_DEPTH:
        raise ConfigError(f"depth={cfg.depth} is beyond the sane bound of {MAX_DEPTH} layers or blocks")
    engine = cfg.trainer.name == "engine"  # else the user's command: the engine's groups compute nothing
    min_depth = getattr(cfg.model, "MIN_DEPTH", 1) if engine else 1
    if cfg.depth < min_depth:
        raise ConfigError(f"depth={cfg.depth}: model={cfg.model.name} needs depth >= {min_depth}")
    positive("train.steps", cfg.train.steps)
    positive("train.batch_size", cfg.train.batch_size)
    positive("train.history_points", cfg.train.history_points)
    within("train.steps", cfg.train.steps, MAX_STEPS, "steps")
    within("train.history_points", cfg.train.history_points, MAX_STEPS, "points")
    positive("train.diverge_factor", cfg.train.diverge_factor)
    if not 0 < cfg.train.final_window <= 1:
        raise ConfigError(f"train.final_window must be in (0, 1], got {cfg.train.final_window!r}")
    if not 0 <= cfg.train.warmup_steps < cfg.train.steps:
        raise ConfigError(
            f"train.warmup_steps must be in [0, train.steps={cfg.train.steps}), got {cfg.train.warmup_steps!r}"
        )
    _check_lr_grid(cfg)
    _check_adaptive(cfg)
    _check_search(cfg)
    if cfg.engine.chunk < 0:
        raise ConfigError(f"engine.chunk must be >= 0 (0 = automatic), got {cfg.engine.chunk}")
    non_negative("engine.max_memory_gb", cfg.engine.max_memory_gb)
    if not math.isfinite(cfg.engine.max_memory_gb):
        raise ConfigError(f"engine.max_memory_gb must be a finite number of GiB (0 = automatic), got {cfg.engine.max_memory_gb}")
    if cfg.engine.graphs not in GRAPHS:
        raise ConfigError(f"engine.graphs={cfg.engine.graphs!r} is not one of: {', '.join(GRAPHS)}")
    if not 0 <= cfg.engine.checkpoint_s < math.inf:
        raise ConfigError(f"engine.checkpoint_s must be a number of seconds >= 0 (0 = never), got {cfg.engine.checkpoint_s}")
    if cfg.engine.threads < 0:
        raise ConfigError(f"engine.threads must be >= 0 (0 = automatic), got {cfg.engine.threads}")
    within("engine.threads", cfg.engine.threads, MAX_THREADS, "threads")
    device = cfg.engine.device
    if not (device in ("auto", "cpu", "cuda") or (device.startswith("cuda:") and device[5:].isdigit())):
        raise ConfigError(f"engine.device={device!r} is not one of: auto, cpu, cuda, cuda:N")
    if not cfg.name or "/" in cfg.name or cfg.name.startswith("."):
        raise ConfigError(f"name={cfg.name!r} must be a non-empty folder name without '/'")
    if not str(cfg.results_dir).strip():
        raise ConfigError("results_dir is empty: set results_dir=PATH (the default: results)")
    for group in (g for g in GROUPS if engine or g not in ENGINE_GROUPS):
        node = getattr(cfg, group)
        finite_fields(group, node)
        if hasattr(node, "check"):
            node.check()
        if hasattr(node, "check_with"):  # checks that need the rest of the config (model.heads vs width)
            node.check_with(cfg)
    if engine:
        combined.check_model_reads_data(cfg)
        _check_hp(cfg)
    _check_inner_grid(cfg)
    _check_points(cfg)
    if engine:
        combined.check_sde_rule(cfg)
        combined.check_param_has_tree(cfg)
        combined.check_attention_keys(cfg)
        combined.check_decay(cfg)
    return cfg

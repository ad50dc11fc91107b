"""The root config behind `conf/config.yaml`: its typed keys, the LR grid's precedence, Hydra's registration.

The options of each group (model, param, optim, data, tracker, trainer) are typed by dataclasses in
their own modules (see `lrtransfer/options/`); this module types the rest (sizes, seeds, the
LR grid, training, the engine) and registers both in Hydra's ConfigStore, so Hydra
rejects an unknown key or a value of the wrong type while composing, before any job
starts (`validate.py` adds the value checks).

This module imports no torch; `register` (run when `lrtransfer.conf` is imported,
that is when a config is composed) imports the option modules.
"""

from __future__ import annotations

import math
from functools import cache
from dataclasses import Field, dataclass, field, fields, make_dataclass
from enum import Enum
from typing import Any, List, Optional

from omegaconf import MISSING, DictConfig, OmegaConf

from lrtransfer import options
from lrtransfer.options import GROUPS, hp
from lrtransfer.options.schema import Grid

# The config's sections that say how a job runs (`engine`), where its results also go
# (`tracker`) and how a sweep chooses its jobs (`adaptive`, `search`): they change nothing a job
# computes, so they are no part of a job's identity (`identity.semantic`) and the
# analysis never groups runs by them.
RUN_SETTINGS = ("engine", "tracker", "adaptive", "search")


# ---------------------------------------------------------------- choices
class Schedule(str, Enum):
    constant = "constant"
    linear = "linear"
    cosine = "cosine"


class DType(str, Enum):
    """Training precision. Weights and optimizer state are float32 except under float64;
    bf16 computes every matrix product (forward and backward) in bfloat16 on bfloat16
    copies of the weights, the rest in float32 (`training/precision.py`); bf16_autocast
    is its former name, the same computation; tf32 lets CUDA matmuls and convolutions
    use TensorFloat-32, forward and backward, which the others forbid (no effect on a CPU)."""

    float32 = "float32"
    float64 = "float64"
    bf16 = "bf16"
    bf16_autocast = "bf16_autocast"
    tf32 = "tf32"


class Metric(str, Enum):
    """What a run is judged by: its final training loss, held-out loss or held-out accuracy."""

    train_loss = "train_loss"
    eval_loss = "eval_loss"
    eval_acc = "eval_acc"


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
    # An adaptive sweep refines each scale's optimum until the LR spacing around it is this
    # fine (octaves). No part of a job's identity: a job trains its grid whatever it is.
    resolution: float = 0.25

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


def steps_for(examples: int, *, _root_: DictConfig) -> int:
    """`${lrt_steps_for:N}`: the steps that train N examples at the job's `train.batch_size` (N // batch,
    at least 1): a study at a fixed number of examples (study=batch_examples) sweeps the batch alone."""
    return max(1, int(examples) // int(_root_.train.batch_size))


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


GRAPHS = ("auto", "always", "never")  # engine.graphs


@dataclass
class Engine:
    """How a job runs; none of it changes what is computed, so it is not part of a job's identity."""

    device: str = "auto"  # auto | cpu | cuda | cuda:N
    threads: int = 0  # 0: OMP_NUM_THREADS (or SLURM_CPUS_PER_TASK) when set, else one
    batched: bool = True  # train a job's runs as one ensemble; false: one run at a time
    # Runs per ensemble: 0 = as many as fit in max_memory_gb (estimated), N = at most N.
    chunk: int = 0
    # The memory budget (GiB); 0: 4 on a CPU, and on a GPU 80% of what it has free when the job starts.
    max_memory_gb: float = 0.0
    # Replay a GPU step as one CUDA graph: auto (where the step is launch-bound), always, never.
    graphs: str = "auto"
    progress: bool = True
    # Save the training state at most this often (seconds; 0: never), and when a stop
    # is requested; a re-run of an unfinished job resumes from it.
    checkpoint_s: float = 300.0


@dataclass
class Adaptive:
    """A sweep in rounds that spends its runs where the answer is still open
    (`lrtransfer sweep --until-decided`; `sweeps/adaptive.py`): a coarse LR grid first, then
    finer LRs around each scale's optimum down to `lr.resolution`, then seeds where the
    drift's interval is widest, until the verdict is decided or the budget is spent.
    None of it changes what a job computes: a run setting, no part of a job's identity."""

    enabled: bool = False
    coarse_step: float = 2.0  # octaves between round 1's learning rates, across lr.log2_min .. lr.log2_max
    budget: Optional[int] = None  # run-steps (LR runs x training steps) the sweep may spend; null: no limit
    budget_s: Optional[float] = None  # wall-clock seconds it may spend; null: no limit
    max_seeds: int = 10  # seeds per scale at most
    extend: float = 4.0  # octaves an optimum on the grid's edge may push it beyond lr.log2_min .. lr.log2_max
    metric: Metric = Metric.train_loss  # what the verdict is about


@dataclass
class Points:
    """A job's runs as rows (`Config.points`): row i trains at log2 LR `log2_lr[i]` with
    `values[i][j]` for `keys[j]`; `kind` says what made them and `round` when, for the readers: a
    search's round (search; baseline: its LR-only twin), the best of each trained at fresh seeds
    (confirm), a transfer check's scans (scan)."""

    keys: List[str] = field(default_factory=list)
    log2_lr: List[float] = field(default_factory=list)
    values: List[List[float]] = field(default_factory=list)
    kind: str = "search"
    round: int = 0
    # scan: the point the scans are around (its log2 LR, then its values of `keys`), and the LR-only
    # setting's (its log2 LR, then the job's own values): what the readers measure from
    centre: List[float] = field(default_factory=list)
    reference: List[float] = field(default_factory=list)


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
    # Per-module hyperparameters, `hp.<role>.<name>` (`options/hp.py`): each role's LR, init, Adam
    # betas and epsilon, and weight decay multipliers, null (unset) by default. Typed by `hp.schema`.
    hp: Any = field(default_factory=dict)
    # The runs of the job, one by one, where a grid cannot say them (a search's round, a scan around a
    # tuned vector): each row a log2 LR and its values of `keys` (per-run keys), trained at every
    # seed; no rows (the default): the LR grid (and `grid`) says the runs.
    points: Points = field(default_factory=Points)
    train: Train = field(default_factory=Train)
    engine: Engine = field(default_factory=Engine)
    tracker: Any = MISSING  # where results also go (lrtransfer/options/tracker/): no part of a job's identity
    trainer: Any = MISSING  # what trains the runs (lrtransfer/options/trainer/): the engine, or the user's command
    adaptive: Adaptive = field(default_factory=Adaptive)  # sweep in rounds until decided: no part of a job's identity
    # A search at the base scale (`lrtransfer tune`: `search.<key>=[lo,hi]`, its policy and budget) and the
    # check of its result at larger scales (`sweep --transfer-from`): no part of a job's identity.
    # Typed by `search_schema` when registered.
    search: Any = field(default_factory=dict)


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
            node = _importable(make_dataclass(f"{group.title()}Grid", [(k, Optional[List[float]], None) for k in keys]))
            nodes.append((group, node, field(default_factory=node)))
    grid_hp = hp_schema(of_lists=True)  # grid.hp.<role>.<name>: every per-module hyperparameter may vary per run
    nodes.append(("hp", grid_hp, field(default_factory=grid_hp)))
    return _importable(make_dataclass("InnerGrid", nodes))


SEARCH_POLICIES = ("random", "trust_region")


@cache
def search_schema() -> type:
    """The `search` node's dataclass: how `lrtransfer tune` searches, and a range [lo, hi] for each
    key it searches (`search.lr`, the global LR; `search.<key>`, any key `grid.<key>` may vary)."""
    settings = [
        ("enabled", bool, False),  # set by `lrtransfer tune`: the sweep is a search in rounds (`sweeps/tuning.py`)
        ("transfer_from", Optional[str], None),  # set by `sweep --transfer-from DIR`: scans around DIR's tuned vector
        ("policy", str, "trust_region"),  # random | trust_region (`sweeps/search.py`)
        ("round_size", int, 32),  # points each round trains (one ensemble)
        ("metric", str, "train_loss"),  # what a point is judged by: train_loss | eval_loss
        ("seeds", int, 3),  # fresh seeds the best point and the LR-only baseline's best are trained at, for intervals
        ("budget", Optional[int], None),  # run-steps the search may spend (its LR-only baseline spends as much); null: 4 rounds
        ("budget_s", Optional[float], None),  # wall-clock seconds the search may spend
        ("radius", float, 0.5),  # the trust region's first half-side, in unit coordinates of the box
        ("shrink", float, 0.5),  # the region's factor after a round without a better point
        ("scan", List[float], field(default_factory=lambda: [-2.0, -1.0, 0.0, 1.0, 2.0])),  # log2 factors the check scans
        ("lr", Optional[List[float]], None),  # the global LR's range (default: 2^lr.log2_min .. 2^lr.log2_max)
    ]
    ranges = [(f.name, f.type, field(default_factory=f.type)) for f in fields(grid_schema())]
    own = [(n, t, d if isinstance(d, Field) else field(default=d)) for n, t, d in settings]
    return _importable(make_dataclass("Search", own + ranges))


@cache
def hp_schema(of_lists: bool = False) -> type:
    """The `hp` node's dataclass (`options/hp.schema`), its classes importable by name from here."""
    root = hp.schema(of_lists)
    for cls in (root, *(f.type for f in fields(root))):
        _importable(cls)
    return root


def _importable(cls: type) -> type:
    """A class made at run time, found by name in this module (`__getattr__` below), so that
    pickle refers to it instead of copying it: a launcher (submitit) sends a job's config to
    another process and back, and cloudpickle, meeting its own copy of a class on the way back,
    writes the copy's fields over the original's, after which `dataclasses.fields` no longer
    recognises them and every later config in the process loses its `grid`."""
    cls.__module__, cls.__qualname__ = __name__, cls.__name__
    return cls


def __getattr__(name: str):
    """`InnerGrid`, `OptimGrid`, ...: the classes `grid_schema` makes, for unpickling by name."""
    if name.endswith("Grid"):
        root = grid_schema()
        found = {root.__name__: root, **{f.type.__name__: f.type for f in fields(root) if isinstance(f.type, type)}}
        if name in found:
            return found[name]
    if name == "Search":
        return search_schema()
    if name.startswith("Hp"):
        hp_schema(), hp_schema(of_lists=True)
        found = hp.classes()
        if name in found:
            return found[name]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def register() -> None:
    """Make the root schema and every option's dataclass (`schema/<group>/<name>`) visible to Hydra; idempotent."""
    from hydra.core.config_store import ConfigStore

    cs = ConfigStore.instance()
    root = OmegaConf.structured(Config)
    root.grid = OmegaConf.structured(grid_schema())
    root.hp = OmegaConf.structured(hp_schema())
    root.search = OmegaConf.structured(search_schema())
    cs.store(name="lrtransfer_schema", node=root)
    for group in GROUPS:
        for name, node in options.of(group).items():
            cs.store(group=f"schema/{group}", name=name, node=node)
    if not OmegaConf.has_resolver("lrt_lr"):
        OmegaConf.register_new_resolver("lrt_lr", lr_default, use_cache=False)
    if not OmegaConf.has_resolver("lrt_steps_for"):
        OmegaConf.register_new_resolver("lrt_steps_for", steps_for, use_cache=False)

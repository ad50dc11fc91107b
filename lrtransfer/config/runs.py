"""What a config says about a job's runs: how many (`runs_per_job`), along which inner axes
(`inner_grid`, `points`), with which per-run and tuned keys, and a search's ranges.

These read a typed `Config` or a record's resolved config dict alike, so the sweep, the
builder and the analysis ask the same questions the same way. No torch.
"""

from __future__ import annotations

from dataclasses import fields

from omegaconf import DictConfig, OmegaConf

from lrtransfer.config.keys import Config, grid_schema, search_schema
from lrtransfer.options import GROUPS, hp
from lrtransfer.options.schema import ConfigError


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


def search_ranges(cfg: Config | dict) -> dict[str, list]:
    """{"lr": [lo, hi], "hp.hidden.lr_mult": [lo, hi], ...}: the ranges a search is given (not null)."""
    node = cfg.get("search") if isinstance(cfg, dict) else cfg.search
    settings = {f.name for f in fields(search_schema())} - {f.name for f in fields(grid_schema())} - {"lr"}
    return {k: v for k, v in flatten(node).items() if v is not None and k.split(".")[0] not in settings}


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
    """The keys of this job whose value may differ between its runs (`grid.<key>`, `points.keys`):
    those its options declare (`PER_RUN`), and every per-module hyperparameter it can apply."""
    own = [f"{g}.{k}" for g in GROUPS for k in getattr(getattr(cfg, g), "PER_RUN", ())]
    return own + [k for k in hp.ALL_KEYS if applies(k, cfg)]


def applies(key: str, cfg: Config) -> bool:
    """Whether the per-module hyperparameter `key` means something for this job (`hp.check_applies`)."""
    try:
        hp.check_applies(key, cfg.optim, cfg.model)
    except ConfigError:
        return False
    return True


def has_points(cfg: Config | dict) -> bool:
    """Whether a job's runs are rows (`points`, a typed config's or a record's), not an LR grid."""
    p = cfg.get("points") if isinstance(cfg, dict) else cfg.points
    rows = p.get("log2_lr") if isinstance(p, dict) else getattr(p, "log2_lr", None)
    return bool(rows)


def varied_keys(cfg: Config) -> list[str]:
    """The per-run keys whose values this job's runs carry: its `grid.<key>`, its `points.keys`."""
    if has_points(cfg):
        return list(cfg.points.keys)
    found = inner_grid(cfg)
    return [] if found is None else [found[0]]


def tuned_keys(cfg: Config) -> list[str]:
    """The per-module hyperparameters this job sets, for all its runs (`hp.*`) or run by run."""
    return list(dict.fromkeys([*hp.set_values(cfg.hp), *(k for k in varied_keys(cfg) if k.startswith("hp."))]))


def run_steps(typed) -> int:
    """A job's work: one run per LR of its grid, value of its `grid.<key>` and seed (or per row of its
    `points`), each `train.steps` steps."""
    return runs_per_job(typed) * typed.train.steps


def runs_per_job(typed) -> int:
    """K: LRs x values of the second inner axis (1 without one) x seeds, or rows x seeds."""
    if has_points(typed):
        return typed.n_seeds * len(typed.points.log2_lr)
    found = inner_grid(typed)
    return typed.n_seeds * len(typed.lr.values()) * (1 if found is None else len(found[1]))

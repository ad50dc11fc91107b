"""What can be typed after `lrtransfer sweep`: config groups, their options, keys.

`sweep -h` and shell completion both read it from Hydra's config repository (the
same one a sweep composes from), so a new YAML file shows up in both at once.
Groups that lrtransfer fills in itself are left out: `schema/*` (the typed
schemas, ConfigStore entries) and `grid` (selected from `param` and `optim`).
"""

from __future__ import annotations

from omegaconf import OmegaConf

PRIMARY = "config"
INTERNAL = ("schema", "grid")  # never chosen by a user
CHOSEN_HYDRA_GROUPS = ("hydra/launcher",)  # Hydra's groups a user picks here
CHOSEN_HYDRA_KEYS = ("hydra.launcher.",)  # and keys a user sets (hydra.launcher.n_jobs=2)


def _loader():
    from hydra._internal.config_loader_impl import ConfigLoaderImpl
    from hydra._internal.utils import create_automatic_config_search_path

    import lrtransfer.config  # noqa: F401  (stores the schemas the primary config names)
    import lrtransfer.store  # noqa: F401  (registers the job-id resolver)

    return ConfigLoaderImpl(config_search_path=create_automatic_config_search_path(PRIMARY, None, "pkg://lrtransfer.conf"))


def is_user_facing(name: str) -> bool:
    """An override a user types, as opposed to one lrtransfer or Hydra fills in."""
    name = name.lstrip("+~")
    if name.startswith("hydra"):
        return name.startswith(CHOSEN_HYDRA_GROUPS + CHOSEN_HYDRA_KEYS)
    return name.split("=", 1)[0].split("/", 1)[0].split(".", 1)[0] not in INTERNAL


def groups() -> dict[str, list[str]]:
    """Each user-facing group and its options, in the primary config's order."""
    from hydra.core.object_type import ObjectType

    loader = _loader()
    names = [g for g in loader.get_group_options("", ObjectType.GROUP) if g != "hydra" and is_user_facing(g)]
    names += list(CHOSEN_HYDRA_GROUPS)
    return {g: loader.get_group_options(g, ObjectType.CONFIG) for g in names}


def defaults() -> tuple[dict[str, str], dict]:
    """The default option of each group, and the composed default config (without `hydra`)."""
    from hydra.types import RunMode

    cfg = _loader().load_configuration(PRIMARY, overrides=[], run_mode=RunMode.RUN)
    chosen = OmegaConf.to_container(cfg.hydra.runtime.choices)
    with_hydra = OmegaConf.to_container(cfg, resolve=False)
    with_hydra.pop("hydra")
    return {k: str(v) for k, v in chosen.items()}, with_hydra


def grid_keys() -> list[str]:
    """The keys a second inner axis may take (`grid.<key>`): those some option declares PER_RUN."""
    from lrtransfer.config import flatten, grid_schema

    return list(flatten(grid_schema()()))


def help_text() -> str:
    """`lrtransfer sweep -h`: the groups a user picks from, the top-level keys, where to see the rest."""
    chosen, cfg = defaults()
    lines = ["Usage: lrtransfer sweep [--plan] [--rerun] [--until-decided [--budget B]] [OVERRIDES]...", "",
             "Config groups (group=option; the default in brackets; a comma list sweeps several):"]
    for group, options in groups().items():
        marked = [f"[{o}]" if o == chosen.get(group) else o for o in options]
        lines.append(f"  {group:<16} {' '.join(marked) if marked else '(none)'}")
    scalars = [f"{k}={v}" for k, v in cfg.items() if not isinstance(v, dict)]
    sections = [f"{k}.*" for k, v in cfg.items() if isinstance(v, dict)]
    lines += ["", "Keys (key=value; width=64,256,1024 or seed=range(3) sweeps):", "  " + "  ".join(scalars),
              "  " + "  ".join(sections),
              f"  grid.KEY=[0,1e-3,1e-2]: every LR at each value, in one job; KEY: {', '.join(grid_keys())}",
              "", "lrtransfer sweep --cfg job [OVERRIDES]   the composed config of the (first) job, every key",
              "lrtransfer sweep --plan [OVERRIDES]      the jobs a sweep would run, done or not, and their cost",
              "lrtransfer sweep --help                  the command's options"]
    return "\n".join(lines)


def complete(previous: list[str], incomplete: str) -> list[str]:
    """Completions of one override, from Hydra's completion engine, without internal groups."""
    from hydra._internal.core_plugins.bash_completion import BashCompletion

    words = [w for w in previous if "=" in w and not w.startswith("-")]
    line = " ".join([*words, incomplete])
    try:
        found = BashCompletion(_loader())._query(config_name=PRIMARY, line=line)
    except Exception:  # a half-typed override that does not compose: nothing to offer
        return []
    chosen = [f"{g}=" for g in CHOSEN_HYDRA_GROUPS if f"{g}=".startswith(incomplete) and "=" not in incomplete]
    return [c for c in found if is_user_facing(c) and c not in chosen] + chosen

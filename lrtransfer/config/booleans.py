"""A boolean key takes true or false, wherever it is set: OmegaConf reads any number, 'yes' or 'on'
given to a bool as true (or 0 as false) without a word, on the command line (`param.eps_by_width=2`)
and in a YAML file alike (`layer_norm: 2` in a study of the user's `--config-dir`, or in an option's
own file the user edited). Both are refused, naming the value and where it was written.
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

from omegaconf import BooleanNode, DictConfig, OmegaConf

from lrtransfer.options.schema import ConfigError

BOOLEAN_WORDS = ("true", "false")  # a quoted 'true' is still unambiguous


def is_boolean_word(value) -> bool:
    return isinstance(value, bool) or value is None or str(value).lower() in BOOLEAN_WORDS


def check_booleans(cfg: DictConfig, overrides: list[str]) -> None:
    """The command line's values of boolean keys (any: `fields` typed bool, in every group and section)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    for o in OverridesParser.create().parse_overrides(overrides):
        if o.is_delete() or o.is_sweep_override():
            continue
        if isinstance(_node(cfg, o.key_or_group), BooleanNode) and not is_boolean_word(o.value()):
            raise ConfigError(f"{o.key_or_group}={o.get_value_element_as_str()} is not a boolean; valid: true, false")


def check_yaml_booleans(cfg: DictConfig) -> None:
    """The values of boolean keys in the YAML files a job's config was composed of (its primary config
    and each group's chosen option, read as Hydra found them: `hydra.runtime`). `cfg`: a job's
    config with its `hydra` node; the files are read as OmegaConf reads them ('yes' stays a word)."""
    runtime = OmegaConf.select(cfg, "hydra.runtime", default=None)
    if runtime is None:
        return
    folders = [f for f in (_folder(s) for s in runtime.config_sources if s.provider != "hydra") if f is not None]
    chosen = [("", "config")] + [(g, o) for g, o in runtime.choices.items() if o and not g.startswith("hydra")]
    for group, option in chosen:
        for folder in folders:
            path = folder / group / f"{option}.yaml"
            if path.is_file():
                package, values = _read(str(path), os.stat(path).st_mtime_ns)
                package = group.replace("/", ".") if package is None else package
                for key, value in _leaves(values, "" if package in ("", "_global_") else package):
                    if isinstance(_node(cfg, key), BooleanNode) and not is_boolean_word(value):
                        raise ConfigError(f"{key}: {value!r} in {path} is not a boolean; valid: true, false")
                break


def _node(cfg: DictConfig, key: str):
    parent, _, leaf = key.rpartition(".")
    node = OmegaConf.select(cfg, parent, default=None) if parent else cfg
    return node._get_node(leaf) if isinstance(node, DictConfig) and leaf in node else None


def _folder(source) -> Path | None:
    """A config source's folder on disk: a file:// one (`--config-dir`) or a package's (pkg://)."""
    if source.schema == "file":
        return Path(source.path)
    if source.schema == "pkg":
        import importlib.resources

        try:
            return Path(str(importlib.resources.files(source.path)))
        except (ModuleNotFoundError, TypeError):
            return None
    return None


@lru_cache(maxsize=256)
def _read(path: str, mtime_ns: int) -> tuple[str | None, dict]:
    """(the file's `# @package` header, None for none; its mapping), read once per version of it."""
    import yaml
    from omegaconf._utils import get_yaml_loader

    text = Path(path).read_text()
    package = None
    for line in text.splitlines():
        if line.startswith("# @package"):
            package = line.removeprefix("# @package").strip()
            break
    try:
        values = yaml.load(text, Loader=get_yaml_loader())
    except yaml.YAMLError:
        return package, {}  # Hydra's own composition says what is wrong with it
    return package, values if isinstance(values, dict) else {}


def _leaves(values: dict, prefix: str):
    """(dotted key, value) of every scalar below a mapping; its defaults list left out."""
    for key, value in values.items():
        if key == "defaults" and not prefix:
            continue
        dotted = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict):
            yield from _leaves(value, dotted)
        elif not isinstance(value, list):
            yield dotted, value

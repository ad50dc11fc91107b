"""Hydra's and OmegaConf's exceptions as the one line a user can act on.

Hydra and OmegaConf report composition problems as multi-line messages wrapped in
several exception layers. `describe` finds the useful part (the bad value, the key,
the valid choices) and says it in one line; exceptions it does not recognise
return None, and the CLI lets them through as the bugs they are.
"""

from __future__ import annotations

import re

from lrtransfer.errors import UserError, choices, lr_hint


def _first_line(text: str) -> str:
    return next((line.strip() for line in str(text).splitlines() if line.strip()), "")


def describe(exc: BaseException) -> str | None:
    """One line for a known kind of user error, or None."""
    from hydra.errors import HydraException, MissingConfigException, OverrideParseException
    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, OmegaConfBaseException, ValidationError

    if isinstance(exc, UserError):
        return str(exc)
    yaml_error = _yaml_error(exc) or _not_utf8(exc)
    if yaml_error:
        return yaml_error
    if isinstance(exc, MissingConfigException):
        return _missing_config(exc)
    if isinstance(exc, OverrideParseException):
        line = f"cannot parse override: {_first_line(exc)}"
        if exc.override and exc.override not in line:  # Hydra's parser names the token, not the override
            line = f"cannot parse override {exc.override!r}: {_first_line(exc)}"
        if "=~" in line:  # the shell expands ~ only at a word's start, and the override grammar refuses it
            line += "; write the path with $HOME, or quote it: 'data.root=\"~/data\"'"
        return line
    cause = exc.__cause__ or exc.__context__
    if isinstance(exc, HydraException) and isinstance(cause, OmegaConfBaseException):
        exc = cause
    if isinstance(exc, (ConfigKeyError, ConfigAttributeError)):
        return _unknown_key(exc)
    if isinstance(exc, ValidationError):
        key = getattr(exc, "full_key", None)
        msg = _first_line(str(exc))
        return _not_a_section(key, msg) or (f"{key}: {msg}" if key else msg)
    if isinstance(exc, OmegaConfBaseException):
        return _first_line(str(exc))
    if isinstance(exc, HydraException):
        return _first_line(str(exc))
    if isinstance(exc, (MemoryError, RuntimeError, OverflowError)) and too_large(exc):  # inspect width=10^8, ...
        return f"too large for this machine ({_first_line(str(exc))[:200] or type(exc).__name__}); choose smaller sizes"
    return None


def _not_a_section(key: str | None, msg: str) -> str | None:
    """A value where a section of keys belongs (`train: 5` in a YAML, `train=5`): OmegaConf names the
    section's class (`int is not a subclass of Train`), and a YAML's merge names no key at all."""
    import dataclasses

    from lrtransfer.config.validate import SECTIONS

    m = re.search(r"(\w+) is not a subclass of (\w+)\. value: (.*)$", msg)
    found = next(((k, c) for k, c in SECTIONS.items() if m and c.__name__ == m.group(2)), None)
    if found is None:
        return None
    name, section = found
    keys = [f.name for f in dataclasses.fields(section)]
    advice = lr_hint(key or name, m.group(3)) or f"; set its keys one by one ({name}.{keys[0]}=...)"
    return f"{key or name}={m.group(3)}: {name} is a section of keys ({', '.join(keys)}), not a value{advice}"


def _missing_config(exc) -> str:
    from lrtransfer.sweeps.launchers import PLUGIN_EXTRAS

    text = str(exc)
    missing = getattr(exc, "missing_cfg_file", None) or ""
    group, _, option = missing.rpartition("/")
    if group == "hydra/launcher" and option in PLUGIN_EXTRAS:
        extra = PLUGIN_EXTRAS[option]
        return (f"the launcher needs Hydra's {option} launcher plugin, which is not installed here: "
                f"pip install 'lrtransfer[{extra}]'")
    m = re.search(r"Could not find '([^']+)'", text)
    options = getattr(exc, "options", None) or re.findall(r"^\t(\S+)$", text, flags=re.M)
    if m and "/" in m.group(1):
        group, _, option = m.group(1).rpartition("/")
        if options:
            return f"unknown option '{option}' for {group}{choices(options, option)}"
        return f"unknown option '{option}' for {group} (no such config group or file)"
    return _first_line(text)


def _unknown_key(exc) -> str:
    key = getattr(exc, "full_key", None) or getattr(exc, "key", None) or "?"
    parent = getattr(exc, "parent_node", None)
    leaf = str(key).rsplit(".", 1)[-1]
    valid = []
    if parent is not None:
        try:
            valid = [k for k in parent.keys() if k != "hydra"]
        except Exception:  # pragma: no cover - parent of unexpected type
            valid = []
    where = f" in '{str(key).rsplit('.', 1)[0]}'" if "." in str(key) else ""
    if valid:
        return f"unknown key '{key}'{where}{choices(valid, leaf)}{lr_hint(key)}"
    return f"unknown key '{key}'{lr_hint(key)}"


def too_large(e: BaseException) -> bool:
    """Whether building failed because a size overflowed a 64-bit count or the memory: the sizes
    are the user's (a width, a vocabulary, a data set), so that is a bad value, not a bug."""
    text = str(e).lower()
    return isinstance(e, (OverflowError, MemoryError)) or any(
        w in text for w in ("overflow", "not enough memory", "cannot allocate", "can't allocate", "out of memory"))


def _not_utf8(exc: BaseException) -> str | None:
    """A config file that is not UTF-8 text, named by the config path Hydra was loading."""
    while exc is not None and not isinstance(exc, UnicodeDecodeError):
        exc = exc.__cause__ or exc.__context__
    if exc is None:
        return None
    name, tb = "a config file", exc.__traceback__
    while tb is not None:  # the innermost frame that names the file being read: a --config-dir's, or ours
        found = tb.tb_frame.f_locals
        if isinstance(found.get("full_path"), str):
            name = found["full_path"]
        elif isinstance(found.get("config_path"), str):
            name = f"conf/{found['config_path'].removesuffix('.yaml')}.yaml"
        tb = tb.tb_next
    return (f"{name} is not UTF-8 text (byte {exc.object[exc.start:exc.start + 1]!r} at position {exc.start}); "
            "save it as UTF-8")


def _yaml_error(exc: BaseException) -> str | None:
    """A YAML syntax error anywhere in the exception's chain, with file, line and column."""
    import yaml

    while exc is not None and not isinstance(exc, yaml.YAMLError):
        exc = exc.__cause__ or exc.__context__
    if exc is None:
        return None
    mark = getattr(exc, "problem_mark", None)
    where = f"{mark.name}, line {mark.line + 1}, column {mark.column + 1}" if mark else "a config file"
    problem = " ".join(str(p) for p in (getattr(exc, "context", None), getattr(exc, "problem", None)) if p)
    return f"YAML error in {where}: {problem or _first_line(str(exc))}"

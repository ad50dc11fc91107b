"""One typed config per width (or per scale), composed from sweep-style overrides, for the commands
that look into a model instead of sweeping it (`coord-check`, `inspect`).

Composed by Hydra from the same `conf/` as `sweep`, so the same overrides and checks
apply; only `width` may list values, or under `scales=True` (inspect) any key whose values
are numbers (width, depth, train.batch_size, ...): a config per combination.
"""

from __future__ import annotations

import itertools
import math

from lrtransfer.config import ConfigError, validate


def compose(overrides: list[str], *, default_widths: list[int] | None, min_widths: int = 2,
            command: str = "coord-check", scales: bool = False):
    """The typed job config of `overrides` at each width it lists (each combination of the scale
    keys it lists, under `scales`), in ascending order of each key, the first key outermost.

    Composed by Hydra from the same `conf/` as `sweep`; `width` alone may list values
    (`width=64,256,1024`), or with `scales` any key of numbers (`depth=2,4,8`); any other
    sweep is refused. Without `width`, `default_widths` (None: the config's own width).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.override_parser.overrides_parser import OverridesParser

    import lrtransfer.store  # noqa: F401  (registers the job-id resolver the config names)

    parsed = OverridesParser.create().parse_overrides(overrides)
    widths: list[int] | None = None
    listed: dict[str, list[str]] = {}  # a scale key other than width -> its values, as given
    keep = []
    for o, text in zip(parsed, overrides):
        if o.key_or_group == "width":
            values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
            widths = [_int_width(v) for v in values]
        elif o.is_sweep_override() and scales and all(_number(v) is not None for v in o.sweep_string_iterator()):
            listed[o.key_or_group] = sorted(dict.fromkeys(o.sweep_string_iterator()), key=_number)
        elif o.is_sweep_override():
            what = "width or another key of numbers (depth=2,4)" if scales else "width"
            raise ConfigError(f"{command} runs one config{' per scale' if scales else ''}: only {what} may list "
                              f"values, not '{text}'")
        else:
            keep.append(text)
    widths = widths or default_widths
    if widths is not None and len(set(widths)) < min_widths:
        count = {1: "one width", 2: "two widths"}.get(min_widths, f"{min_widths} widths")
        raise ConfigError(f"{command} needs at least {count}, got {widths}")
    axes = ([[f"width={w}" for w in sorted(set(widths))]] if widths is not None else []) + [
        [f"{key}={v}" for v in values] for key, values in listed.items()]
    with initialize_config_module("lrtransfer.conf", version_base="1.3"):
        return [validate(hydra_compose("config", overrides=[*keep, *combo]), keep) for combo in itertools.product(*axes)]


def _number(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _int_width(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"width={text!r} is not an integer") from None

"""One typed config per width, composed from sweep-style overrides, for the commands that
look into a model instead of sweeping it (`coord-check`, `inspect`).

Composed by Hydra from the same `conf/` as `sweep`, so the same overrides and checks
apply; only `width` may list values.
"""

from __future__ import annotations

from lrtransfer.config import ConfigError, validate


def compose(overrides: list[str], *, default_widths: list[int] | None, min_widths: int = 2,
            command: str = "coord-check"):
    """The typed job config of `overrides` at each width it lists.

    Composed by Hydra from the same `conf/` as `sweep`; `width` alone may list
    values (`width=64,256,1024`), any other sweep is refused. Without `width`,
    `default_widths` (None: the config's own width).
    """
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.override_parser.overrides_parser import OverridesParser

    import lrtransfer.store  # noqa: F401  (registers the job-id resolver the config names)

    parsed = OverridesParser.create().parse_overrides(overrides)
    widths: list[int] | None = None
    keep = []
    for o, text in zip(parsed, overrides):
        if o.key_or_group == "width":
            values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
            widths = [_int_width(v) for v in values]
        elif o.is_sweep_override():
            raise ConfigError(f"{command} runs one config: only width may list values, not '{text}'")
        else:
            keep.append(text)
    widths = widths or default_widths
    if widths is not None and len(set(widths)) < min_widths:
        count = {1: "one width", 2: "two widths"}.get(min_widths, f"{min_widths} widths")
        raise ConfigError(f"{command} needs at least {count}, got {widths}")
    with initialize_config_module("lrtransfer.conf", version_base="1.3"):
        if widths is None:
            return [validate(hydra_compose("config", overrides=keep), keep)]
        return [validate(hydra_compose("config", overrides=[*keep, f"width={w}"]), keep) for w in sorted(set(widths))]


def _int_width(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise ConfigError(f"width={text!r} is not an integer") from None

"""The options: every model, parameterization, optimizer, dataset, tracker and trainer, and the finder.

An option is one module here and one YAML file of the same name:
`conf/<group>/<name>.yaml` is implemented by `lrtransfer/options/<group>/<name>.py`, which
names its typed options `OPTIONS` (a dataclass whose `name` is `<name>`, or one
shared by several options of a kind, as the image datasets share theirs). Nothing
lists the options: this module scans each group's package, so a new option is its
module and its YAML file, and nothing else.

What this folder may import: `nn/` (the atoms models are built of, their linear
algebra), `errors`, and one another within a group (a model its group's helpers, an
optimizer `options.optim.kernels`). Never the config, the engine or anything above:
an option receives its own typed options and the few numbers it needs.
`schema.py` is what every option's typed options are made of.

`config.register` puts every option's dataclass in Hydra's ConfigStore as
`schema/<group>/<name>`, where its YAML file's defaults list finds it. Scanning
imports the option modules (and so torch): it runs when a config is composed,
never on `lrtransfer --help` or the analysis commands.
"""

from __future__ import annotations

import importlib
import pkgutil
from functools import cache

GROUPS = ("model", "param", "optim", "data", "tracker", "trainer")


@cache
def of(group: str) -> dict[str, type]:
    """Option name -> its options dataclass, for every module of the group's package that defines `OPTIONS`."""
    package = importlib.import_module(f"{__name__}.{group}")
    found = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        options = getattr(importlib.import_module(f"{__name__}.{group}.{info.name}"), "OPTIONS", None)
        if options is not None:
            found[info.name] = options
    return found


def module(group: str, name: str):
    """The module that implements option `name` of `group`."""
    return importlib.import_module(f"{__name__}.{group}.{name}")

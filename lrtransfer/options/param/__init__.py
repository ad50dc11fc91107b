"""Parameterizations. `conf/param/<name>.yaml` is implemented by `lrtransfer/options/param/<name>.py`,
which defines its options (`OPTIONS`, a dataclass) and one `Parameterization`
subclass whose `name` is `<name>`."""

from __future__ import annotations

import inspect

from lrtransfer import options
from lrtransfer.nn import Slot
from lrtransfer.options.param.base import Parameterization


def parameterization_class(name: str) -> type[Parameterization]:
    module = options.module("param", name)
    found = [obj for obj in vars(module).values()
             if inspect.isclass(obj) and issubclass(obj, Parameterization) and obj.name == name]
    # the module's own class first: standard.py imports the base class, whose name is "standard" too
    for obj in sorted(found, key=lambda c: c.__module__ != module.__name__):
        return obj
    raise LookupError(f"lrtransfer.options.param.{name} defines no Parameterization named {name!r}")


__all__ = ["Parameterization", "Slot", "parameterization_class"]

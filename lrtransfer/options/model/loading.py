"""Importing the callable `model.target` or `model.config` names: `path/file.py:NAME`, imported as
Python imports a script (its folder on the path, so that it imports the files beside it), or
`package.module:NAME`, found as `python -m` finds it. A file is imported once per process, since
a config class must stay the class the target checks against; whatever stops the import is one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

from lrtransfer.errors import ConfigError, one_line


def split(target: str) -> tuple[str, str]:
    where, _, name = target.rpartition(":")
    return where, name


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where


def load(target: str, key: str = "model.target") -> Callable:
    """The callable `target` names (`path/file.py:NAME` or `package.module:NAME`), or a one-line
    ConfigError saying why not; `key` is the config key it came from."""
    where, name = split(target)
    try:
        if _is_file(where):
            path = Path(where)
            if not path.is_file():
                raise ConfigError(f"{key}={target}: no file {where} (relative to {Path.cwd()})")
            module_key = f"lrtransfer_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}_{path.stem}"
            module = sys.modules.get(module_key)
            if module is None:  # once per process: a config class must stay the class the target checks against
                spec = importlib.util.spec_from_file_location(module_key, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_key] = module  # dataclasses and pickling look the module up by name
                try:
                    with _beside(path):
                        spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[module_key]
                    raise
        else:
            module = _import_from_here(where)
    except ConfigError:
        raise
    except BaseException as e:  # a SyntaxError, an ImportError, anything the file raises, even SystemExit
        raise ConfigError(f"{key}={target} does not import: {one_line(e)}") from None
    if not hasattr(module, name):
        known = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(f"{key}={target}: {where} defines no {name!r}; callables there: "
                          f"{', '.join(known[:12]) or 'none'}")
    fn = getattr(module, name)
    if not callable(fn):
        raise ConfigError(f"{key}={target}: {name} is a {type(fn).__name__}, not a class or function")
    return fn


@contextlib.contextmanager
def _beside(path: Path) -> Iterator[None]:
    """The file's folder first on the module path while it is imported, as Python puts a script's
    folder there (`python nets.py`), so that it imports a module beside it (`import helper`); taken
    off again after, leaving whatever the file itself added. (Its id follows those files:
    `sources.imported_files` looks beside the importing file first.)"""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _import_from_here(name: str):
    search_here()
    return importlib.import_module(name)


def search_here() -> None:
    """Find a `package.module` target as `python -m` does: installed, or in the folder the sweep
    runs from (searched last, so that it shadows nothing installed). The `lrtransfer` command,
    unlike `python`, does not put that folder on the path itself."""
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)

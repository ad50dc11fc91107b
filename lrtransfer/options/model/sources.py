"""The local source files a user's model is built from, by content: what `model.source` hashes.

`model.target` and `model.config` name code in files, and those files import others. A job's
identity covers every one of them that is *local* (in neither the standard library nor an
installed package's folder), so that editing any of them recomputes the jobs built from them,
while moving one with its content unchanged does not. The imports are found by reading each
file's `import` statements (`ast`), never by running it.

They are looked up where the filesystem alone can tell, the same in a sweep's process and in
its workers (whose `sys.path` differs): beside the importing file, in the folder its package
sits in, in the working folder and in PYTHONPATH's folders. An import made by name at run time
(`importlib.import_module(name)`) is not seen.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import os
import site
import sys
import sysconfig
from contextlib import suppress
from functools import cache
from pathlib import Path

from lrtransfer.options.model.loading import _is_file, search_here, split

MAX_FILES = 2000  # a closure larger than this is a whole installed library, not a model's own files


def source_hash(target: str, config: str = "") -> str:
    """The target file's sha1 (its first 16 hex digits; '' when the file cannot be found: building
    then says why), followed, where the model is built from more local files than that one (the
    config class's file, the modules they import), by '+' and one sha1 of those files' contents.

    A model in one file keeps the identity it had before the other files counted.
    """
    first = origin(target)
    own = _digest(first)[:16] if first is not None else ""
    roots = [p for p in (first, origin(config)) if p is not None and is_local(p)]
    others = {p for p in closure(roots) if p != first}
    if not others:
        return own
    combined = hashlib.sha1("".join(sorted(_digest(p) for p in others)).encode()).hexdigest()[:16]
    return f"{own}+{combined}"


def origin(target: str) -> Path | None:
    """The file `target` (`path/file.py:NAME` or `package.module:NAME`) lives in, or None. A file
    path is only looked at; a module's spec is looked up, which imports its parent packages, as
    building the model will."""
    where, _ = split(target)
    if not where:
        return None
    try:
        if _is_file(where):
            path = Path(where)
        else:
            search_here()
            spec = importlib.util.find_spec(where)
            path = Path(spec.origin) if spec is not None and spec.origin else None
        return path.resolve() if path is not None and path.is_file() else None
    except Exception:  # a module that cannot be found (or whose parent raises): building says why
        return None


@cache
def _installed() -> tuple[Path, ...]:
    paths = sysconfig.get_paths()
    roots = {paths[k] for k in ("stdlib", "platstdlib", "purelib", "platlib") if k in paths}
    roots |= set(getattr(site, "getsitepackages", list)())
    return tuple(Path(r).resolve() for r in roots)


def is_local(path: Path) -> bool:
    """A file of the user's own, not of Python's standard library or of an installed package."""
    path = path.resolve()
    if {"site-packages", "dist-packages"} & set(path.parts):
        return False
    return not any(path.is_relative_to(root) for root in _installed())


def closure(roots: list[Path]) -> set[Path]:
    """`roots` and every local file they import, directly or through each other."""
    seen: set[Path] = set()
    todo = list(roots)
    while todo and len(seen) < MAX_FILES:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        todo += [p for p in imported_files(path) if p not in seen and is_local(p)]
    return seen


def _stamp(path: Path) -> tuple | None:
    """What tells one version of a file from another, so that each is read and parsed once."""
    try:
        st = path.stat()
    except OSError:
        return None
    return path, st.st_mtime_ns, st.st_size


def _digest(path: Path) -> str:
    stamp = _stamp(path)
    return _digest_of(stamp) if stamp else ""


@cache
def _digest_of(stamp: tuple) -> str:
    try:
        return hashlib.sha1(stamp[0].read_bytes()).hexdigest()
    except OSError:
        return ""


def imported_files(path: Path) -> list[Path]:
    """The files the module at `path` imports that can be found (see the module doc)."""
    stamp = _stamp(path)
    if stamp is None:
        return []
    top = path.parent
    while (top / "__init__.py").is_file():  # the folder its outermost package sits in
        top = top.parent
    extra = [Path(p) for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    with suppress(OSError):  # a working folder that was removed has nothing to import from
        extra.insert(0, Path.cwd())
    folders = list(dict.fromkeys(p.resolve() for p in (path.parent, top, *extra)))
    out: list[Path] = []
    for level, module, names in _imports(stamp):
        if level:  # relative: from the importing file's package, `level - 1` packages up
            if level > len(path.parents):
                continue
            where = [path.parents[level - 1]]
        else:
            where = folders
        if module:
            out += module_files(module, where, absolute=not level)
        for name in names:  # `from package import module`: a submodule, where there is one
            out += module_files(f"{module}.{name}".lstrip("."), where, whole=True, absolute=not level)
    return list(dict.fromkeys(out))


@cache
def _imports(stamp: tuple) -> list[tuple[int, str, list[str]]]:
    """(level, module, names) of each import statement of the file at `stamp[0]`: `import a.b` is
    (0, "a.b", []), `from .m import x` (1, "m", ["x"]). Parsed once per version of the file."""
    try:
        tree = ast.parse(stamp[0].read_bytes(), filename=str(stamp[0]))
    except (SyntaxError, ValueError, OSError):  # it will not import either: building says why
        return []
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out += [(0, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or "", [alias.name for alias in node.names]))
    return out


def module_files(dotted: str, folders: list[Path], whole: bool = False, absolute: bool = True) -> list[Path]:
    """The files importing `dotted` runs (each package's `__init__.py`, then the module), from
    the first folder that holds it; [] for the standard library or where none does. `whole`:
    only if the last part is a module there, not a name defined in its package."""
    parts = dotted.split(".")
    if absolute and (parts[0] in sys.stdlib_module_names or parts[0] in sys.builtin_module_names):
        return []
    for folder in folders:
        files, here = [], folder
        for i, part in enumerate(parts):
            package, module = here / part, here / f"{part}.py"
            if (package / "__init__.py").is_file():
                files.append(package / "__init__.py")
            elif i == len(parts) - 1 and module.is_file():
                files.append(module)
            elif not package.is_dir():  # a namespace package is a plain folder
                files = None if whole or i == 0 else files
                break
            here = package
        if files:
            return [f.resolve() for f in files]
    return []

"""The folder a task keeps what it makes from its data (`data.cache`): a tokenized stream
(data=hf_disk), a generated set (data=mnist1d).

A cache that cannot be used is said in one line before anything is made: a path under
/proc, a regular file (or under one), a read-only folder (`usable`). A file is written
whole or not at all (`whole_file`): under a temporary name beside it, renamed into place
once complete, so a later run never reads half of one; a write that fails part way (a
full disk) is one line saying so, and leaves nothing behind.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path

from lrtransfer.errors import Fault, file_kind
from lrtransfer.options.data.formats import DataError


def cache_folder(cache: str | None) -> Path:
    """Where a task keeps what it makes from its data (`data.cache`): by default the user's cache
    folder, $XDG_CACHE_HOME/lrtransfer or ~/.cache/lrtransfer, never the data's own folder or a results folder."""
    if cache:
        return Path(cache).expanduser().resolve()
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lrtransfer"


def usable(cache: str | None, sub: str = "", *, keep: bool = True) -> Path:
    """`cache_folder(cache) / sub`, made where missing and a file written in it (then removed), or a
    DataError naming data.cache and why it cannot be used. `keep=False` (a plan, which writes
    nothing) removes the folders it made to find out."""
    folder = cache_folder(cache) / sub
    made = [p for p in (folder, *folder.parents) if not os.path.lexists(p)]  # deepest first
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
            pass
    except OSError as e:
        given = f"data.cache={cache}" if cache else f"data.cache (unset: {cache_folder(None)})"
        raise DataError(f"{given}: cannot keep files in {folder} ({_why(folder, e)}); give data.cache=PATH, "
                        "a folder you can write") from None
    finally:
        for p in made if not keep else ():
            with suppress(OSError):
                p.rmdir()
    return folder


def _why(folder: Path, e: OSError) -> str:
    """What stands in the way: the first part of the path that is there but is no folder, else the system's word."""
    for p in (*reversed(folder.parents), folder):
        try:
            mode = p.stat().st_mode
        except OSError:
            break
        if not stat.S_ISDIR(mode):
            kind = "a regular file" if stat.S_ISREG(mode) else file_kind(mode)
            return f"{p} is {kind}, not a folder"
    return e.strerror or str(e)


@contextmanager
def whole_file(path: Path) -> Iterator[Callable[[bytes], None]]:
    """Gives a `write(bytes)` into `path`, which appears only once the block ends without an error:
    written as `.<name>.<pid>.tmp` beside it and renamed; an error (a DataError about the data, a
    full disk) leaves nothing behind. A write that fails is a Fault: one line, exit 1."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")

    def fault(e: OSError) -> Fault:
        return Fault(f"could not write {path} ({e.strerror or e}): nothing half-written is kept; free some space "
                     f"in {path.parent} (or give data.cache=PATH) and run again")

    try:
        try:
            f = open(tmp, "wb")
        except OSError as e:
            raise fault(e) from None
        with f:
            def write(data: bytes) -> None:
                try:
                    f.write(data)
                except OSError as e:
                    raise fault(e) from None

            yield write
            try:
                f.flush()
                os.fsync(f.fileno())
            except OSError as e:
                raise fault(e) from None
        try:
            os.replace(tmp, path)
        except OSError as e:
            raise fault(e) from None
    finally:
        tmp.unlink(missing_ok=True)

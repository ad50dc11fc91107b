"""A data file known by what it holds, not by where it is.

A token file of billions of tokens cannot be hashed whole each time a job's id is
computed, and its path says nothing about what it holds: a file is known by its size
and a hash of its first and last MiB (a changed file almost always changes one of
them: a re-tokenised set, an appended shard, a different vocabulary's ids); a folder
(a `datasets` dataset saved to disk) by those of each file in it, with their names
relative to it. A path field of an option marked `content` (`schema.content`) enters
a job's identity this way (`config.identity.semantic`), so moving the data does not
retrain and changing it does.
"""

from __future__ import annotations

import hashlib
import stat
from functools import lru_cache
from pathlib import Path

from lrtransfer.errors import file_kind

EDGE = 1 << 20  # bytes hashed at each end of a file


def fingerprint(path: str, with_files: tuple[str, ...] = ()) -> str:
    """'<size>:<hash>' of a file, or of a folder's files; `with_files`: files beside `path` that travel
    with it (nanoGPT's meta.pkl beside train.bin), added where they exist; 'missing' when nothing is there
    (the data's own check says so before any job)."""
    p = Path(path).expanduser()
    if not p.exists():
        return "missing"
    parts = [_of(p)]
    for name in with_files:
        companion = p.parent / name
        if companion.is_file():
            parts.append(f"{name} {_of(companion)}")
    return " + ".join(parts)


def _of(p: Path) -> str:
    if p.is_dir():
        files = sorted(f for f in p.rglob("*") if f.is_file() and not f.name.startswith("."))
        text = "\n".join(f"{f.relative_to(p).as_posix()} {_file(f)}" for f in files)
        return f"{len(files)} files:{hashlib.sha1(text.encode()).hexdigest()[:16]}"
    return _file(p)


def _file(p: Path) -> str:
    st = p.stat()
    if not stat.S_ISREG(st.st_mode):  # a FIFO would wait for a writer, a device never end: the data's check refuses it
        return f"not a regular file ({file_kind(st.st_mode)})"
    return _hashed(str(p.resolve()), st.st_size, st.st_mtime_ns, st.st_ino)


@lru_cache(maxsize=256)
def _hashed(path: str, size: int, mtime_ns: int, inode: int) -> str:
    """Cached per (path, size, modification time, inode): a sweep computes every job's id several times."""
    h = hashlib.sha1()
    with open(path, "rb") as f:
        h.update(f.read(EDGE))
        if size > EDGE:
            f.seek(max(EDGE, size - EDGE))
            h.update(f.read(EDGE))
    return f"{size}:{h.hexdigest()[:16]}"

"""Memory a step frees stays in the process for the next step, instead of going back to the system.

glibc's malloc serves every block above its largest mmap threshold (32 MiB on 64-bit Linux) with
a fresh mapping and unmaps it on free. A training step that allocates such a block (an
ensemble's gradient of a wide matrix, a conv net's activations) then touches new pages every
step, and the kernel zeroes and maps each 4 KiB page again: that, not the cache, is what made
large ensembles slower than one run at a time (docs/performance.md, "Ensemble size"). Malloc
without mmap, and with a high trim threshold, keeps those blocks in its heap, where the next
step reuses them. Numbers are unchanged: only where memory comes from.

Process-wide and once: a job's process trains, and nothing else in it needs memory returned
early. Other C libraries (macOS, musl) are left as they are.
"""

from __future__ import annotations

import ctypes
import ctypes.util

M_TRIM_THRESHOLD, M_MMAP_MAX = -1, -4  # glibc's mallopt parameters (malloc.h)
TRIM_THRESHOLD = 2**30  # bytes of free heap top kept before any is returned

_applied: bool | None = None


def keep_freed_memory() -> bool:
    """Set glibc's malloc to reuse freed blocks of any size (once per process); True where it did."""
    global _applied
    if _applied is None:
        _applied = _mallopt(M_MMAP_MAX, 0) and _mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD)
    return _applied


def _mallopt(param: int, value: int) -> bool:
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return bool(libc.mallopt(ctypes.c_int(param), ctypes.c_int(value)))
    except (OSError, AttributeError):  # not glibc: no mallopt
        return False

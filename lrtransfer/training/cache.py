"""How much last-level cache a job's ensembles may fill: its cores' share of the cache, and no
more than this machine showed when measured.

`memory.chunk_size` keeps an ensemble's optimizer working set within this budget: past the
cache every elementwise pass runs at memory speed, and one run at a time is faster. Linux
says how large the last-level cache is and which CPUs share it, and a job gets its CPUs'
share. Inside a virtual machine that is often the host's whole cache (a 2-vCPU guest was
shown 480 MiB), so the share is also bounded by a measurement (`probe`): the largest
buffer a streaming pass still runs through three times as fast as through memory. It
takes about half a second, once per machine: the figure is kept in the user's cache
folder (never among results), under a name made of the machine's description.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import time
from pathlib import Path

import torch

FALLBACK = 32 * 2**20  # bytes, where sysfs says nothing (not Linux)
SYSFS = Path("/sys/devices/system/cpu")


def budget() -> int:
    """Bytes of last-level cache this process's ensembles may fill."""
    return min(share(), measured())


def share() -> int:
    """This process's CPUs' share of the largest cache, as Linux describes it (sysfs)."""
    cpus = _usable_cpus()
    size, sharing = _last_level(min(cpus))
    if size is None:
        return FALLBACK
    return size * max(1, len(cpus & sharing)) // max(1, len(sharing)) if sharing else size


def measured() -> int:
    """`probe`'s figure for this machine: read from the user's cache folder, or measured and kept there."""
    path = _cache_file()
    try:
        return int(json.loads(path.read_text())["bytes"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    found = probe()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"bytes": found, "machine": _machine(), "measured": time.strftime("%Y-%m-%d")}))
        tmp.replace(path)
    except OSError:  # a read-only home: measured again next time
        pass
    return found


def probe(smallest: int = 2**20, largest: int = 2**28) -> int:
    """The largest buffer (bytes, a power of two from `smallest`) that a read-and-write pass on one
    thread streams at least three times as fast as a buffer of `largest` bytes, far past any cache:
    the cache this process has in effect (a cache half filled by others' data shows as slower, and
    is not counted). Each size is timed as the best of a few repeats, so that a busy machine's
    interruptions do not count as slowness."""
    sizes = [2**e for e in range(smallest.bit_length() - 1, largest.bit_length())]
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        ns = {size: _ns_per_byte(size) for size in sizes}
    finally:
        torch.set_num_threads(threads)
    memory = ns[sizes[-1]]
    fast = [size for size in sizes if ns[size] * 3 <= memory]
    return max(fast, default=smallest)


def _ns_per_byte(size: int, repeats: int = 3) -> float:
    a, b = torch.ones(size // 8), torch.ones(size // 8)  # two halves: one read, one written, then back
    passes = max(2, 2**23 // size)
    best = float("inf")
    for _ in range(repeats):
        t0 = time.perf_counter()
        for _ in range(passes):
            torch.add(a, 1.0, out=b)
            torch.add(b, 1.0, out=a)
        best = min(best, (time.perf_counter() - t0) / (2 * passes) / size * 1e9)
    return best


def _usable_cpus() -> set[int]:
    return set(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else set(range(os.cpu_count() or 1))


def _last_level(cpu: int) -> tuple[int | None, set[int]]:
    """(bytes, the CPUs sharing it) of the highest-level cache of `cpu`, or (None, set())."""
    best: tuple[int, int, set[int]] | None = None
    for index in (SYSFS / f"cpu{cpu}" / "cache").glob("index*"):
        try:
            level = int((index / "level").read_text())
            text = (index / "size").read_text().strip().upper()
            size = int(text.rstrip("KMG")) * {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            sharing = _cpu_list((index / "shared_cpu_list").read_text())
        except (OSError, ValueError):
            continue
        if best is None or (level, size) > best[:2]:
            best = (level, size, sharing)
    return (None, set()) if best is None else (best[1], best[2])


def _cpu_list(text: str) -> set[int]:
    """Linux's CPU list ("0-3,8,10-11") as a set."""
    out: set[int] = set()
    for part in text.strip().split(","):
        if part:
            lo, _, hi = part.partition("-")
            out.update(range(int(lo), int(hi or lo) + 1))
    return out


def _machine() -> str:
    model = ""
    try:
        model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                      if line.startswith("model name")), "")
    except OSError:
        pass
    size, _ = _last_level(min(_usable_cpus()))
    return f"{platform.node()} | {model or platform.processor()} | {len(_usable_cpus())} cpus | llc {size}"


def _cache_file() -> Path:
    root = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "lrtransfer"
    return root / f"cache-probe-{hashlib.sha256(_machine().encode()).hexdigest()[:16]}.json"

"""How the benches time: modes called in turn over rounds, medians, per-round ratios with their
quartiles, a call repeated for a fixed time. Shared by `bench_engine.py` and `bench_tune.py`.

A machine shared with other work slows every mode of a round alike, so the ratio of two modes
within a round holds where absolute figures do not; the quartiles of those ratios say what the
changing load leaves of a figure.
"""

from __future__ import annotations

import platform
import statistics
import subprocess
import time
from collections.abc import Callable

import torch


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def interleaved(modes: dict[str, Callable[[], None]], device: torch.device, rounds: int) -> dict[str, float]:
    """Median seconds of each mode's call, the modes called in turn, `rounds` times (after one warm-up
    call each): a load that comes and goes falls on every mode alike."""
    return medians(each_round(modes, device, rounds))


def medians(times: dict[str, list[float]]) -> dict[str, float]:
    """Each mode's median over the rounds."""
    return {name: statistics.median(t) for name, t in times.items()}


def each_round(modes: dict[str, Callable[[], None]], device: torch.device, rounds: int) -> dict[str, list[float]]:
    """Seconds of each mode's call in every round (`interleaved`): round r's modes ran side by side, so
    the ratio of two modes within a round is freed of a load that changes from round to round."""
    times: dict[str, list[float]] = {name: [] for name in modes}
    for fn in modes.values():
        fn()
    sync(device)
    for _ in range(rounds):
        for name, fn in modes.items():
            t0 = time.perf_counter()
            fn()
            sync(device)
            times[name].append(time.perf_counter() - t0)
    return times


def spread(ratios: list[float]) -> str:
    """The median of per-round ratios and their middle half (quartiles): how far one figure can be
    trusted on a machine shared with other work."""
    q1, q2, q3 = statistics.quantiles(ratios, n=4) if len(ratios) > 1 else ratios * 3
    return f"{q2:.2f}x [{q1:.2f}, {q3:.2f}]"


def repeated(fn: Callable[[], None], device: torch.device, seconds: float) -> Callable[[], None]:
    """A call of fn repeated for about `seconds` (the count fixed by one timed call); `.steps` says how many."""
    fn()
    sync(device)
    n = max(1, round(seconds / max(timed(lambda: (fn(), sync(device))), 1e-6)))

    def call() -> None:
        for _ in range(n):
            fn()

    call.steps = n  # type: ignore[attr-defined]
    return call


def ratios(t: dict[str, list[float]], modes: dict, a: str, b: str, runs_a: int = 1, runs_b: int = 1) -> list[float]:
    """Each round's rate of mode a over mode b (run-steps/s: `runs_*` runs a call step)."""
    return [(runs_a * modes[a].steps / ta) / (runs_b * modes[b].steps / tb) for ta, tb in zip(t[a], t[b])]


def per_call(times: list[float], call: Callable[[], None]) -> float:
    """Median seconds of one of a repeated call's calls."""
    return statistics.median(times) / call.steps  # type: ignore[attr-defined]


def cpu_model() -> str:
    """lscpu's model name (what docs/performance.md names the machine by)."""
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "a CPU"
    field = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    name = field.get("Model name", platform.processor() or "a CPU").strip()
    return f"{name} (family {field.get('CPU family', '?').strip()}, model {field.get('Model', '?').strip()})"

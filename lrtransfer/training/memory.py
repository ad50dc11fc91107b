"""How many runs train together: each ensemble as large as the memory budget allows; and a
refusal, before any training, of a run that cannot fit at all.

A run's sizes are measured by a forward pass on the meta device, so nothing is
allocated to find out.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from lrtransfer.errors import UserError

if TYPE_CHECKING:
    from lrtransfer.training.build import Built


def chunk_size(built: Built, K: int) -> int:
    """Runs per ensemble: engine.chunk if set; else as many as the memory budget allows, in
    chunks of equal size.

    No cache bound on a CPU: once a step reuses its memory (`allocator`), the largest
    ensemble measured fastest at every width, the whole ensemble far past the last-level
    cache included (docs/performance.md, "Ensemble size").
    """
    engine = built.engine
    if not engine.batched:
        return 1
    if engine.chunk > 0:
        return min(K, engine.chunk)
    fp = footprint(built)
    limit = max(1, min(K, int(budget(engine.max_memory_gb, built.device) // fp.bytes_per_run)))
    chunks = math.ceil(K / limit)
    return math.ceil(K / chunks)


class MemoryLimitError(UserError, ValueError):
    """One run of the job cannot fit in the memory it may use."""


def check_fits(built: Built, label: str) -> None:
    """Refuse, before any training, a run whose estimated memory exceeds engine.max_memory_gb or the device's.

    The ensemble is sized to the budget (`chunk_size`), but a single run is never
    split: without this check it allocates until the system's OOM killer acts.
    `label` names the job's scale in the message (width, depth, batch).
    """
    need = footprint(built).bytes_per_run
    gb = built.engine.max_memory_gb
    allowed = budget(gb, built.device)
    total = device_memory(built.device)
    if need <= min(allowed, total):
        return
    setting = f"engine.max_memory_gb={gb:g}" + ("" if gb else ", the automatic budget")
    over = setting if allowed < total else "this machine's memory"
    raise MemoryLimitError(
        f"{label}: one run needs about "
        f"{gib(need)} GiB (estimated), more than {over} ({gib(min(allowed, total))} GiB; "
        f"{built.device.type} has {gib(total)} GiB); use a smaller width, depth or batch"
        + (", or raise engine.max_memory_gb" if allowed < total else "")
    )


def gib(n_bytes: float) -> str:
    """Bytes as GiB with three significant digits (0.0153, 2.5, 140), whole above 1000 (1,536)."""
    x = n_bytes / 2**30
    return f"{x:,.0f}" if x >= 1000 else f"{x:.3g}"


CPU_BUDGET_GB = 4.0  # engine.max_memory_gb=0 on a CPU
GPU_FREE_SHARE = 0.8  # engine.max_memory_gb=0 on a GPU: this share of its free memory


def budget(max_memory_gb: float, device: torch.device) -> float:
    """Bytes the engine may use: engine.max_memory_gb, or where it is 0, 4 GiB on a CPU and on a
    GPU 80% of its memory free now (what other processes hold is not ours to take)."""
    if max_memory_gb > 0:
        return max_memory_gb * 2**30
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return GPU_FREE_SHARE * free
    return CPU_BUDGET_GB * 2**30


def device_memory(device: torch.device) -> int:
    """Bytes of memory on the device: the GPU's, or this machine's physical memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: nothing to compare against
        return 2**62


@dataclass
class Footprint:
    weights: int  # trained numbers of one run
    outputs: int  # numbers the layers output for one example
    element: int  # bytes per number
    batch: int

    @property
    def bytes_per_run(self) -> int:
        """Training memory: weight, gradient, two moments and direction for the optimizer, and
        every layer's output at the batch size three times (the forward's, what backward
        saves, its gradient)."""
        return (5 * self.weights + 3 * self.outputs * self.batch) * self.element + 1


def footprint(built: Built) -> Footprint:
    """One run's sizes, measured by a forward pass on the meta device (nothing allocated)."""
    x, _ = built.task.sample(torch.Generator().manual_seed(0), 1)  # one example: its shape, dtype
    dtype = built.dtype
    with torch.device("meta"):
        model = built.new_model(built.new_param(), 1)
    model.to(dtype=dtype)
    outputs = []
    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    hooks = [m.register_forward_hook(lambda mod, inp, out: outputs.append(_numel(out))) for m in leaves]
    with torch.no_grad():
        model(x.to("meta"))
    for h in hooks:
        h.remove()
    weights = sum(p.numel() for p in model.parameters())
    return Footprint(weights, sum(outputs), torch.finfo(dtype).bits // 8, built.train.batch_size)


def _numel(out) -> int:
    """The elements a layer outputs: a tensor's, or those of every tensor in a tuple (a user's
    rotary embedding returns (cos, sin))."""
    if isinstance(out, torch.Tensor):
        return out.numel()
    return sum(_numel(o) for o in out) if isinstance(out, (tuple, list)) else 0

"""A training step replayed as one CUDA graph.

On a GPU a narrow model's step is a few hundred kernels of a few microseconds each, and
launching them one by one from Python takes several times longer than running them: the
GPU waits on the host. A CUDA graph records the step's kernels once and replays them with
one launch, so the step costs what its kernels cost.

A graph replays exactly what was recorded: the same kernels on the same memory, with the
numbers the host passed at capture. So the step it records reads everything that changes
from step to step from device memory: the batch (copied into the graph's own input
buffers before each replay), the schedule's factor and each run's learning rate (device
tensors, written in place: a frozen run's LR is zeroed where the graph reads it), and the
optimizer's step count (`advance`, outside the graph). Python code inside the step runs
once, at capture; a step that reads a value on the host (`.item()`, a tensor made from a
Python number on the GPU) cannot be captured, and the step then runs eagerly, saying why.

Captured after a few eager steps on a side stream, as CUDA graphs ask: the first steps
allocate the optimizer's state, cuBLAS's workspaces and autograd's buffers, none of which
may happen during capture. The engine decides when a step is graphed (`use_graphs`).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence

import torch
from torch import Tensor

WARMUP = 3  # eager steps before capture

# Past this many trained numbers in the whole ensemble a step is no longer launch-bound, and the
# graphed step's update (the direction path: a few passes over memory where the eager step's fused
# kernel makes one) costs more than the launches it saves (measured: docs/performance.md).
MAX_ELEMENTS = 2**26


def use_graphs(setting: str, device: torch.device, elements: int, capturable: bool) -> bool:
    """Whether an ensemble's step is graphed: `engine.graphs` (auto | always | never); auto graphs
    a CUDA step of at most MAX_ELEMENTS trained numbers. Only a step whose every per-step value
    lives on the device can be (`capturable`: the update is the rate x the optimizer's direction,
    and the optimizer keeps its step count on the device)."""
    if device.type != "cuda" or setting == "never" or not capturable:
        return False
    return setting == "always" or elements <= MAX_ELEMENTS


class GraphedStep:
    """Calls `body(*inputs)`, eagerly for the first WARMUP calls, then as a replayed CUDA graph.

    inputs: tensors of the same shapes and dtypes at every call (a step's batch). body returns
    one tensor (the step's losses), which the graph writes in place at each replay: read it
    before the next call."""

    def __init__(self, body: Callable[..., Tensor], warmup: int = WARMUP) -> None:
        self.body, self.warmup, self.calls = body, warmup, 0
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: list[Tensor] = []
        self.output: Tensor | None = None
        self.failed: str | None = None  # why capture failed: the step stays eager
        self.side = torch.cuda.Stream()  # the warm-up's stream

    def __call__(self, *inputs: Tensor) -> Tensor:
        self.calls += 1
        if self.graph is None and self.failed is None and self.calls > self.warmup:
            self._capture(inputs)
        if self.graph is None:
            return self._eager(inputs)
        for static, x in zip(self.inputs, inputs):
            static.copy_(x, non_blocking=True)
        self.graph.replay()
        return self.output

    def _eager(self, inputs: Sequence[Tensor]) -> Tensor:
        if self.calls > self.warmup:  # capture failed: the ordinary eager step
            return self.body(*inputs)
        self.side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.side):
            out = self.body(*inputs)
        torch.cuda.current_stream().wait_stream(self.side)
        return out

    def _capture(self, inputs: Sequence[Tensor]) -> None:
        torch.cuda.synchronize()
        self.inputs = [x.clone() for x in inputs]
        graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(graph):
                self.output = self.body(*self.inputs)
        except Exception as e:  # noqa: BLE001  (a step that reads the device on the host, ...)
            self.failed = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
            self.inputs, self.output = [], None
            torch.cuda.synchronize()
            print(f"note: this step cannot be replayed as a CUDA graph ({self.failed}); it runs eagerly",
                  file=sys.stderr)
            return
        self.graph = graph

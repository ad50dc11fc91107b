"""Random draws in a user's forward (dropout), each run's from its own stream of torch's generator.

The K runs of one forward share torch's one generator, yet each run must draw what it would draw
trained alone: its stream starts as a plain loop's generator stands once seeded with the run's seed
and the module built (`wrapped.Custom`'s `stream`), and each forward draws from it. A module seen
not to draw at its first forward runs with no streams from then on. The streams are part of a
checkpoint, checked before a resume (`takes_streams`).
"""

from __future__ import annotations

import contextlib

import torch
from torch import Tensor


class Streams:
    """`wrapped.Custom`'s random draws: `streams` (each run's generator state, None: none kept),
    `stream` ((seed, device) -> a run's first state) and `random` (whether the forward draws; None:
    not seen yet) are its fields."""

    @contextlib.contextmanager
    def _in_stream(self, runs: list[int], device: torch.device):
        """torch's generator at the stream of `runs` (runs of one seed, which draw alike) while the
        forward draws, its state then kept as theirs; the global generator left as it was."""
        if self.streams is None or device.type == "meta":
            yield
            return
        with torch.random.fork_rng(devices=cuda_devices(device)):
            set_rng_state(self.streams[runs[0]], device)
            yield
            state = rng_state(device)
        for k in runs:
            self.streams[k] = state

    def _open_streams(self, x: Tensor) -> list[Tensor] | None:
        """At the first forward (not on the meta device): each run's stream, which that forward draws
        from as every later one of a module that draws will; the streams as they were before it."""
        if self.random is not None or self.stream is None or x.device.type == "meta":
            return None
        first = {seed: self.stream(seed, x.device) for seed in dict.fromkeys(self.seeds)}
        self.streams = [first[seed] for seed in self.seeds]
        return list(self.streams)

    def _close_streams(self, before: list[Tensor] | None) -> None:
        """After the first forward: whether it drew (a stream moved); a module that did not runs
        with no streams from then on, each seed's runs no longer apart."""
        if before is not None:
            self.random = any(not torch.equal(a, b) for a, b in zip(before, self.streams))
            self.streams = self.streams if self.random else None

    def takes_streams(self, streams, device: torch.device) -> bool:
        """Whether a checkpoint's `streams` are a state of torch's generator on `device` for each run."""
        if self.stream is None or not isinstance(streams, Tensor) or streams.dtype != torch.uint8:
            return False
        if streams.dim() != 2 or tuple(streams.shape) != (self.runs, rng_state(device).numel()):
            return False
        n = torch.get_rng_state().numel()
        try:  # the CPU's part is checked by torch (a damaged one is refused); a GPU's is a seed and an offset
            for s in streams:
                torch.Generator().set_state(s[:n].clone())
        except RuntimeError:
            return False
        return True


def cuda_devices(device: torch.device) -> list:
    """`device` as torch.random.fork_rng's devices: its generator forked too where it is a GPU."""
    return [device] if device.type == "cuda" else []


def rng_state(device: torch.device) -> Tensor:
    """torch's generator state: the CPU's, and on a GPU its own after it."""
    cpu = torch.get_rng_state()
    return torch.cat([cpu, torch.cuda.get_rng_state(device)]) if device.type == "cuda" else cpu


def set_rng_state(state: Tensor, device: torch.device) -> None:
    n = torch.get_rng_state().numel()
    torch.set_rng_state(state[:n])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[n:], device)

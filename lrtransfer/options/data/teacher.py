"""The embedded default task: labels from a fixed random teacher network.

Inputs x ~ N(0, I_d) are drawn fresh at every step, so a student never sees the
same example twice: there is no overfitting and no memorisation, only how fast
and how stably each learning rate fits the teacher. Labels are *sampled* from
softmax(teacher(x) / temperature), which puts a floor under the loss (the
teacher's own entropy) and gives every loss-vs-LR curve a finite minimum.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import Tensor

from lrtransfer.options.data import Task
from lrtransfer.options.schema import VECTOR, ConfigError, positive


@dataclass
class TeacherOptions:
    """Inputs x ~ N(0, I); labels drawn from softmax(teacher(x) / temperature)."""

    INPUTS: ClassVar[str] = VECTOR

    name: str = "teacher"
    input_dim: int = 32
    classes: int = 10
    teacher_width: int = 128
    teacher_depth: int = 2
    temperature: float = 0.5
    seed: int = 1234
    eval_size: int = 4096

    def check(self) -> None:
        for key in ("input_dim", "teacher_width", "teacher_depth", "temperature", "eval_size"):
            positive(f"data.{key}", getattr(self, key))
        if self.classes < 2:
            raise ConfigError(f"data.classes must be >= 2, got {self.classes}")


OPTIONS = TeacherOptions


class Teacher(Task):
    def __init__(self, d: TeacherOptions, device: torch.device, dtype: torch.dtype) -> None:
        self.input_shape, self.output_dim = (d.input_dim,), d.classes
        self.device, self.dtype, self.temperature = device, dtype, d.temperature
        gen = torch.Generator().manual_seed(d.seed)
        dims = [d.input_dim] + [d.teacher_width] * (d.teacher_depth - 1) + [d.classes]
        # He-scaled Gaussian layers: O(1) activations at every depth. They stay on the CPU, where
        # labels are drawn (`Task.sample`): a small network, cheaper there than a wait for the GPU.
        self.layers = [
            (torch.randn(a, b, generator=gen, dtype=torch.float64) * math.sqrt(2.0 / a)).to(dtype=dtype)
            for a, b in zip(dims[:-1], dims[1:])
        ]
        self._eval = self.sample(torch.Generator().manual_seed(d.seed + 1), d.eval_size)

    @torch.no_grad()
    def logits(self, x: Tensor) -> Tensor:
        for i, w in enumerate(self.layers):
            x = x @ w
            if i < len(self.layers) - 1:
                x = torch.relu(x)
        return x / self.temperature

    @torch.no_grad()
    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        x = torch.randn(batch_size, *self.input_shape, generator=gen, dtype=self.dtype)
        probs = torch.softmax(self.logits(x).to(torch.float64), -1)
        y = torch.multinomial(probs, 1, generator=gen).squeeze(1)
        return x.to(self.device, non_blocking=True), y.to(self.device, non_blocking=True)

    def eval_set(self) -> tuple[Tensor, Tensor]:
        return self._eval


def build(options: TeacherOptions, device: torch.device, dtype: torch.dtype) -> Teacher:
    if options.teacher_depth < 1:
        raise ConfigError(f"data.teacher_depth must be >= 1, got {options.teacher_depth}")
    return Teacher(options, device, dtype)

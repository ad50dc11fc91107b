"""Tasks. `conf/data/<name>.yaml` is implemented by `lrtransfer/options/data/<name>.py`, which
defines its options (`OPTIONS`, a dataclass) and `build(options, device, dtype) -> Task`
and, when the task reads files, `ensure_files(options)`: check that they are on disk
(or download them when asked) before any job starts. A task that makes files from its
data (a token cache) also defines `planned(options, device, dtype) -> Task`, what a plan
(`sweep --plan`, which writes nothing) checks, sizes and times the jobs with, and
`plan_note(options)`, what it then leaves for the sweep to do.

What one example *is* (its kind) is declared by the option's options (`INPUTS`),
so the sweep can refuse a model that cannot read it before loading anything:

- `vector`: x (B, d) float, y (B,) class indices;
- `image`:  x (B, C, H, W) float, y (B,) class indices;
- `signal`: x (B, C, L) float, y (B,) class indices (1-D signals: MNIST-1D);
- `tokens`: x (B, T) int64 token ids in [0, output_dim), y (B, T) the next token
  at every position.

With runs of several seeds the engine stacks each seed's batch, adding a leading
run axis: x (K, B, ...), y (K, B, ...). Models accept both forms.
"""

from __future__ import annotations

import torch
from torch import Tensor
from torch.nn import functional as F

from lrtransfer import options


class Task:
    """What the engine needs to train and evaluate on a task.

    `sample` draws a training batch with the caller's generator, so each seed has
    its own stream and runs sharing a seed share every batch.
    """

    input_shape: tuple[int, ...]  # one example: (d,), (C, H, W) or (T,)
    output_dim: int  # classes, or the vocabulary of a token task

    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        """x: (B, *input_shape), y: (B,) class indices, or (B, T) for tokens, on the task's device.

        `gen` is a CPU generator, and every random draw is made on the CPU from it: a run then
        sees the same batches on a GPU as on a CPU, and its generator's state (saved with a
        checkpoint) resumes on either. Only the draws (indices, a small input batch) cross to
        the device, with no wait for it."""
        raise NotImplementedError

    @staticmethod
    def indices(high: int, size: int, gen: torch.Generator, device: torch.device) -> Tensor:
        """(size,) integers in [0, high) drawn on the CPU from `gen` (`sample`), on `device`."""
        return torch.randint(high, (size,), generator=gen).to(device, non_blocking=True)

    def eval_set(self) -> tuple[Tensor, Tensor] | None:
        """Held-out (x, y), or None when the task has no held-out split."""
        return None

    @staticmethod
    def losses(logits: Tensor, y: Tensor) -> Tensor:
        """Mean cross-entropy of each run over every prediction of its batch.

        logits: (K, B, ..., C); y: (B, ...) or (K, B, ...) -> (K,). One prediction
        per example for classification, one per position for tokens.
        """
        K, C = logits.shape[0], logits.shape[-1]
        y = y.expand(logits.shape[:-1]).reshape(-1)
        return F.cross_entropy(logits.reshape(-1, C), y, reduction="none").view(K, -1).mean(1)

    @staticmethod
    def correct(logits: Tensor, y: Tensor) -> Tensor:
        """Number of correct predictions of each run, (K,)."""
        return (logits.argmax(-1) == y).flatten(1).sum(-1)


def ensure_files(data_options, *, writing: bool = True) -> None:
    """Make sure the task's files are on disk, or raise UserError saying how to get them.
    `writing=False` (a plan): a task that makes files from its data (its module's `planned`)
    checks what it can without making them."""
    module = options.module("data", data_options.name)
    if not writing and hasattr(module, "planned"):
        module.planned(data_options, torch.device("cpu"), torch.float32)
        return
    hook = getattr(module, "ensure_files", None)
    if hook is not None:
        hook(data_options)


def build(data_options, device: torch.device, dtype: torch.dtype, *, writing: bool = True) -> Task:
    """The task of `data_options`; `writing=False` (a plan, which sizes and times the jobs on it):
    where making it would write files (a token cache), a stand-in of the same shapes
    (its module's `planned`), with nothing written."""
    module = options.module("data", data_options.name)
    if not writing and hasattr(module, "planned"):
        return module.planned(data_options, device, dtype)
    return module.build(data_options, device, dtype)


def plan_note(data_options) -> str | None:
    """What a plan did not do for this data that the sweep will (its module's `plan_note`), or None."""
    hook = getattr(options.module("data", data_options.name), "plan_note", None)
    return hook(data_options) if hook is not None else None

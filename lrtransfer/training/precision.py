"""The numerics of `train.dtype` around a step: TF32 allowed or not, bf16 autocast or not.

On a CPU only autocast applies; on CUDA, TF32 is set both ways around each forward
and backward, because cuDNN allows it for convolutions by default.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch


@contextmanager
def matmul_precision(kind: str, device: torch.device) -> Iterator[None]:
    """TF32 in CUDA matmuls and convolutions exactly when `train.dtype` is tf32, around a step's
    forward and backward. Set both ways: cuDNN allows TF32 convolutions by default, which would
    make a float32 conv net on a GPU a TF32 one."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = kind == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@contextmanager
def autocast(kind: str, device: torch.device) -> Iterator[None]:
    """bf16 autocast around a forward pass when `train.dtype` is bf16_autocast (backward follows
    the forward's types by itself, outside the context, as torch.autocast asks)."""
    if kind == "bf16_autocast":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


@contextmanager
def precision(kind: str, device: torch.device) -> Iterator[None]:
    """The numerics of `train.dtype` around a forward pass with no backward (evaluation)."""
    with matmul_precision(kind, device), autocast(kind, device):
        yield

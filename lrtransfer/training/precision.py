"""The numerics of `train.dtype` around a step: TF32 allowed or not, bf16 or not.

bf16 (`train.dtype=bf16`; `bf16_autocast` is its former name) computes every matrix
product in bfloat16 and everything else in float32: the weights and the optimizer
state stay float32 (the masters), and each matrix a layer multiplies by
(`Atom.MATRICES`) gets a bfloat16 copy that the layer computes with, written once a
step by the optimizer's own pass (`matmul_copies`), not cast at every use. The
forward runs under torch.autocast, which casts the activations entering a product and
keeps losses in float32; a Linear adds its bias in bfloat16 (as torch's linear does),
so the nonlinearity after it runs in bfloat16; a residual sum or a norm adds a bfloat16
product to float32 and so stays float32, and the transformer's attention opts out on a CPU
(`options/model/transformer.py`).

On a CPU only the bf16 settings apply; on CUDA, TF32 is set both ways around each
forward and backward, because cuDNN allows it for convolutions by default.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import NamedTuple

import torch
from torch import Tensor, nn

BF16 = ("bf16", "bf16_autocast")  # the train.dtype values of the bf16 step (the second its former name)


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
def autocast(kind: str, device: torch.device, cache: bool = True) -> Iterator[None]:
    """bf16 autocast around a forward pass when `train.dtype` is bf16 (backward follows the
    forward's types by itself, outside the context, as torch.autocast asks). cache False: no
    cast is kept for reuse, as a step captured in a CUDA graph needs."""
    if kind in BF16:
        with torch.autocast(device.type, dtype=torch.bfloat16, cache_enabled=cache):
            yield
    else:
        yield


@contextmanager
def precision(kind: str, device: torch.device) -> Iterator[None]:
    """The numerics of `train.dtype` around a forward pass with no backward (evaluation)."""
    with matmul_precision(kind, device), autocast(kind, device):
        yield


@torch.no_grad()
def matmul_copies(slots: Sequence, kind: str) -> list[Tensor | None]:
    """Under bf16, a bfloat16 copy of each slot's tensor that its atom multiplies by as a matrix,
    put in the atom in the master's place (so the forward, and the gradient, see the copy); the
    master stays in the slot. None for every other slot, and for every slot in other dtypes."""
    out: list[Tensor | None] = []
    for s in slots:
        if kind not in BF16 or s.name not in s.atom.MATRICES:
            out.append(None)
            continue
        copy = nn.Parameter(s.tensor.detach().to(torch.bfloat16))
        setattr(s.atom, s.name, copy)
        out.append(copy)
    return out


class Unit(NamedTuple):
    """What computes bfloat16 matrix products fast: its name, and whether it is a matrix unit
    (AMX tiles, tensor cores) or vector instructions (AVX-512 BF16 dot products)."""

    name: str
    matrix: bool


def bf16_unit(device: torch.device) -> Unit | None:
    """What computes bfloat16 matrix products fast on `device`; None where nothing does (bf16 is
    then only less exact, not faster). On a CPU these are oneDNN's kernels: AMX tiles or AVX-512
    BF16 dot products; on a GPU, tensor cores (compute capability 8 and up)."""
    if device.type == "cuda":
        return Unit("tensor cores", matrix=True) if torch.cuda.get_device_capability(device)[0] >= 8 else None
    if device.type != "cpu" or not torch.backends.mkldnn.is_available():
        return None
    if _cpu_has("_is_amx_tile_supported"):
        return Unit("AMX", matrix=True)
    if _cpu_has("_is_avx512_bf16_supported"):
        return Unit("AVX-512 BF16", matrix=False)
    return None


def bf16_note(kind: str, device: torch.device) -> str | None:
    """A line for `sweep --plan` where train.dtype=bf16 will not be much faster here; else None."""
    if kind not in BF16:
        return None
    unit = bf16_unit(device)
    if unit is None:
        return (f"train.dtype={kind}: this {device.type.upper()} has no bf16 matrix unit and no bf16 "
                "instructions: bf16 will not be faster than float32 here, but slower and less exact "
                "(docs/performance.md)")
    if not unit.matrix:
        return (f"train.dtype={kind}: this CPU has no bf16 matrix unit, only {unit.name} instructions: bf16 "
                "is faster than float32 on wide models only, and far less than on a matrix unit "
                "(docs/performance.md)")
    return None


def _cpu_has(name: str) -> bool:
    """torch.cpu's private feature test `name` (False where this torch has none)."""
    test = getattr(torch.cpu, name, None)
    try:
        return bool(test()) if test is not None else False
    except RuntimeError:
        return False

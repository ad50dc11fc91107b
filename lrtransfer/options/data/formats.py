"""Readers for the on-disk formats torchvision keeps its datasets in, without torchvision.

- CIFAR-10/100 ("python version"): pickled dicts, one per batch file, written by
  Python 2: `data` is a (N, 3072) uint8 array (1024 red, then green, then blue
  values of a 32x32 image, row-major), labels a list of ints (`labels`, or
  `fine_labels` for CIFAR-100).
- MNIST and Fashion-MNIST: IDX files, optionally gzipped: a magic number
  (0, 0, type, ndim), ndim big-endian int32 sizes, then the values. Only unsigned
  bytes (type 0x08) occur in these datasets.

Each reader returns images (N, C, H, W) uint8 and labels (N,) int64, or raises
DataError naming the file and what is wrong with it.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from collections.abc import Sequence
from pathlib import Path

import torch
from torch import Tensor

from lrtransfer.errors import UserError


class DataError(UserError):
    """A dataset is missing or unreadable; the message says which file and what to do."""


def open_maybe_gzip(path: Path):
    return gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb")


# ---------------------------------------------------------------- CIFAR
class _ArraysOnly(pickle.Unpickler):
    """Unpickles dicts, lists and numpy arrays, and refuses anything else.

    A pickle can name any callable; a dataset file should never need more than
    numpy's array reconstruction, so nothing else is let through.
    """

    def find_class(self, module: str, name: str):
        import numpy as np

        allowed = {
            ("numpy", "ndarray"): np.ndarray,
            ("numpy", "dtype"): np.dtype,
            # Python 3 pickles of bytes at protocol 2
            ("_codecs", "encode"): __import__("codecs").encode,
        }
        if name == "_reconstruct" and module in ("numpy.core.multiarray", "numpy._core.multiarray"):
            return np.ndarray((0,)).__reduce__()[0]  # this numpy's own, whatever its module is called
        if (module, name) in allowed:
            return allowed[(module, name)]
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_cifar(paths: Sequence[Path], *, label_key: str) -> tuple[Tensor, Tensor]:
    """Concatenate CIFAR batch files -> images (N, 3, 32, 32) uint8, labels (N,) int64."""
    import numpy as np

    images, labels = [], []
    for path in paths:
        try:
            with open_maybe_gzip(path) as f:
                entry = _ArraysOnly(f, encoding="latin1").load()
        except (OSError, EOFError, pickle.UnpicklingError, ValueError, TypeError) as e:
            raise DataError(f"{path}: not a readable CIFAR batch file ({e})") from None
        if not isinstance(entry, dict):
            raise DataError(f"{path}: not a CIFAR batch file (holds a {type(entry).__name__}, not a dict)")
        entry = {k.decode("latin1") if isinstance(k, bytes) else k: v for k, v in entry.items()}
        if "data" not in entry or label_key not in entry:
            raise DataError(f"{path}: a CIFAR batch needs 'data' and '{label_key}' entries, found {sorted(entry)}")
        data, y = entry["data"], entry[label_key]
        if not (isinstance(data, np.ndarray) and data.dtype == np.uint8 and data.ndim == 2 and data.shape[1] == 3072):
            shape = getattr(data, "shape", None)
            raise DataError(f"{path}: 'data' must be a (N, 3072) uint8 array, got {type(data).__name__} {shape}")
        if len(y) != len(data):
            raise DataError(f"{path}: {len(data)} images but {len(y)} labels")
        images.append(data)
        labels.append(np.asarray(y, dtype=np.int64))
    x = torch.from_numpy(np.concatenate(images)).view(-1, 3, 32, 32)
    return x, torch.from_numpy(np.concatenate(labels))


# ---------------------------------------------------------------- IDX (MNIST)
def read_idx(path: Path) -> Tensor:
    """One IDX file of unsigned bytes -> a uint8 tensor of its shape."""
    try:
        with open_maybe_gzip(path) as f:
            raw = f.read()
    except (OSError, EOFError) as e:
        raise DataError(f"{path}: cannot read ({e})") from None
    if len(raw) < 4 or raw[0] != 0 or raw[1] != 0:
        raise DataError(f"{path}: not an IDX file (bad magic number)")
    kind, ndim = raw[2], raw[3]
    if kind != 0x08:
        raise DataError(f"{path}: IDX value type 0x{kind:02x} is not unsigned bytes (0x08)")
    header = 4 + 4 * ndim
    shape = struct.unpack(f">{ndim}i", raw[4:header]) if len(raw) >= header else ()
    count = 1
    for n in shape:
        count *= n
    if len(raw) - header != count or len(shape) != ndim:
        raise DataError(f"{path}: IDX header says shape {tuple(shape)} but the file holds {len(raw) - header} values")
    return torch.frombuffer(bytearray(raw[header:]), dtype=torch.uint8).view(*shape)


def read_idx_pair(paths: Sequence[Path]) -> tuple[Tensor, Tensor]:
    """(images file, labels file) -> images (N, 1, H, W) uint8, labels (N,) int64."""
    image_path, label_path = paths
    images, labels = read_idx(image_path), read_idx(label_path)
    if images.dim() != 3:
        raise DataError(f"{image_path}: images must be (N, H, W), got shape {tuple(images.shape)}")
    if labels.dim() != 1 or len(labels) != len(images):
        raise DataError(f"{label_path}: {tuple(labels.shape)} labels for {len(images)} images")
    return images.unsqueeze(1), labels.long()

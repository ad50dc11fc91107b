"""data=mnist1d: MNIST-1D (Greydanus 2020), a 1-D analogue of MNIST made for small compute.

Ten hand-made templates are padded, scaled, translated, sheared and noised into
signals of length 40 (by default 5,000 of them, 4,000 to train and 1,000 to test).
The `mnist1d` package generates them locally (`make_dataset(get_dataset_args())`);
its `get_dataset` would download a pickle instead, so it is never called: the set
is made here, offline, once per (package version, generation arguments), and kept
in a cache folder as plain arrays in an .npz read with `allow_pickle=False`, so
reading it back runs no code. Jobs only read the cache: the sweep makes it before
any job starts (`ensure_files`).

Batches draw signals uniformly with replacement from the caller's generator, so
runs sharing a seed share every batch; the held-out set is the package's own test
split. A signal reaches a model as (B, 1, L): one channel (the MLP flattens it).
"""

from __future__ import annotations

import hashlib
import io
import json
import random
from importlib import metadata
from pathlib import Path

import numpy as np
import torch
from torch import Tensor

from dataclasses import dataclass
from typing import ClassVar, Optional

from lrtransfer.options.data import Task
from lrtransfer.options.data.cache import cache_folder, usable, whole_file
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.schema import SIGNAL, ConfigError, location, positive


@dataclass
class MNIST1DOptions:
    """MNIST-1D's generation keys are the package's `get_dataset_args()`; the defaults are the benchmark's."""

    INPUTS: ClassVar[str] = SIGNAL

    name: str = "mnist1d"
    cache: Optional[str] = location(None)  # where generated sets are kept; None: $XDG_CACHE_HOME/lrtransfer
    num_samples: int = 5000  # train + test; num_samples // 10 per class
    train_split: float = 0.8  # the first 80% train, the rest the held-out test split
    padding_min: int = 36  # the package's padding = [padding_min, padding_max] (scalars: every config value
    padding_max: int = 60  # is a scalar, which the analysis groups by)
    scale_coeff: float = 0.4
    max_translation: int = 48
    corr_noise_scale: float = 0.25
    iid_noise_scale: float = 0.02
    shear_scale: float = 0.75
    shuffle_seq: bool = False
    final_seq_length: int = 40
    seed: int = 42  # the generator's seed (the benchmark's)
    eval_size: Optional[int] = None  # None: the whole test split; N: a fixed random subset of it

    def check(self) -> None:
        if self.num_samples < 10:
            raise ConfigError(f"data.num_samples must be >= 10 (one signal per class at least), got {self.num_samples}")
        n = self.num_samples // 10 * 10
        if not (0 < self.train_split < 1 and 0 < int(n * self.train_split) < n):
            raise ConfigError(
                f"data.train_split={self.train_split} leaves an empty split of {n} signals; use a value in (0, 1)"
            )
        positive("data.final_seq_length", self.final_seq_length)
        positive("data.max_translation", self.max_translation)
        if not 0 <= self.padding_min <= self.padding_max:
            raise ConfigError(
                f"data.padding_min={self.padding_min}, data.padding_max={self.padding_max}: need 0 <= min <= max"
            )
        if self.eval_size is not None:
            positive("data.eval_size", self.eval_size)


OPTIONS = MNIST1DOptions

EXTRA = "pip install 'lrtransfer[mnist1d]'"
# The package's generation arguments a config sets (the rest of get_dataset_args() stays
# the package's: `template_len` belongs to its templates, `url` to get_dataset); its
# `padding` list is data.padding_min and data.padding_max.
KEYS = ("num_samples", "train_split", "scale_coeff", "max_translation", "corr_noise_scale",
        "iid_noise_scale", "shear_scale", "shuffle_seq", "final_seq_length", "seed")  # fmt: skip
ARRAYS = ("x", "y", "x_test", "y_test")


def package_version() -> str:
    try:
        return metadata.version("mnist1d")
    except metadata.PackageNotFoundError:
        raise DataError(f"data=mnist1d needs the mnist1d package, which is not installed; {EXTRA}") from None


def generation_args(d) -> dict:
    return {"padding": [d.padding_min, d.padding_max], **{k: getattr(d, k) for k in KEYS}}


def cache_path(d) -> Path:
    """One file per (package version, generation arguments)."""
    version = package_version()
    key = json.dumps(generation_args(d), sort_keys=True)
    digest = hashlib.sha256(f"{version} {key}".encode()).hexdigest()[:16]
    return cache_folder(d.cache) / f"mnist1d-{version}-{digest}.npz"


def generate(d) -> dict[str, np.ndarray]:
    """The package's make_dataset with these arguments, leaving the global RNGs as they were.

    (It seeds `random` and `numpy.random` globally; nothing else in the process
    should feel that.)
    """
    try:
        from mnist1d.data import get_dataset_args, make_dataset
    except ImportError as e:
        raise DataError(f"data=mnist1d needs the mnist1d package, which cannot be imported ({e}); {EXTRA}") from None
    args = get_dataset_args()
    for k, v in generation_args(d).items():
        setattr(args, k, v)
    py_state, np_state = random.getstate(), np.random.get_state()
    try:
        data = make_dataset(args)
    finally:
        random.setstate(py_state)
        np.random.set_state(np_state)
    return {k: np.ascontiguousarray(data[k]) for k in ARRAYS}


def write_atomically(path: Path, arrays: dict[str, np.ndarray]) -> None:
    """Whole or not at all (`cache.whole_file`): a later run never reads half a file."""
    buffer = io.BytesIO()  # a few hundred kB
    np.savez(buffer, **arrays)
    with whole_file(path) as write:
        write(buffer.getvalue())


def read(path: Path, d) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            arrays = {k: z[k] for k in ARRAYS}
    except Exception as e:  # truncated, not a zip, an object array, a key missing
        raise DataError(f"{path}: not a readable MNIST-1D cache ({type(e).__name__}: {e}); delete it to regenerate") from None
    n = d.num_samples // 10 * 10
    n_train = int(n * d.train_split)
    expected = {"x": (n_train, d.final_seq_length), "y": (n_train,),
                "x_test": (n - n_train, d.final_seq_length), "y_test": (n - n_train,)}  # fmt: skip
    for k, shape in expected.items():
        if arrays[k].shape != shape:
            raise DataError(f"{path}: {k} has shape {arrays[k].shape}, expected {shape}; delete it to regenerate")
    return arrays


def load(d) -> dict[str, np.ndarray]:
    """The generated set, from the cache, making it first when it is not there."""
    path = cache_path(d)
    if not path.is_file():
        usable(d.cache)
        write_atomically(path, generate(d))
    return read(path, d)


def load_checked(d) -> dict[str, np.ndarray]:
    if d.eval_size is not None:
        n = d.num_samples // 10 * 10
        test = n - int(n * d.train_split)
        if d.eval_size > test:
            raise DataError(f"data.eval_size={d.eval_size} but MNIST-1D's test split has {test} signals")
    return load(d)


def ensure_files(d: MNIST1DOptions) -> None:
    """Before any job: the set exists in the cache and reads back."""
    load_checked(d)


class SignalTask(Task):
    """Signals (B, 1, L) with their class labels (B,), held in device memory."""

    def __init__(self, x: Tensor, y: Tensor, eval_x: Tensor, eval_y: Tensor) -> None:
        self.input_shape, self.output_dim = tuple(x.shape[1:]), 10
        self.x, self.y = x, y  # (N, 1, L), (N,)
        self._eval = (eval_x, eval_y)

    @torch.no_grad()
    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        idx = self.indices(len(self.y), batch_size, gen, self.x.device)
        return self.x[idx], self.y[idx]

    def eval_set(self) -> tuple[Tensor, Tensor]:
        return self._eval


def build(d: MNIST1DOptions, device: torch.device, dtype: torch.dtype) -> SignalTask:
    a = load_checked(d)  # the sweep has made the set already; a job run on its own makes it here

    def signals(x: np.ndarray) -> Tensor:
        return torch.from_numpy(x).to(device, dtype).unsqueeze(1)  # (N, L) -> (N, 1, L)

    def labels(y: np.ndarray) -> Tensor:
        return torch.from_numpy(y.astype(np.int64)).to(device)

    eval_x, eval_y = a["x_test"], a["y_test"]
    if d.eval_size is not None:  # a fixed random subset, in split order
        keep = torch.randperm(len(eval_y), generator=torch.Generator().manual_seed(d.seed))[: d.eval_size].sort().values
        eval_x, eval_y = eval_x[keep.numpy()], eval_y[keep.numpy()]
    return SignalTask(signals(a["x"]), labels(a["y"]), signals(eval_x), labels(eval_y))

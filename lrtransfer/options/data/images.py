"""Labelled image datasets, read from disk once and held in device memory.

These datasets are small (CIFAR-10's training split is 150 MB as bytes), so the
whole split, or a fixed `data.train_size` subset of it, goes to the training
device once as uint8, and every batch is an index into it: no DataLoader and no
per-step host work. Batches draw examples uniformly with replacement, from the
caller's generator only, so runs sharing a seed share every batch.

Normalisation is per channel, with the mean and standard deviation of the whole
training split (a property of the dataset, not of the subset); it is applied per
batch, after augmentation, so padding is black as in torchvision's pipeline.
The held-out set is the dataset's test split (or a fixed `data.eval_size`
subset of it).

Files are found in torchvision's layout under `data.root`, read by
`formats.py`; torchvision itself is needed only to download them
(`data.download=true`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import torch
from omegaconf import MISSING
from torch import Tensor
from torch.nn import functional as F

from lrtransfer.options.data import Task
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.schema import IMAGE, ConfigError, location, positive


@dataclass
class ImageDataOptions:
    """A labelled image dataset on disk in torchvision's layout; every image option's options."""

    INPUTS: ClassVar[str] = IMAGE

    name: str = MISSING
    root: str = location("data")  # the folder torchvision would be given as `root`
    download: bool = location(False)  # fetch missing files with torchvision; never otherwise
    train_size: Optional[int] = None  # None: the whole training split; N: a fixed random subset
    eval_size: Optional[int] = None  # None: the whole test split; N: a fixed random subset
    seed: int = 0  # which subsets
    augment: bool = False  # random crop after zero padding, and horizontal flips
    augment_pad: int = 4
    augment_flip: bool = True

    def check(self) -> None:
        for key in ("train_size", "eval_size"):
            if getattr(self, key) is not None:
                positive(f"data.{key}", getattr(self, key))
        if self.augment_pad < 0:
            raise ConfigError(f"data.augment_pad must be >= 0, got {self.augment_pad}")

VISION_EXTRA = "pip install 'lrtransfer[vision]'"


@dataclass(frozen=True)
class ImageSet:
    """One dataset: where torchvision keeps it under `data.root`, and how to read it."""

    title: str  # for messages: "CIFAR-10"
    folder: str  # below data.root
    train: tuple[str, ...]  # file names in `folder`; each may also be gzipped (`name.gz`)
    test: tuple[str, ...]
    read: Callable[[list[Path]], tuple[Tensor, Tensor]]  # files -> (N, C, H, W) uint8, (N,) int64
    shape: tuple[int, int, int]  # (C, H, W)
    classes: int
    torchvision: str  # the torchvision.datasets class that downloads it
    how: str  # how a user puts it on disk; may use {root} and {folder}

    def paths(self, root: Path) -> dict[str, Path | None]:
        """Each expected file's path, or None when neither it nor its .gz is there."""
        folder = root / self.folder
        out: dict[str, Path | None] = {}
        for name in self.train + self.test:
            found = [p for p in (folder / name, folder / f"{name}.gz") if p.is_file()]
            out[name] = found[0] if found else None
        return out

    def check_present(self, root: Path, option: str) -> dict[str, Path]:
        paths = self.paths(root)
        missing = [name for name, p in paths.items() if p is None]
        if missing:
            folder = root / self.folder
            raise DataError(
                f"data={option}: {self.title} not found: no {', '.join(missing)} in {folder}/; "
                f"{self.how.format(root=root, folder=folder)}, or add data.download=true ({VISION_EXTRA})"
            )
        return paths  # type: ignore[return-value]

    # ---- the option module's hooks
    def ensure_files(self, d: ImageDataOptions) -> None:
        """Before any job: the files are there (downloaded first when asked) and readable, and the subsets fit.

        Reading them once here (about a second for CIFAR-10) turns a missing or
        corrupt file into one line before training, not a failed record per job.
        """
        root = data_root(d.root)
        if d.download and any(p is None for p in self.paths(root).values()):
            self.download(root)
        self.load(d)

    def download(self, root: Path) -> None:
        try:
            from torchvision import datasets
        except Exception as e:  # not installed, or installed against another torch build
            reason = str(e).splitlines()[0] if str(e) else type(e).__name__
            raise DataError(
                f"data.download=true needs torchvision, which cannot be imported here ({reason}); "
                f"{VISION_EXTRA}, or put {self.title} on disk yourself (docs/datasets.md)"
            ) from None
        root.mkdir(parents=True, exist_ok=True)
        try:
            for train in (True, False):
                getattr(datasets, self.torchvision)(str(root), train=train, download=True)
        except Exception as e:
            raise DataError(f"downloading {self.title} into {root} failed: {type(e).__name__}: {e}") from None

    def build(self, d: ImageDataOptions, device: torch.device, dtype: torch.dtype) -> ImageTask:
        train_x, train_y, test_x, test_y, mean, std = self.load(d)
        return ImageTask(
            train_x, train_y, test_x, test_y, mean, std, classes=self.classes,
            pad=d.augment_pad if d.augment else 0, flip=d.augment and d.augment_flip, device=device, dtype=dtype,
        )  # fmt: skip

    def load(self, d: ImageDataOptions):
        """Host tensors: the training images and labels, the held-out ones (subsets applied), and the channel statistics."""
        paths = self.check_present(data_root(d.root), d.name)
        train_x, train_y = self._read([paths[n] for n in self.train])
        test_x, test_y = self._read([paths[n] for n in self.test])
        mean, std = channel_stats(train_x)
        gen = torch.Generator().manual_seed(d.seed)
        train_x, train_y = self._subset(train_x, train_y, d.train_size, "train_size", "training", gen)
        test_x, test_y = self._subset(test_x, test_y, d.eval_size, "eval_size", "test", gen)
        return train_x, train_y, test_x, test_y, mean, std

    def _read(self, paths: list[Path]) -> tuple[Tensor, Tensor]:
        x, y = self.read(paths)
        where = ", ".join(str(p) for p in paths)
        if tuple(x.shape[1:]) != self.shape:
            raise DataError(f"{where}: images of shape {tuple(x.shape[1:])}, expected {self.shape} for {self.title}")
        if len(y) and not (0 <= int(y.min()) and int(y.max()) < self.classes):
            raise DataError(f"{where}: labels span {int(y.min())}..{int(y.max())}, expected 0..{self.classes - 1}")
        return x, y

    def _subset(self, x: Tensor, y: Tensor, size: int | None, key: str, split: str, gen: torch.Generator):
        """A fixed random subset of `size` examples (all of them for None), in file order."""
        perm = torch.randperm(len(y), generator=gen)  # drawn even when unused: each subset keeps its stream position
        if size is None:
            return x, y
        if size > len(y):
            raise DataError(f"data.{key}={size} but {self.title} has {len(y)} {split} images on disk")
        keep = perm[:size].sort().values
        return x[keep], y[keep]


def data_root(root: str) -> Path:
    return Path(root).expanduser().resolve()


def channel_stats(x: Tensor) -> tuple[Tensor, Tensor]:
    """Per-channel mean and (population) standard deviation of uint8 images (N, C, H, W), float64, exact.

    Counted through a histogram of the 256 byte values, so no float copy of the
    dataset is ever made.
    """
    values = torch.arange(256, dtype=torch.float64)
    means, stds = [], []
    for c in range(x.shape[1]):
        counts = torch.bincount(x[:, c].reshape(-1), minlength=256).double()
        n = counts.sum()
        mean = (counts * values).sum() / n
        var = (counts * (values - mean) ** 2).sum() / n
        means.append(mean)
        stds.append(var.sqrt())
    return torch.stack(means), torch.stack(stds)


def augment(x: Tensor, gen: torch.Generator, pad: int, flip: bool) -> Tensor:
    """Random crop after zero padding by `pad`, then a random horizontal flip, per image.

    x: (B, C, H, W) -> (B, C, H, W), same dtype. Every random draw comes from `gen`, on the CPU.
    Crop and flip are one gather: output column j of a mirrored image is column
    W - 1 - j of its crop window.
    """
    B, C, H, W = x.shape
    dev = x.device
    zeros = torch.zeros(B, dtype=torch.long, device=dev)
    top = Task.indices(2 * pad + 1, B, gen, dev) if pad else zeros
    left = Task.indices(2 * pad + 1, B, gen, dev) if pad else zeros
    cols = torch.arange(W, device=dev).expand(B, W)  # (B, W): column of the window each output column shows
    if flip:
        mirror = (torch.rand(B, generator=gen) < 0.5).to(dev, non_blocking=True)
        cols = torch.where(mirror[:, None], W - 1 - cols, cols)
    padded = F.pad(x, (pad, pad, pad, pad)) if pad else x  # (B, C, H + 2p, W + 2p)
    rows = top[:, None, None] + torch.arange(H, device=dev)[None, :, None]  # (B, H, 1)
    index = rows * (W + 2 * pad) + (left[:, None] + cols)[:, None, :]  # (B, H, W): flat position in the padded image
    flat = padded.reshape(B, C, -1).gather(2, index.view(B, 1, H * W).expand(B, C, H * W))
    return flat.view(B, C, H, W)


class ImageTask(Task):
    """Images (B, C, H, W), normalised per channel, with their class labels (B,)."""

    def __init__(
        self, train_x: Tensor, train_y: Tensor, eval_x: Tensor, eval_y: Tensor, mean: Tensor, std: Tensor,
        *, classes: int, pad: int, flip: bool, device: torch.device, dtype: torch.dtype,
    ) -> None:  # fmt: skip
        self.input_shape, self.output_dim = tuple(train_x.shape[1:]), classes
        self.device, self.dtype, self.pad, self.flip = device, dtype, pad, flip
        self.mean = mean.to(device, dtype).view(-1, 1, 1)  # (C, 1, 1), in byte units
        self.std = std.clamp_min(1e-6).to(device, dtype).view(-1, 1, 1)
        self.train_x = train_x.to(device)  # (N, C, H, W) uint8
        self.train_y = train_y.to(device)  # (N,) int64
        self._eval = (self.normalise(eval_x.to(device)), eval_y.to(device))

    def normalise(self, x: Tensor) -> Tensor:
        """uint8 images -> float images with zero mean and unit variance per channel (over the training split)."""
        return (x.to(self.dtype) - self.mean) / self.std

    @torch.no_grad()
    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        idx = self.indices(len(self.train_y), batch_size, gen, self.device)
        x = self.train_x[idx]
        if self.pad or self.flip:
            x = augment(x, gen, self.pad, self.flip)
        return self.normalise(x), self.train_y[idx]

    def eval_set(self) -> tuple[Tensor, Tensor]:
        return self._eval

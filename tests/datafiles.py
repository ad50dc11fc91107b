"""Tiny datasets written in the exact on-disk formats torchvision keeps, for the tests.

The CIFAR files are written as the real ones were, by Python 2: byte strings as
Python 2 `str` (opcode BINSTRING) and numpy's array reconstructor under its
numpy 1 name, so the readers meet what a user's disk holds.
"""

from __future__ import annotations

import gzip
import pickle
import struct
from pathlib import Path

import numpy as np


class _Python2Pickler(pickle._Pickler):
    dispatch = pickle._Pickler.dispatch.copy()

    def _save_as_python2_str(self, obj: bytes) -> None:
        if len(obj) < 256:
            self.write(pickle.SHORT_BINSTRING + bytes([len(obj)]) + obj)
        else:
            self.write(pickle.BINSTRING + struct.pack("<i", len(obj)) + obj)
        self.memoize(obj)

    dispatch[bytes] = _save_as_python2_str


def python2_pickle(obj) -> bytes:
    import io

    buf = io.BytesIO()
    _Python2Pickler(buf, protocol=2).dump(obj)
    return buf.getvalue().replace(b"cnumpy._core.multiarray\n", b"cnumpy.core.multiarray\n")


def images(n: int, shape: tuple[int, ...], seed: int) -> np.ndarray:
    """uint8 images whose channels have different ranges (channel c spans 40c .. 40c + 120)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 121, size=(n, *shape), dtype=np.uint8)
    return x + (40 * np.arange(shape[0], dtype=np.uint8)).reshape(-1, *([1] * (len(shape) - 1)))


def labels(n: int, classes: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed + 1).integers(0, classes, size=n)


def write_cifar(root: Path, *, classes: int = 10, per_batch: int = 20, n_test: int = 80) -> dict:
    """CIFAR-10 (5 training batches + test_batch) or CIFAR-100 (train + test); returns the arrays written."""
    if classes == 10:
        folder, key = root / "cifar-10-batches-py", b"labels"
        names = [f"data_batch_{i}" for i in range(1, 6)]
    else:
        folder, key = root / "cifar-100-python", b"fine_labels"
        names = ["train"]
    folder.mkdir(parents=True, exist_ok=True)
    out = {"train_x": [], "train_y": []}
    for i, name in enumerate(names):
        n = per_batch * (5 if classes != 10 else 1)
        x, y = images(n, (3, 32, 32), seed=i), labels(n, classes, seed=i)
        entry = {b"batch_label": b"training batch", b"data": x.reshape(n, 3072), key: [int(v) for v in y]}
        if classes != 10:
            entry[b"coarse_labels"] = [int(v) % 20 for v in y]
        (folder / name).write_bytes(python2_pickle(entry))
        out["train_x"].append(x)
        out["train_y"].append(y)
    x, y = images(n_test, (3, 32, 32), seed=99), labels(n_test, classes, seed=99)
    test = {b"batch_label": b"testing batch", b"data": x.reshape(n_test, 3072), key: [int(v) for v in y]}
    (folder / ("test_batch" if classes == 10 else "test")).write_bytes(python2_pickle(test))
    return {"train_x": np.concatenate(out["train_x"]), "train_y": np.concatenate(out["train_y"]), "test_x": x, "test_y": y}


def idx_bytes(array: np.ndarray) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}i", *array.shape)
    return header + array.astype(np.uint8).tobytes()


def learnable(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Images whose brightness says their label (label 9 is brightest), so a model can learn them."""
    return (x // 4 + 12 * y.reshape(-1, *([1] * (x.ndim - 1)))).astype(np.uint8)


def write_mnist(
    root: Path, *, folder: str = "MNIST", n_train: int = 100, n_test: int = 80, gz: bool = True, signal: bool = False
) -> dict:
    """The four IDX files of MNIST (or Fashion-MNIST, folder="FashionMNIST") under <root>/<folder>/raw/.
    With `signal`, images are `learnable` from their labels; otherwise labels are noise."""
    raw = root / folder / "raw"
    raw.mkdir(parents=True, exist_ok=True)
    arrays = {
        "train_x": images(n_train, (1, 28, 28), seed=1)[:, 0],
        "train_y": labels(n_train, 10, seed=1),
        "test_x": images(n_test, (1, 28, 28), seed=2)[:, 0],
        "test_y": labels(n_test, 10, seed=2),
    }
    if signal:
        for split in ("train", "test"):
            arrays[f"{split}_x"] = learnable(arrays[f"{split}_x"], arrays[f"{split}_y"])
    names = {
        "train_x": "train-images-idx3-ubyte",
        "train_y": "train-labels-idx1-ubyte",
        "test_x": "t10k-images-idx3-ubyte",
        "test_y": "t10k-labels-idx1-ubyte",
    }
    for key, name in names.items():
        data = idx_bytes(arrays[key])
        if gz:
            (raw / f"{name}.gz").write_bytes(gzip.compress(data))
        else:
            (raw / name).write_bytes(data)
    return arrays


def token_stream(n: int, vocab: int, seed: int) -> np.ndarray:
    """Token ids a model can learn: mostly the successor rule next = (3 * id + 1) % vocab, one id in ten random."""
    rng = np.random.default_rng(seed)
    jump, random = rng.random(n) < 0.1, rng.integers(0, vocab, size=n)
    ids = np.empty(n, dtype=np.int64)
    ids[0] = random[0]
    for i in range(1, n):
        ids[i] = random[i] if jump[i] else (3 * ids[i - 1] + 1) % vocab
    return ids


def write_nanogpt(folder: Path, *, vocab: int = 40, n_train: int = 20_000, n_val: int = 4_000, meta: bool = True,
                  dtype: str = "<u2") -> dict:
    """nanoGPT's layout, as its prepare.py writes it: train.bin and val.bin (raw ids) and, for its
    character sets, meta.pkl (a plain dict: vocab_size, itos, stoi). Returns the ids written."""
    folder.mkdir(parents=True, exist_ok=True)
    train, val = token_stream(n_train, vocab, seed=0), token_stream(n_val, vocab, seed=1)
    train.astype(dtype).tofile(folder / "train.bin")
    val.astype(dtype).tofile(folder / "val.bin")
    if meta:
        itos = {i: chr(33 + i) for i in range(vocab)}
        with open(folder / "meta.pkl", "wb") as f:
            pickle.dump({"vocab_size": vocab, "itos": itos, "stoi": {c: i for i, c in itos.items()}}, f)
    return {"train": train, "val": val}

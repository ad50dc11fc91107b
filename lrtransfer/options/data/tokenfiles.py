"""Token files as language-model code keeps them, opened without reading them into memory.

- nanoGPT's `.bin` (its `prepare.py` writes `train.bin` and `val.bin`): a flat array of
  token ids, little-endian, no header; uint16 for GPT-2's 50,257 tokens, uint32 past
  65,536. Any file not named `.npy` is read this way, with `data.dtype`.
- numpy's `.npy`: its header read by numpy's own format reader; integer ids of any
  width and byte order, read as one stream in C order. An object array (which only
  unpickling could read) is refused, never loaded.
- nanoGPT's `meta.pkl` beside them (its character-level sets): a pickled dict whose
  `vocab_size` is read by an unpickler that builds only plain data (dicts, lists,
  strings, numbers): a pickle that names any class or function, which unpickling
  would import and call, is refused in one line.

Every file is memory-mapped (`np.memmap`): a file of billions of tokens costs the pages
a batch touches, not its size. Each reader returns a 1-D array of ids or raises
DataError naming the file and what is wrong with it.
"""

from __future__ import annotations

import pickle
from pathlib import Path

import numpy as np

from lrtransfer.options.data.formats import DataError

BIN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}  # data.dtype -> a .bin file's ids
META = "meta.pkl"  # nanoGPT's vocabulary file, beside train.bin
MAX_META_BYTES = 64 << 20  # a meta.pkl is a vocabulary; anything larger is not one
SAMPLE_BLOCKS, BLOCK = 64, 4096  # ids checked before any job: 64 blocks of 4096 spread over the file, and its end


def open_tokens(path: Path, dtype: str, key: str) -> np.ndarray:
    """The file's ids, (N,), memory-mapped; `key` names it in messages (`data.train_path=...`)."""
    if not path.is_file():
        why = "is a folder" if path.is_dir() else f"no such file ({path.resolve()})"
        raise DataError(f"{key}: {why}; give a token file (nanoGPT's train.bin, or a .npy)")
    if path.suffix == ".npy":
        return _open_npy(path, key)
    item = BIN_DTYPES[dtype]
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{key}: the file is empty")
    if size % item.itemsize:
        raise DataError(f"{key}: {size} bytes is not a whole number of {dtype} ids ({item.itemsize} bytes each); "
                        f"is data.dtype right (uint16, uint32)?")
    return np.memmap(path, dtype=item, mode="r")


def _open_npy(path: Path, key: str) -> np.ndarray:
    fmt = np.lib.format
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in readers:
                raise DataError(f"{key}: .npy format version {version[0]}.{version[1]}; readable: 1.0, 2.0")
            shape, fortran, dtype = readers[version](f)
            offset = f.tell()
    except DataError:
        raise
    except (OSError, ValueError) as e:  # not a .npy, a cut header
        raise DataError(f"{key}: not a readable .npy file ({' '.join(str(e).split())})") from None
    if dtype.hasobject:
        raise DataError(f"{key}: holds Python objects (dtype {dtype}), which only unpickling could read; "
                        "save the token ids as an integer array")
    if dtype.kind not in "ui":
        raise DataError(f"{key}: holds {dtype} values; token ids are integers (uint16, uint32, int32, int64, ...)")
    if fortran and len(shape) > 1:
        raise DataError(f"{key}: a Fortran-ordered {shape} array; save it in C order (np.ascontiguousarray)")
    n = int(np.prod(shape, dtype=np.int64))
    size = path.stat().st_size
    if size != offset + n * dtype.itemsize:
        raise DataError(f"{key}: its header says {n} ids of {dtype.itemsize} bytes but the file holds "
                        f"{size - offset} bytes of data (cut short, or written over?)")
    if n == 0:
        raise DataError(f"{key}: the array is empty")
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=(n,))


class _Refused(pickle.UnpicklingError):
    pass


class _PlainData(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers, which need no import; any class or
    function a pickle names (how a pickle runs code) is refused."""

    def find_class(self, module: str, name: str):
        raise _Refused(f"it names {module}.{name}, which unpickling would import and call")


def meta_vocab(folder: Path, key: str) -> int | None:
    """nanoGPT's meta.pkl in `folder`: its vocab_size, or None when there is no meta.pkl."""
    path = folder / META
    if not path.is_file():
        return None
    instead = "give data.vocab_size=N instead"
    try:
        if path.stat().st_size > MAX_META_BYTES:
            raise DataError(f"{path}: {path.stat().st_size >> 20} MiB is too large for a meta.pkl; {instead}")
        with open(path, "rb") as f:
            meta = _PlainData(f).load()
    except DataError:
        raise
    except _Refused as e:
        raise DataError(f"{path}: refused, {e}; a meta.pkl holds only plain data (nothing is run): {instead}") from None
    except Exception as e:  # truncated, not a pickle, nested too deep
        raise DataError(f"{path}: not a readable meta.pkl ({type(e).__name__}: {' '.join(str(e).split())}); "
                        f"{instead}") from None
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise DataError(f"{path}: no positive integer vocab_size in it (found {type(meta).__name__}"
                        f"{' with ' + ', '.join(map(str, list(meta)[:6])) if isinstance(meta, dict) else ''}); "
                        f"{instead}")
    return vocab


def check_ids(ids: np.ndarray, vocab: int, key: str) -> None:
    """Refuse ids outside [0, vocab) in a sample of the file: blocks spread over it, its end included."""
    n = len(ids)
    starts = np.linspace(0, max(0, n - BLOCK), SAMPLE_BLOCKS).astype(np.int64)
    at = np.minimum(starts[:, None] + np.arange(BLOCK), n - 1)  # (SAMPLE_BLOCKS, BLOCK) positions
    check_window(ids[at], at, vocab, key)


def check_window(window: np.ndarray, at: np.ndarray, vocab: int, key: str, offset: int = 0) -> None:
    """Refuse ids outside [0, vocab) in `window`, read from positions `at` (same shape) of a stream
    that begins at id `offset` of its file."""
    lo, hi = int(window.min()), int(window.max())
    if hi >= vocab or lo < 0:
        bad = hi if hi >= vocab else lo
        where = offset + int(at[window == bad].flat[0])
        raise DataError(f"{key}: token id {bad} at position {where} is outside the vocabulary of {vocab} "
                        f"(ids 0..{vocab - 1}); is data.vocab_size (or data.dtype) right?")

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

A file is never loaded, nor kept memory-mapped: each window of ids is read from its
place in the file (`TokenFile.windows`: a seek and a read into the batch's own array),
so a file of billions of tokens costs no memory, however long a run reads it. (A map
kept open keeps every page a run has read in the process's resident memory, which over
a long run of random windows grows toward the file's size; nanoGPT's train.py remakes
its `np.memmap` for every batch for that reason.) `open_tokens` returns a `TokenFile`
or raises DataError naming the file and what is wrong with it.
"""

from __future__ import annotations

import pickle
import stat
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from lrtransfer.errors import file_kind, one_line, shown
from lrtransfer.options.data.formats import DataError

BIN_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}  # data.dtype -> a .bin file's ids
META = "meta.pkl"  # nanoGPT's vocabulary file, beside train.bin
MAX_META_BYTES = 64 << 20  # a meta.pkl is a vocabulary; anything larger is not one
MAX_VOCAB = 2**32  # a vocabulary: a .bin stores uint16 or uint32 ids, and no tokenizer has more
SAMPLE_BLOCKS, BLOCK = 64, 4096  # ids checked before any job: 64 blocks of 4096 spread over the file, and its end
FULL_CHECK, CHUNK = 1 << 26, 1 << 20  # a file of up to 2^26 ids is checked whole instead, 2^20 ids at a time


@dataclass(frozen=True)
class TokenFile:
    """Ids start..stop of a file of ids of `dtype` that begin `offset` bytes into it (a .npy's header)."""

    path: Path
    dtype: np.dtype
    offset: int
    start: int
    stop: int

    def __len__(self) -> int:
        return self.stop - self.start

    def part(self, start: int, stop: int | None = None) -> TokenFile:
        """Ids start..stop of this part (stop None: to its end)."""
        return replace(self, start=self.start + start, stop=self.stop if stop is None else self.start + stop)

    def windows(self, starts: np.ndarray, length: int) -> np.ndarray:
        """(len(starts), length) ids: the `length` ids from each of `starts` (positions in this part)."""
        out = np.empty((len(starts), length), self.dtype)
        with open(self.path, "rb", buffering=0) as f:
            for row, start in zip(out, np.asarray(starts).tolist()):
                f.seek(self.offset + (self.start + start) * self.dtype.itemsize)
                if f.readinto(row) != row.nbytes:
                    raise DataError(f"{self.path}: shorter than when it was checked (changed while in use?)")
        return out


def refuse_special(path: Path, key: str) -> None:
    """Refuse a path that is there but is no regular file, before anything opens or hashes it: a
    FIFO would wait forever for a writer, a device never end, a folder be hashed whole for the
    job's id. A missing path passes: `open_tokens` says so where the file is read."""
    try:
        mode = path.stat().st_mode
    except OSError:
        return
    if not stat.S_ISREG(mode):
        why = "is a folder" if stat.S_ISDIR(mode) else f"not a regular file ({file_kind(mode)})"
        raise DataError(f"{key}: {why}; give a token file (nanoGPT's train.bin, or a .npy)")


def open_tokens(path: Path, dtype: str, key: str) -> TokenFile:
    """The file's ids; `key` names it in messages (`data.train_path=...`)."""
    refuse_special(path, key)
    if not path.is_file():
        raise DataError(f"{key}: no such file ({path.resolve()}); give a token file (nanoGPT's train.bin, or a .npy)")
    if path.suffix.lower() == ".npy" or _npy_magic(path):  # a .npy by its header, whatever its name
        return _open_npy(path, key)
    item = BIN_DTYPES[dtype]
    size = path.stat().st_size
    if size == 0:
        raise DataError(f"{key}: the file is empty")
    if size % item.itemsize:
        raise DataError(f"{key}: {size} bytes is not a whole number of {dtype} ids ({item.itemsize} bytes each); "
                        f"is data.dtype right (uint16, uint32)?")
    return TokenFile(path, item, 0, 0, size // item.itemsize)


def _npy_magic(path: Path) -> bool:
    with open(path, "rb") as f:
        return f.read(6) == b"\x93NUMPY"


def _open_npy(path: Path, key: str) -> TokenFile:
    fmt = np.lib.format
    readers = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}
    try:
        with open(path, "rb") as f:
            version = fmt.read_magic(f)
            if version not in readers:
                raise DataError(f"{key}: .npy format version {version[0]}.{version[1]}; readable: 1.0, 2.0")
            shape, _, dtype = readers[version](f)
            offset = f.tell()
    except DataError:
        raise
    except (OSError, ValueError) as e:  # not a .npy, a cut header
        raise DataError(f"{key}: not a readable .npy file ({one_line(e)})") from None
    if dtype.hasobject:
        raise DataError(f"{key}: holds Python objects (dtype {dtype}), which only unpickling could read; "
                        "save the token ids as an integer array")
    if dtype.kind not in "ui":
        raise DataError(f"{key}: holds {dtype} values; token ids are integers (uint16, uint32, int32, int64, ...)")
    if len(shape) != 1:  # rows of a 2-D array may be documents or windows: joining them is the user's call
        raise DataError(f"{key}: a {len(shape)}-D array of shape {shape}; a token file is one stream of ids: "
                        "save a 1-D array (np.ravel(ids) joins rows in order, if they are one stream)")
    n = int(np.prod(shape, dtype=np.int64))
    size = path.stat().st_size
    if size != offset + n * dtype.itemsize:
        raise DataError(f"{key}: its header says {n} ids of {dtype.itemsize} bytes but the file holds "
                        f"{size - offset} bytes of data (cut short, or written over?)")
    if n == 0:
        raise DataError(f"{key}: the array is empty")
    return TokenFile(path, dtype, offset, 0, n)


class _Refused(pickle.UnpicklingError):
    pass


class _PlainData(pickle.Unpickler):
    """Builds dicts, lists, tuples, strings and numbers, which need no import; any class or
    function a pickle names (how a pickle runs code) is refused."""

    def find_class(self, module: str, name: str):
        raise _Refused(f"it names {module}.{name}, which unpickling would import and call")


def meta_vocab(folder: Path) -> int | None:
    """nanoGPT's meta.pkl in `folder`: its vocab_size, or None when there is no meta.pkl."""
    path = folder / META
    instead = "give data.vocab_size=N instead"
    if not path.is_file():
        if path.exists():  # a folder, a FIFO: never opened
            raise DataError(f"{path}: not a regular file ({file_kind(path.stat().st_mode)}); {instead}")
        return None
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
        raise DataError(f"{path}: not a readable meta.pkl ({one_line(e)}); {instead}") from None
    vocab = meta.get("vocab_size") if isinstance(meta, dict) else None
    if not isinstance(vocab, int) or isinstance(vocab, bool) or vocab < 1:
        raise DataError(f"{path}: no positive integer vocab_size in it (found {type(meta).__name__}"
                        f"{' with ' + ', '.join(shown(k, names_plain=True) for k in list(meta)[:6]) if isinstance(meta, dict) else ''}); "
                        f"{instead}")
    if vocab > MAX_VOCAB:
        raise DataError(f"{path}: {too_large(vocab)}; {instead}")
    return vocab


def too_large(vocab: int) -> str:
    """Why a vocabulary past MAX_VOCAB is refused, wherever it was given."""
    return f"vocab_size={shown(vocab)} is beyond the sane bound for a vocabulary ({MAX_VOCAB:,}: uint32 ids)"




def check_ids(ids: TokenFile, vocab: int, key: str) -> None:
    """Refuse ids outside [0, vocab): every id of a file of up to FULL_CHECK ids, else a sample of
    it (blocks spread over it, its end included), so that a file of billions is opened at once."""
    if len(ids) <= FULL_CHECK:
        for start in range(0, len(ids), CHUNK):
            n = min(CHUNK, len(ids) - start)
            check_window(ids.windows(np.array([start]), n), np.array([start]), vocab, key, ids.start)
        return
    length = min(BLOCK, len(ids))
    starts = np.linspace(0, len(ids) - length, SAMPLE_BLOCKS).astype(np.int64)
    check_window(ids.windows(starts, length), starts, vocab, key, ids.start)


def check_window(windows: np.ndarray, starts: np.ndarray, vocab: int, key: str, offset: int = 0) -> None:
    """Refuse ids outside [0, vocab) in `windows` (n, length), read from `starts` (n,) of a part of
    a file that begins at its id `offset`."""
    lo, hi = int(windows.min()), int(windows.max())
    if hi >= vocab or lo < 0:
        bad = hi if hi >= vocab else lo
        row, col = np.argwhere(windows == bad)[0]
        where = offset + int(starts[row]) + int(col)
        raise DataError(f"{key}: token id {bad} at position {where} is outside the vocabulary of {vocab} "
                        f"(ids 0..{vocab - 1}); is data.vocab_size (or data.dtype) right?")

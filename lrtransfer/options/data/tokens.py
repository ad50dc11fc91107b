"""data=tokens: next-token prediction on token files as nanoGPT keeps them (`train.bin`, `val.bin`,
`meta.pkl`), or as `.npy` arrays.

The files are never loaded: each window a batch needs is read from its place in the
file (`tokenfiles.py`), so a file of billions of tokens costs no memory. A batch is
`train.batch_size` windows of `seq_len + 1` consecutive ids, each starting anywhere in
the training file, uniformly, drawn from the caller's generator (runs sharing a seed
share every batch). The held-out loss is on `eval_size` fixed windows spread evenly over the
validation file (or, without one, over the last `eval_size` windows of the training
file, as data=text holds out its end).

The vocabulary is `data.vocab_size`, or the `vocab_size` of nanoGPT's `meta.pkl`
beside the training file; it sets the model's embedding and readout (a token model
gets it as `output_dim`, and its context length as `input_shape`). Before any job the
files are checked once: they exist, hold a whole number of ids, enough for a window,
and a sample of their ids lies in the vocabulary; every batch's ids are checked too.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import ClassVar, NamedTuple, Optional

import numpy as np
import torch
from torch import Tensor

from lrtransfer.options.data import Task
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.data.tokenfiles import (
    MAX_VOCAB, META, TokenFile, check_ids, check_window, meta_vocab, open_tokens, refuse_special, too_large,
)
from lrtransfer.options.schema import TOKENS, ConfigError, content, positive


class TokenDtype(str, Enum):
    """The width of a `.bin` file's ids (a `.npy` says its own)."""

    uint16 = "uint16"
    uint32 = "uint32"


@dataclass
class TokensOptions:
    """Token files: nanoGPT's .bin (raw little-endian ids) or .npy; the vocabulary from the key or meta.pkl."""

    INPUTS: ClassVar[str] = TOKENS

    name: str = "tokens"
    train_path: Optional[str] = content(None, with_files=(META,), read_unless="vocab_size")  # nanoGPT's train.bin, or a .npy
    val_path: Optional[str] = content(None)  # None: the last eval_size windows of train_path are held out
    dtype: TokenDtype = TokenDtype.uint16  # a .bin file's ids
    vocab_size: Optional[int] = None  # None: meta.pkl's beside train_path
    seq_len: int = 128  # predictions per sequence (context length)
    eval_size: int = 256  # held-out sequences

    def check(self) -> None:
        if not self.train_path:
            raise ConfigError("data.train_path is required: the training token file (nanoGPT's train.bin, or a .npy)")
        for key in ("train_path", "val_path"):  # before the job's id hashes them
            if getattr(self, key):
                refuse_special(Path(getattr(self, key)).expanduser(), f"data.{key}={getattr(self, key)}")
        check_sizes(self)


OPTIONS = TokensOptions


def check_sizes(d) -> None:
    """The keys every token option shares: seq_len, eval_size, vocab_size."""
    positive("data.seq_len", d.seq_len)
    positive("data.eval_size", d.eval_size)
    if d.vocab_size is not None:
        positive("data.vocab_size", d.vocab_size)
        if d.vocab_size > MAX_VOCAB:
            raise ConfigError(f"data.{too_large(d.vocab_size)}")


class Stream(NamedTuple):
    """Token ids in a file, with what names them in a message."""

    ids: TokenFile
    key: str


def windows_needed(n: int, seq_len: int, key: str) -> None:
    if n < seq_len + 1:
        raise DataError(f"{key}: {n} tokens, too few for data.seq_len={seq_len} "
                        f"(a window is seq_len + 1 = {seq_len + 1} tokens)")


def split(train: Stream, val: Stream | None, seq_len: int, eval_size: int, val_key: str) -> tuple[Stream, Stream]:
    """The training and held-out streams: `val` as given, or the last eval_size windows of `train`
    (`val_key`: the key that would have given a held-out file)."""
    if val is None:
        held = eval_size * seq_len + 1
        n = len(train.ids) - held
        if n < seq_len + 1:
            raise DataError(f"{train.key}: {len(train.ids)} tokens, too few for data.seq_len={seq_len} with "
                            f"data.eval_size={eval_size} windows held out from it: it needs at least {held + seq_len + 1} "
                            f"(or give {val_key})")
        return train._replace(ids=train.ids.part(0, n)), Stream(train.ids.part(n), f"{train.key} (held out)")
    windows_needed(len(train.ids), seq_len, train.key)
    windows_needed(len(val.ids), seq_len, val.key)
    distinct = len(val.ids) - seq_len  # window starts in it; more held-out windows would repeat them
    if eval_size > distinct:
        raise DataError(f"data.eval_size={eval_size}: {val.key} holds {distinct} distinct windows of "
                        f"data.seq_len + 1 = {seq_len + 1} tokens; give data.eval_size={distinct} or fewer")
    return train, val


class TokenTask(Task):
    """x: (B, T) token ids; y: (B, T), the token after each position; windows of T + 1 ids of a stream."""

    def __init__(self, train: Stream, val: Stream, vocab: int, seq_len: int, eval_size: int,
                 device: torch.device) -> None:
        self.input_shape, self.output_dim = (seq_len,), vocab
        self.train, self.device, self.seq_len = train, device, seq_len
        starts = np.linspace(0, len(val.ids) - seq_len - 1, eval_size).round().astype(np.int64)
        w = self._windows(val, starts)  # (eval_size, T + 1): fixed windows spread evenly over val
        self._eval = (w[:, :-1], w[:, 1:])

    def _windows(self, stream: Stream, starts: np.ndarray) -> Tensor:
        w = stream.ids.windows(starts, self.seq_len + 1)  # (n, T + 1)
        check_window(w, starts, self.output_dim, stream.key, stream.ids.start)
        return torch.from_numpy(w.astype(np.int64)).to(self.device, non_blocking=True)

    @torch.no_grad()
    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        starts = torch.randint(len(self.train.ids) - self.seq_len, (batch_size,), generator=gen).numpy()
        w = self._windows(self.train, starts)  # (B, T + 1)
        return w[:, :-1], w[:, 1:]

    def eval_set(self) -> tuple[Tensor, Tensor]:
        return self._eval


def vocabulary(d: TokensOptions, train_path: Path) -> int:
    if d.vocab_size is not None:
        return d.vocab_size
    vocab = meta_vocab(train_path.parent)
    if vocab is None:
        raise DataError(f"data.vocab_size is required: no {META} beside data.train_path={d.train_path} says it "
                        "(GPT-2's tokens: 50257, or nanoGPT's padded 50304)")
    return vocab


def opened(d: TokensOptions) -> tuple[Stream, Stream, int]:
    """The training and held-out streams and the vocabulary, each file checked (a sample of its ids)."""
    train_path = Path(d.train_path).expanduser()
    key = f"data.train_path={d.train_path}"
    train = Stream(open_tokens(train_path, d.dtype.value, key), key)
    val = None
    if d.val_path is not None:
        key = f"data.val_path={d.val_path}"
        val = Stream(open_tokens(Path(d.val_path).expanduser(), d.dtype.value, key), key)
    vocab = vocabulary(d, train_path)
    for stream in (train, val):
        if stream is not None:
            check_ids(stream.ids, vocab, stream.key)
    return *split(train, val, d.seq_len, d.eval_size, "data.val_path"), vocab


def ensure_files(d: TokensOptions) -> None:
    """Before any job: the files are there and whole, long enough, and their ids in the vocabulary."""
    opened(d)


def build(d: TokensOptions, device: torch.device, dtype: torch.dtype) -> TokenTask:
    train, val, vocab = opened(d)
    return TokenTask(train, val, vocab, d.seq_len, d.eval_size, device)

"""data=text: character-level next-token prediction, for language models.

The text is `data.path` (UTF-8), or by default the documentation that ships inside
every CPython: the topic texts of `pydoc_data.topics` (what `help('if')` prints),
about 465,000 characters of English prose and code on Python 3.11. It needs no
download; it differs a little between Python versions, which every record notes
(`versions.python`).

The vocabulary is the set of characters of the whole text (so the held-out part
never meets an unknown one), ids in code-point order. The last `data.eval_size`
windows of `data.seq_len` predictions are held out; training windows start
anywhere in the rest, uniformly, drawn from the caller's generator.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Optional

import torch
from torch import Tensor

from lrtransfer.options.data import Task
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.schema import TOKENS, positive


@dataclass
class TextOptions:
    """Character-level next-token prediction on a text file."""

    INPUTS: ClassVar[str] = TOKENS

    name: str = "text"
    path: Optional[str] = None  # a UTF-8 text file; None: the embedded default (CPython's pydoc topics)
    seq_len: int = 128  # predictions per sequence (context length)
    eval_size: int = 256  # held-out sequences, from the end of the text

    def check(self) -> None:
        positive("data.seq_len", self.seq_len)
        positive("data.eval_size", self.eval_size)


OPTIONS = TextOptions

DEFAULT_SOURCE = "pydoc_data.topics"


def default_text() -> str:
    """The topics of CPython's own help system, in sorted order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key] for key in sorted(topics))


def read_text(path: str | None) -> str:
    if path is None:
        return default_text()
    p = Path(path).expanduser()
    try:
        return p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise DataError(f"data.path={path}: no such file ({p.resolve()}); give a UTF-8 text file, or data.path=null for the embedded default") from None
    except UnicodeDecodeError as e:
        raise DataError(f"data.path={path}: not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise DataError(f"data.path={path}: cannot read ({e.strerror})") from None


def split_sizes(n_chars: int, seq_len: int, eval_size: int, source: str) -> int:
    """The number of training characters, after holding out eval_size windows of seq_len predictions."""
    held = eval_size * seq_len + 1
    n_train = n_chars - held
    if n_train < seq_len + 1:
        raise DataError(
            f"the text ({source}) has {n_chars} characters, too few for data.seq_len={seq_len} with "
            f"data.eval_size={eval_size}: it needs at least {held + seq_len + 1}"
        )
    return n_train


class TextTask(Task):
    """x: (B, T) character ids; y: (B, T), the character after each position."""

    def __init__(self, text: str, seq_len: int, eval_size: int, device: torch.device, source: str) -> None:
        n_train = split_sizes(len(text), seq_len, eval_size, source)
        codes = torch.frombuffer(bytearray(text.encode("utf-32-le")), dtype=torch.int32)
        chars, ids = torch.unique(codes, sorted=True, return_inverse=True)
        self.vocab = "".join(map(chr, chars.tolist()))
        self.input_shape, self.output_dim = (seq_len,), len(self.vocab)
        self.device, self.seq_len = device, seq_len
        ids = ids.to(device)
        self.train_ids = ids[:n_train]  # (n_train,)
        held = ids[n_train:]  # (eval_size * T + 1,)
        windows = torch.arange(eval_size, device=device)[:, None] * seq_len + torch.arange(seq_len + 1, device=device)
        w = held[windows]  # (eval_size, T + 1): consecutive windows sharing one character at each boundary
        self._eval = (w[:, :-1], w[:, 1:])
        self._offsets = torch.arange(seq_len + 1, device=device)

    def decode(self, ids: Tensor) -> str:
        return "".join(self.vocab[i] for i in ids.tolist())

    @torch.no_grad()
    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        starts = self.indices(len(self.train_ids) - self.seq_len, batch_size, gen, self.device)
        w = self.train_ids[starts[:, None] + self._offsets]  # (B, T + 1)
        return w[:, :-1], w[:, 1:]

    def eval_set(self) -> tuple[Tensor, Tensor]:
        return self._eval


def source_name(path: str | None) -> str:
    return f"data.path={path}" if path is not None else f"the embedded default, {DEFAULT_SOURCE}"


def ensure_files(d: TextOptions) -> None:
    """Before any job: the text is readable and long enough."""
    split_sizes(len(read_text(d.path)), d.seq_len, d.eval_size, source_name(d.path))


def build(d: TextOptions, device: torch.device, dtype: torch.dtype) -> TextTask:
    return TextTask(read_text(d.path), d.seq_len, d.eval_size, device, source_name(d.path))

"""data=hf_disk: next-token prediction on a Hugging Face `datasets` dataset saved on disk
(`save_to_disk`), read with `load_from_disk`: never from the Hub, and nothing is downloaded.

Its rows are documents, concatenated in order into one stream of token ids per split:
an `input_ids` column is used as it is; a `text` column is tokenized by the user's own
`tokenizer.json` (the `tokenizers` library's `encode`, whose post-processor adds
whatever special tokens that tokenizer adds, a BOS/EOS marking each document). The
stream is made once, before the first job, into a raw token file (nanoGPT's `.bin`
layout: little-endian uint16, or uint32 past 65,536 tokens) in the user's cache folder
(`data.cache`: never the dataset's own folder, which is the user's, nor a results
folder), named by a hash of what it is made from (the dataset's and the tokenizer's
contents, the split, the column), so the next run, in any study, reuses it; it is read
back as plain integers (nothing is unpickled), and trained on exactly as data=tokens
trains on its files (`tokens.TokenTask`). A stream is written whole or not at all, and a
cache folder that cannot take it is one line first (`cache.py`). A plan (`--plan`)
tokenizes nothing: it checks what a stream is made from and sizes the jobs on a stand-in
of the task's shapes (`planned`, `Unmade`), saying so (`plan_note`).

Held out: the `val_split` (default `validation`) of a DatasetDict, or, with
`val_split: null` (a single Dataset has no splits), the last `eval_size` windows of
the training stream, as data=text holds out its end.
"""

from __future__ import annotations

import hashlib
import json
import stat
from dataclasses import dataclass
from itertools import chain
from pathlib import Path
from typing import ClassVar, Optional

import numpy as np
import torch
from torch import Tensor

from lrtransfer.errors import file_kind, one_line
from lrtransfer.options.contents import fingerprint
from lrtransfer.options.data import Task
from lrtransfer.options.data.cache import cache_folder, usable, whole_file
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.data.tokenfiles import check_ids, open_tokens
from lrtransfer.options.data.tokens import Stream, TokenTask, check_sizes, split
from lrtransfer.options.schema import TOKENS, ConfigError, content, location

EXTRA = "pip install 'lrtransfer[lm]'"
ROWS = 1000  # rows tokenized at a time
FORMAT = 1  # the cache's layout; a change makes new files


@dataclass
class HFDiskOptions:
    """A `datasets` dataset saved with save_to_disk: its input_ids, or its text tokenized by a local tokenizer.json."""

    INPUTS: ClassVar[str] = TOKENS

    name: str = "hf_disk"
    path: Optional[str] = content(None)  # the folder save_to_disk wrote (a DatasetDict, or one Dataset)
    train_split: str = "train"  # a DatasetDict's split to train on
    val_split: Optional[str] = "validation"  # its held-out split; None: the last eval_size windows of the training split
    column: Optional[str] = None  # None: input_ids where the dataset has it, else text
    tokenizer: Optional[str] = content(None)  # a tokenizer.json: tokenizes a text column; its vocabulary
    vocab_size: Optional[int] = None  # None: the tokenizer's (added tokens included)
    seq_len: int = 128  # predictions per sequence (context length)
    eval_size: int = 256  # held-out sequences
    cache: Optional[str] = location(None)  # where token streams are kept; None: $XDG_CACHE_HOME/lrtransfer

    def check(self) -> None:
        if not self.path:
            raise ConfigError("data.path is required: a folder written by a datasets dataset's save_to_disk")
        check_sizes(self)


OPTIONS = HFDiskOptions


# ---------------------------------------------------------------- the user's files
def dataset_folder(d: HFDiskOptions) -> Path:
    p = Path(d.path).expanduser()
    if not p.is_dir():
        why = f"not a folder ({kind(p)})" if p.exists() else f"no such folder ({p.resolve()})"
        raise DataError(f"data.path={d.path}: {why}; data=hf_disk reads a dataset saved on disk with save_to_disk, "
                        "never the Hugging Face Hub (load_dataset(...).save_to_disk(FOLDER) it yourself)")
    return p


def tokenizer_of(d: HFDiskOptions):
    """The tokenizer data.tokenizer names, from its file (never from the Hub), or None."""
    if d.tokenizer is None:
        return None
    p = Path(d.tokenizer).expanduser()
    if not p.is_file():  # never opened: a FIFO would wait for a writer
        why = ("is a folder: give the tokenizer.json in it" if p.is_dir() else
               f"not a regular file ({kind(p)})" if p.exists() else f"no such file ({p.resolve()})")
        raise DataError(f"data.tokenizer={d.tokenizer}: {why}; a tokenizer.json on disk (nothing is downloaded)")
    try:
        from tokenizers import Tokenizer
    except ImportError as e:
        raise DataError(f"data.tokenizer needs the tokenizers package, which cannot be imported ({e}); {EXTRA}") from None
    try:
        return Tokenizer.from_file(str(p))
    except Exception as e:
        raise DataError(f"data.tokenizer={d.tokenizer}: not a tokenizer.json the tokenizers library reads "
                        f"({one_line(e)})") from None


def kind(p: Path) -> str:
    mode = p.stat().st_mode
    return "a regular file" if stat.S_ISREG(mode) else file_kind(mode)


def vocabulary(d: HFDiskOptions, tokenizer) -> int:
    if d.vocab_size is not None:
        return d.vocab_size
    if tokenizer is None:
        column_of(d, load_splits(d)["train"], None)  # a text column needs a tokenizer: that is said first
        raise DataError("data.vocab_size is required: no data.tokenizer says it (the vocabulary the input_ids "
                        "index, which sets the model's embedding and readout)")
    return tokenizer.get_vocab_size(with_added_tokens=True)


def load_splits(d: HFDiskOptions) -> dict:
    """{role: the Dataset} for `train` and, where there is one, `val`."""
    try:
        import datasets
    except ImportError as e:
        raise DataError(f"data=hf_disk needs the datasets package, which cannot be imported ({e}); {EXTRA}") from None
    try:
        ds = datasets.load_from_disk(str(dataset_folder(d)))
    except DataError:
        raise
    except Exception as e:
        empty = empty_splits(dataset_folder(d))
        if empty:  # datasets' own loader fails on one (an IndexError), saying nothing of which
            raise DataError(f"data.path={d.path}: its {', '.join(empty)} split is empty, and datasets cannot load a "
                            "DatasetDict with an empty split; save it without that split (data.val_split=null holds "
                            "out the last data.eval_size windows of the training split)") from None
        raise DataError(f"data.path={d.path}: not a dataset saved with save_to_disk ({one_line(e)})") from None
    if not isinstance(ds, datasets.DatasetDict):
        if d.val_split is not None:
            raise DataError(f"data.path={d.path} holds one Dataset, without splits: give data.val_split=null to hold "
                            f"out its last data.eval_size windows, or save a DatasetDict with a {d.val_split} split")
        return {"train": ds}
    out = {}
    for role, name in (("train", d.train_split), ("val", d.val_split)):
        if name is not None:
            if name not in ds:
                raise DataError(f"data.{role}_split={name}: data.path={d.path} has no such split; "
                                f"its splits: {', '.join(ds)}")
            out[role] = ds[name]
    return out


def empty_splits(folder: Path) -> list[str]:
    """The splits of a saved DatasetDict that hold no data file (save_to_disk of an empty split)."""
    try:
        names = json.loads((folder / "dataset_dict.json").read_text())["splits"]
        return [n for n in names if json.loads((folder / n / "state.json").read_text()).get("_data_files") == []]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, RecursionError):
        return []


def column_of(d: HFDiskOptions, dataset, tokenizer) -> tuple[str, bool]:
    """(the column, whether it is text to tokenize), or one line saying what is wrong."""
    import pyarrow as pa

    names = dataset.column_names
    column = d.column or next((c for c in ("input_ids", "text") if c in names), None)
    if column not in names:
        what = f"data.column={d.column}: no such column" if d.column else "no input_ids or text column"
        raise DataError(f"data.path={d.path}: {what}; its columns: {', '.join(names)} (name one with data.column)")
    kind = dataset.data.schema.field(column).type
    if pa.types.is_string(kind) or pa.types.is_large_string(kind):
        if tokenizer is None:
            raise DataError(f"data.path={d.path}: column {column} holds text: give data.tokenizer=PATH/tokenizer.json "
                            "to tokenize it")
        return column, True
    if (pa.types.is_list(kind) or pa.types.is_large_list(kind)) and pa.types.is_integer(kind.value_type):
        return column, False
    raise DataError(f"data.path={d.path}: column {column} holds {kind}; give a column of token ids (lists of "
                    "integers) or of text (strings)")


# ---------------------------------------------------------------- the token streams
def stream_file(d: HFDiskOptions, split_name: str, vocab: int, tokenizer) -> Path:
    """Where a split's token stream is cached: named by what it is made from."""
    made_from = {"dataset": fingerprint(d.path), "split": split_name, "column": d.column, "format": FORMAT,
                 "tokenizer": fingerprint(d.tokenizer) if tokenizer is not None else None}
    if tokenizer is not None:
        from tokenizers import __version__

        made_from["tokenizers"] = __version__
    digest = hashlib.sha256(json.dumps(made_from, sort_keys=True).encode()).hexdigest()[:20]
    return cache_folder(d.cache) / "tokens" / f"hf-{digest}-{ids_dtype(vocab)}.bin"


def ids_dtype(vocab: int) -> str:
    return "uint16" if vocab <= 1 << 16 else "uint32"


def token_batches(dataset, column: str, tokenizer):
    """(first row, ids) of each ROWS rows: the column's ids, or its text tokenized, rows concatenated."""
    for first, table in zip(range(0, len(dataset), ROWS), dataset.with_format("arrow").iter(batch_size=ROWS)):
        values = table.column(column).combine_chunks()
        if tokenizer is None:
            yield first, values.flatten().to_numpy(zero_copy_only=False)
        else:
            texts = [t or "" for t in values.to_pylist()]
            yield first, np.fromiter(chain.from_iterable(e.ids for e in tokenizer.encode_batch(texts)), dtype=np.int64)


def write_stream(path: Path, batches, vocab: int, key: str) -> None:
    """The ids of `batches` into `path` (raw little-endian), each checked against the vocabulary;
    whole or not at all (`cache.whole_file`), so a reader never meets half a file."""
    dtype, total = np.dtype(ids_dtype(vocab)).newbyteorder("<"), 0
    with whole_file(path) as write:
        for first, ids in batches:
            if len(ids) and (ids.min() < 0 or ids.max() >= vocab):
                bad = int(ids.max() if ids.max() >= vocab else ids.min())
                raise DataError(f"{key}: token id {bad} in rows {first}..{first + ROWS - 1} is outside the "
                                f"vocabulary of {vocab} (ids 0..{vocab - 1}); is data.vocab_size right?")
            write(ids.astype(dtype).tobytes())
            total += len(ids)
        if total == 0:
            raise DataError(f"{key}: no tokens")


def streams(d: HFDiskOptions, *, writing: bool = True) -> tuple[dict[str, Path], dict[str, str], int, bool]:
    """Each split's stream file and the key naming it, the vocabulary, and whether every stream is
    there; a stream not made yet is made where `writing`, else (a plan) only what it is made from
    is checked: the dataset's splits and columns, and that data.cache can take it."""
    dataset_folder(d)
    tokenizer = tokenizer_of(d)
    vocab = vocabulary(d, tokenizer)
    roles = {"train": d.train_split, "val": d.val_split}
    files = {role: stream_file(d, name, vocab, tokenizer) for role, name in roles.items() if name is not None}
    keys = {role: f"data.path={d.path} ({name} split)" for role, name in roles.items()}
    missing = [role for role, f in files.items() if not f.is_file()]
    if missing:
        usable(d.cache, "tokens", keep=writing)
        for role, dataset in load_splits(d).items():
            if role in missing:
                column, text = column_of(d, dataset, tokenizer)
                if writing:
                    write_stream(files[role], token_batches(dataset, column, tokenizer if text else None), vocab,
                                 keys[role])
    return files, keys, vocab, writing or not missing


def opened(d: HFDiskOptions) -> tuple[Stream, Stream, int]:
    """The training and held-out streams and the vocabulary, each stream made first where it is not cached."""
    files, keys, vocab, _ = streams(d)
    return read(d, files, keys, vocab)


def read(d: HFDiskOptions, files: dict[str, Path], keys: dict[str, str], vocab: int) -> tuple[Stream, Stream, int]:
    out = {}
    for role, f in files.items():
        out[role] = Stream(open_tokens(f, ids_dtype(vocab), keys[role]), keys[role])
        check_ids(out[role].ids, vocab, keys[role])
    return *split(out["train"], out.get("val"), d.seq_len, d.eval_size, "data.val_split"), vocab


def ensure_files(d: HFDiskOptions) -> None:
    """Before any job: the dataset and tokenizer are there, and each split's token stream is made."""
    opened(d)


def build(d: HFDiskOptions, device: torch.device, dtype: torch.dtype) -> TokenTask:
    train, val, vocab = opened(d)
    return TokenTask(train, val, vocab, d.seq_len, d.eval_size, device)


def planned(d: HFDiskOptions, device: torch.device, dtype: torch.dtype) -> Task:
    """What a plan sizes and times the jobs with, having written nothing: the task itself where its
    streams are cached, else a stand-in of its shapes (`Unmade`); tokenizing is left to the sweep."""
    files, keys, vocab, made = streams(d, writing=False)
    if made:
        return TokenTask(*read(d, files, keys, vocab), d.seq_len, d.eval_size, device)
    return Unmade(vocab, d.seq_len, d.eval_size, device)


def plan_note(d: HFDiskOptions) -> str | None:
    """Said by a plan whose streams are not made yet (a plan writes nothing)."""
    if streams(d, writing=False)[3]:
        return None
    return (f"note: data.path={d.path}: its token streams are not made yet; a plan writes nothing, so the sweep "
            f"tokenizes it into {cache_folder(d.cache) / 'tokens'} before its first job and checks their length "
            "and ids then (a plan times its jobs on random ids of the same vocabulary)")


class Unmade(Task):
    """A token task's shapes, for a plan: random ids of the vocabulary, (B, T) windows, drawn from
    the caller's generator; nothing is read or written."""

    def __init__(self, vocab: int, seq_len: int, eval_size: int, device: torch.device) -> None:
        self.input_shape, self.output_dim, self.seq_len, self.device = (seq_len,), vocab, seq_len, device
        w = torch.randint(vocab, (eval_size, seq_len + 1), generator=torch.Generator().manual_seed(0))
        self._eval = (w[:, :-1].to(device), w[:, 1:].to(device))

    @torch.no_grad()
    def sample(self, gen: torch.Generator, batch_size: int) -> tuple[Tensor, Tensor]:
        w = torch.randint(self.output_dim, (batch_size, self.seq_len + 1), generator=gen).to(self.device)
        return w[:, :-1], w[:, 1:]

    def eval_set(self) -> tuple[Tensor, Tensor]:
        return self._eval

"""A table of runs read into plain rows: CSV (or TSV), JSON lines (or one JSON array of
objects), Parquet.

Plain parsing only, so nothing in a table runs code: Python's `csv` and `json`, and pyarrow's
Parquet reader (the `parquet` extra), whose rows are read as plain values (no pandas metadata,
no pickled objects). A JSON object nested inside a row is flattened into dotted columns
(`{"config": {"lr": 0.1}}` gives `config.lr`), as deep as a record may be and no deeper. Every
row is named by where it lies in the file (`line 12`, `row 12`), so that a bad one can be named.
The file is read once, as bytes: its sha256 (a study says which table its runs came from) is of
exactly what was parsed.
"""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lrtransfer.errors import UserError, choices, file_kind, one_line
from lrtransfer.store import MAX_NESTING, nesting

FORMATS = ("csv", "tsv", "json", "parquet")
EXTENSIONS = {".csv": "csv", ".tsv": "tsv", ".json": "json", ".jsonl": "json", ".ndjson": "json",
              ".parquet": "parquet", ".pq": "parquet"}


@dataclass
class Row:
    where: str  # `line 12` (CSV, JSON lines), `item 3` (a JSON array), `row 12` (Parquet)
    values: dict[str, Any]  # column -> str, int, float, bool or None (a list where a row held one)
    cells: tuple[int, int] | None = None  # a CSV line of another length than the header: (its cells, the header's)


@dataclass
class Table:
    path: Path
    format: str
    sha256: str
    columns: list[str]  # in the file's order
    rows: list[Row]
    repeated: set[str] = field(default_factory=set)  # columns the header names twice (CSV): not to be used


def table_format(path: Path, fmt: str | None) -> str:
    """The format to read `path` as: `fmt` when given, else its extension's."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise UserError(f"--format {fmt!r} is no table format{choices(FORMATS, fmt)}")
        return fmt
    found = EXTENSIONS.get(path.suffix.lower())
    if found is None:
        raise UserError(f"{path}: cannot tell its format from the extension {path.suffix or '(none)'!r}; give "
                        f"--format (csv, tsv, json, parquet), or name it .csv, .tsv, .jsonl or .parquet")
    return found


def read_table(path: Path, fmt: str | None = None) -> Table:
    """The table at `path`, or one-line `UserError` saying why it cannot be read."""
    fmt = table_format(path, fmt)
    data = _read_bytes(path)
    if fmt in ("csv", "tsv"):
        columns, rows, repeated = _csv(path, data, "\t" if fmt == "tsv" else ",")
    elif fmt == "json":
        columns, rows, repeated = *_json(path, data), set()
    else:
        columns, rows, repeated = *_parquet(path, data), set()
    if not rows:
        raise UserError(f"{path}: the table has no rows (its columns: {', '.join(columns) or 'none'})")
    return Table(path, fmt, hashlib.sha256(data).hexdigest(), columns, rows, repeated)


def _read_bytes(path: Path) -> bytes:
    """The file's bytes; a missing path, a folder, a FIFO or a device is one line, never opened to
    wait on (a FIFO's open would block for a writer)."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; give the table of runs (a .csv, .jsonl or .parquet file)") from None
    except IsADirectoryError:
        raise UserError(f"{path}: a folder, not a table of runs") from None
    except OSError as e:
        raise UserError(f"{path}: cannot read it ({e.strerror or e})") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        if stat.S_ISDIR(mode):
            raise UserError(f"{path}: a folder, not a table of runs")
        raise UserError(f"{path}: not a regular file ({file_kind(mode)}); give the table of runs")
    with os.fdopen(fd, "rb") as f:
        try:
            return f.read()
        except OSError as e:
            raise UserError(f"{path}: cannot read it ({e.strerror or e})") from None


def _text(path: Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")  # a byte-order mark (Excel's CSV) is no part of the first column's name
    except UnicodeDecodeError as e:
        raise UserError(f"{path}: not UTF-8 text (byte {data[e.start:e.start + 1]!r} at position {e.start}); "
                        "save the table as UTF-8") from None


def _csv(path: Path, data: bytes, delimiter: str) -> tuple[list[str], list[Row], set[str]]:
    """A header line, then a row per line; an empty cell is None (no value), every other cell its
    text. A row of another length than the header is kept with its cell count, for `study` to name."""
    reader = csv.reader(io.StringIO(_text(path, data), newline=""), delimiter=delimiter)
    rows: list[Row] = []
    try:
        header = next((r for r in reader if r), None)
        if header is None:
            raise UserError(f"{path}: the file is empty (no header line)")
        repeated = {c for c in header if header.count(c) > 1}
        for cells in reader:
            if not cells:  # a blank line
                continue
            where = f"line {reader.line_num}"
            if len(cells) != len(header):
                rows.append(Row(where, {}, (len(cells), len(header))))
                continue
            rows.append(Row(where, {c: (v if v != "" else None) for c, v in zip(header, cells) if c not in repeated}))
    except csv.Error as e:
        raise UserError(f"{path}: not a readable CSV file (line {reader.line_num}: {e})") from None
    return header, rows, repeated


def _json(path: Path, data: bytes) -> tuple[list[str], list[Row]]:
    """JSON lines (an object per line), or one JSON array of objects (pandas' orient="records")."""
    text = _text(path, data)
    if text.lstrip().startswith("["):
        items = _loads(path, text, "the file")
        if not isinstance(items, list):
            raise UserError(f"{path}: not a JSON array of objects")
        found = [(f"item {i + 1}", item) for i, item in enumerate(items)]
    else:
        found = [(f"line {n}", _loads(path, line, f"line {n}")) for n, line in enumerate(text.splitlines(), 1)
                 if line.strip()]
    return _rows_of(path, found)


def _loads(path: Path, text: str, where: str) -> Any:
    try:
        return json.loads(text)
    except RecursionError:
        raise UserError(f"{path}: {where} is nested deeper than Python can parse; not a table of runs") from None
    except ValueError as e:  # JSONDecodeError, an integer too long to read
        raise UserError(f"{path}: {where} is not JSON ({one_line(e)})") from None


def _parquet(path: Path, data: bytes) -> tuple[list[str], list[Row]]:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise UserError(f"{path}: reading Parquet needs pyarrow: pip install 'lrtransfer[parquet]' "
                        "(or save the table as CSV)") from None
    try:
        table = pq.read_table(pa.BufferReader(data))
        items = table.to_pylist()
    except (pa.ArrowException, OSError, ValueError, TypeError) as e:
        raise UserError(f"{path}: not a readable Parquet file ({one_line(e)})") from None
    return _rows_of(path, [(f"row {i + 1}", item) for i, item in enumerate(items)], table.column_names)


def _rows_of(path: Path, found: list[tuple[str, Any]], columns: list[str] | None = None) -> tuple[list[str], list[Row]]:
    """Objects as rows, nested objects flattened into dotted columns; the columns in first-seen order."""
    rows, seen = [], {}
    for where, item in found:
        if not isinstance(item, dict):
            raise UserError(f"{path}: {where} is a {type(item).__name__}, not an object of column: value")
        if nesting(item) > MAX_NESTING:
            raise UserError(f"{path}: {where} is nested deeper than {MAX_NESTING} levels; not a table of runs")
        values = flat(item)
        rows.append(Row(where, values))
        seen.update(dict.fromkeys(values))
    return list(seen) or list(columns or []), rows


def flat(item: dict, prefix: str = "") -> dict[str, Any]:
    """`{"a": {"b": 1}}` as `{"a.b": 1}` (bounded by `nesting`, checked first); a column named with
    a dot in the file keeps its name."""
    out: dict[str, Any] = {}
    for k, v in item.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict) and v:
            out.update(flat(v, f"{key}."))
        else:
            out.setdefault(key, v)
    return out

"""Writing the runs table: CSV always, Parquet when pyarrow is installed (the `parquet` extra)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pandas as pd

from lrtransfer.errors import UserError

FORMATS = ("csv", "parquet")


def check_format(fmt: str) -> None:
    """Refuse an unknown format, or parquet without pyarrow, before any work."""
    if fmt not in FORMATS:
        raise UserError(f"unknown export format '{fmt}'; valid: {', '.join(FORMATS)}")
    if fmt == "parquet" and importlib.util.find_spec("pyarrow") is None:
        raise UserError("parquet export needs pyarrow: pip install 'lrtransfer[parquet]' (or use --format csv)")


EXTENSIONS = {".csv": "csv", ".parquet": "parquet"}  # the extensions that name a format


def resolve_format(fmt: str | None, out: Path | None) -> str:
    """The format to write to `out`: `fmt` when given, else the one `out`'s extension names (.csv,
    .parquet), else csv. Refuses, before any work, what `check_format` does and a given `fmt` that
    contradicts a known extension (CSV written into x.parquet); another extension takes any format."""
    named = EXTENSIONS.get(Path(out).suffix.lower()) if out is not None else None
    if fmt is None:
        fmt = named or "csv"
    check_format(fmt)
    if named is not None and named != fmt:
        raise UserError(f"--out {out} names the {named} format but the export format is {fmt}; "
                        f"give --format {named}, or an --out ending in .{fmt}")
    return fmt


def write_table(table: pd.DataFrame, path: Path, fmt: str | None = None) -> Path:
    """Write `table` to `path` in `fmt` (None: from `path`'s extension, as `resolve_format`);
    the format's reader in pandas loads it back in one call."""
    fmt = resolve_format(fmt, path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    return path

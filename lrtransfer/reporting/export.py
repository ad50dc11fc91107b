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


def write_table(table: pd.DataFrame, path: Path, fmt: str) -> Path:
    """Write `table` to `path` in `fmt`; the format's reader in pandas loads it back in one call."""
    check_format(fmt)
    path.parent.mkdir(parents=True, exist_ok=True)
    if fmt == "csv":
        table.to_csv(path, index=False)
    else:
        table.to_parquet(path, index=False)
    return path

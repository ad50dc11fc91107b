"""A table's rows as a study's records: a job per scale and group (the rows that share every
scale and group value), a run per row, in the schema a sweep's job writes (`store.record_problem`
accepts each), so that summary, plot, report, predict, export and list read it unchanged.

A run's final loss is the table's loss as given (a sweep's own runs average the last
`train.final_window` of their curve; a table holds whatever its script logged). A loss that is
not finite (NaN, inf) is a run that diverged, as is one the `--diverged` column marks; an
empty cell is no loss at all (a run that crashed or never reported), and the row is skipped.
A table holds no loss curve: the runs have none (`plot` and `report` say so).

A row that cannot be a run (no loss, an LR that is not a positive number, the same run twice)
is skipped and named, as a damaged record is. Each record says where it came from (`source`:
the table's path and sha256, the columns read); its job id hashes its config with that source,
so importing the same table again (`--append`) finds its jobs already there.
"""

from __future__ import annotations

import hashlib
import json
import math
import platform
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from lrtransfer import __version__
from lrtransfer.config.validate import MAX_ABS_LOG2_LR
from lrtransfer.errors import Fault, UserError, shown
from lrtransfer.importing.columns import Columns
from lrtransfer.importing.tables import Row, Table
from lrtransfer.store import (
    IMPORTED,
    INT64,
    RECORD_NAME,
    SCALE_BOUNDS,
    is_complete,
    probe_writable,
    record_problem,
    write_record,
)

TRUE, FALSE = ("true", "1", "yes", "y", "t"), ("false", "0", "no", "n", "f")


@dataclass
class BadRow:
    where: str
    kind: str  # what went wrong, for the count by kind ("no loss", "duplicate run", ...)
    why: str


@dataclass
class Imported:
    records: list[dict]
    bad: list[BadRow] = field(default_factory=list)
    rows: int = 0

    @property
    def runs(self) -> int:
        return sum(len(r["runs"]) for r in self.records)

    def bad_counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for b in self.bad:
            out[b.kind] = out.get(b.kind, 0) + 1
        return out


class Bad(Exception):
    """One row cannot be a run: `kind` (for the count) and why, said with the row's place."""

    def __init__(self, kind: str, why: str) -> None:
        super().__init__(why)
        self.kind = kind


def check_name(name: str) -> None:
    """A study name is one folder inside the results folder (as `name=` of a sweep): never a
    path that would leave it."""
    if not name or "/" in name or "\\" in name or name.startswith(".") or "\0" in name or not name.strip():
        raise UserError(f"--name {name!r} must be a folder name inside the results folder (no '/', not starting "
                        "with '.'), e.g. --name nanogpt-width")


def check_study_folder(folder: Path, append: bool) -> None:
    """A study folder that already holds records is only added to when asked (`--append`): an
    import never replaces or mixes into results already written without being told to."""
    if folder.exists() and not folder.is_dir():
        raise UserError(f"{folder} is a file, not a study folder; choose another --name")
    held = sum(1 for _ in folder.rglob(RECORD_NAME)) if folder.is_dir() else 0
    if held and not append:
        raise UserError(f"{folder} already holds a study ({held} record(s)); --append adds this table's runs to it, "
                        "or choose another --name (nothing there is replaced)")


def records(table: Table, columns: Columns, name: str) -> Imported:
    """The table's rows as records (a job per scale and group values), and the rows skipped."""
    jobs, bad = _jobs(table, columns)
    source = {"kind": IMPORTED, "table": str(table.path.resolve()), "sha256": table.sha256, "format": table.format,
              "columns": columns.record(), "rows": len(table.rows), "skipped": len(bad)}
    created = datetime.now(timezone.utc).isoformat(timespec="microseconds")
    out = Imported([], bad, len(table.rows))
    for config, runs in jobs.values():
        record = {
            "job_id": job_id(config, source),
            "config": {"name": name, **config},
            "status": "complete",
            "source": source,
            "created": created,
            "versions": {"lrtransfer": __version__, "python": platform.python_version()},
            "runs": sorted(runs, key=lambda r: (r["seed"], r["log2_lr"])),
        }
        problem = record_problem(record)
        if problem:  # every value was checked row by row: a record refused here is this module's fault
            raise AssertionError(f"an imported record the analysis would refuse: {problem}")
        out.records.append(record)
    out.records.sort(key=lambda r: r["job_id"])
    return out


def _jobs(table: Table, columns: Columns) -> tuple[dict[str, tuple[dict, list[dict]]], list[BadRow]]:
    """The good rows by job ({its config as JSON: (config, runs)}), and the bad ones."""
    jobs: dict[str, tuple[dict, list[dict]]] = {}
    seen: dict[tuple, str] = {}  # a run's identity (job, seed, log2 LR) -> the row that gave it
    bad = []
    for row in table.rows:
        try:
            config, run = _run(row, columns)
            job = json.dumps(config, sort_keys=True)
            key = (job, run["seed"], run["log2_lr"])
            if key in seen:
                hint = "" if columns.seed else "; give --seed COL where the table's runs differ by seed"
                raise Bad("duplicate run", f"the same run as {seen[key]} (seed {run['seed']} at lr {run['lr']:g}, "
                                           f"{_config_words(config)}){hint}")
        except Bad as e:
            bad.append(BadRow(row.where, e.kind, str(e)))
            continue
        seen[key] = row.where
        jobs.setdefault(job, (config, []))[1].append(run)
    return jobs, bad


def job_id(config: dict, source: dict) -> str:
    """A job's id: its config (less the study name, as a sweep's) with the table's content and the
    columns read. The same table imported again gives the same ids; another table, or another
    column for the loss, other ones, whose runs the analysis reads beside these."""
    text = json.dumps({"config": config, "sha256": source["sha256"], "columns": source["columns"]}, sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _run(row: Row, columns: Columns) -> tuple[dict, dict]:
    """A row as (its job's config, its run), or `Bad`."""
    v = row.values
    if row.cells is not None:
        raise Bad("wrong number of cells", f"{row.cells[0]} cells where the header has {row.cells[1]}")
    flat: dict[str, Any] = {}
    for key, column in columns.scales.items():
        flat[key] = _scale(key, column, v.get(column))
    for key, column in columns.groups.items():
        flat[key] = _group_value(column, v.get(column))
    lr = _number(v.get(columns.lr))
    if lr is None or not (math.isfinite(lr) and lr > 0):
        log = " (--lr takes the LR itself, not its log)" if lr is not None and lr < 0 else ""
        raise Bad("bad learning rate", f"{columns.lr}={shown(v.get(columns.lr))} is not a positive number{log}")
    log2_lr = round(math.log2(lr), 10)  # as a sweep's job writes it
    if abs(log2_lr) > MAX_ABS_LOG2_LR:
        raise Bad("bad learning rate", f"{columns.lr}={shown(v.get(columns.lr))} is outside 2^-{MAX_ABS_LOG2_LR} .. "
                                       f"2^{MAX_ABS_LOG2_LR}")
    seed = 0 if columns.seed is None else _seed(columns.seed, v.get(columns.seed))
    marked = False if columns.diverged is None else _flag(columns.diverged, v.get(columns.diverged))
    loss = _number(v.get(columns.loss))
    if loss is None and not (marked and v.get(columns.loss) is None):
        if v.get(columns.loss) is None:
            raise Bad("no loss", f"{columns.loss} is empty (no loss: a run that never reported one; a diverged "
                                 "run's is NaN or inf)")
        raise Bad("bad loss", f"{columns.loss}={shown(v.get(columns.loss))} is not a number")
    diverged = marked or loss is None or not math.isfinite(loss)
    eval_loss = None
    if columns.eval_loss is not None:
        eval_loss = _number(v.get(columns.eval_loss))
        if eval_loss is None and v.get(columns.eval_loss) is not None:
            raise Bad("bad eval loss", f"{columns.eval_loss}={shown(v.get(columns.eval_loss))} is not a number")
    run = {
        "log2_lr": log2_lr,
        "lr": lr,
        "seed": seed,
        "initial_loss": None,
        "final_loss": None if diverged else loss,
        "diverged": diverged,
        "diverged_step": None,
        "eval_loss": None if diverged else eval_loss,
        "eval_acc": None,
        "history_step": [],
        "history_loss": [],
        "row": row.where,
    }
    return _nested(flat), run


def _number(value: Any) -> float | None:
    """A cell as a float: a number, or text that reads as one (`3e-4`, `nan`, `inf`); None where
    it is neither (or empty)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value) if not isinstance(value, int) or INT64[0] <= value <= INT64[1] else None
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            return None
    return None


def _scale(key: str, column: str, value: Any) -> int | float:
    """A scale value: a positive finite number (within a record's bounds for width and depth), an
    integer where it is whole (a width of 64, not 64.0)."""
    x = _number(value)
    bound, said = SCALE_BOUNDS.get(key, (INT64[1], "2^63 - 1"))
    if x is None or not (math.isfinite(x) and 0 < x <= bound):
        raise Bad(f"bad {key}", f"{column}={shown(value)} is not a positive number up to {said} (--scale {key})")
    return int(x) if x.is_integer() else x


def _seed(column: str, value: Any) -> int:
    x = _number(value)
    if x is None or not (math.isfinite(x) and x.is_integer() and INT64[0] <= x <= INT64[1]):
        raise Bad("bad seed", f"{column}={shown(value)} is not a whole number")
    return int(x)


def _flag(column: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, (int, float)) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in (*TRUE, *FALSE):
        return value.strip().lower() in TRUE
    raise Bad("bad diverged flag", f"{column}={shown(value)} is not true or false")


def _group_value(column: str, value: Any) -> str | None:
    """A value that tells groups apart, as text: a name, never a scale (a numeric column that is
    one goes under --scale, so the analysis can read along it). A number is written one way
    whatever the format (CSV's `4.0`, JSON's `4` and Parquet's 4.0 are all `4`), a bool as pandas
    writes it (`True`); an empty cell or NaN is no value (None)."""
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, (int, float, str)):
        x = _number(value)
        if x is not None and math.isnan(x):
            return None
        if x is not None and math.isfinite(x):
            return str(int(x)) if x.is_integer() and abs(x) < 2**63 else repr(x)
        if isinstance(value, int):  # beyond 64 bits: no number a record may hold
            raise Bad("bad group value", f"{column}={shown(value)} is beyond a 64-bit integer")
        return value if isinstance(value, str) else repr(value)
    if value is None:
        return None
    raise Bad("bad group value", f"{column}={shown(value)} is a {type(value).__name__}, not a plain value")


def _nested(flat: dict[str, Any]) -> dict:
    """`{"param.name": "mup"}` as `{"param": {"name": "mup"}}`: a record's config is nested, and
    the analysis flattens it back to the same dotted names."""
    out: dict = {}
    for key, value in flat.items():
        *parents, leaf = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[leaf] = value
    return out


def _config_words(config: dict) -> str:
    def walk(node, prefix=""):
        for k, v in node.items():
            yield from walk(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}={v}"]

    return " ".join(walk(config))


def write(imported: Imported, folder: Path) -> tuple[int, int]:
    """Each record into its job's folder; a job already there complete (the same table imported
    before) is left as it is. Returns (written, already there). A write that fails (a full disk)
    stops with a `Fault` saying what was written: the same command with --append finishes."""
    try:
        probe_writable(folder)
    except OSError as e:
        raise UserError(f"{folder}: cannot write there ({e.strerror or e}); choose a writable --results-dir") from None
    written = there = 0
    for record in imported.records:
        job = folder / record["job_id"]
        if is_complete(job):
            there += 1
            continue
        try:
            write_record(job, record)
        except OSError as e:
            raise Fault(f"could not write {job / RECORD_NAME} ({e.strerror or e}): {written} of "
                        f"{len(imported.records)} record(s) written; free some space and run the same command with "
                        "--append to write the rest") from None
        written += 1
    return written, there

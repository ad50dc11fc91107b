"""Where a command run's losses come from, read as the script writes them, with no change to it.

- its standard output: each line searched with `trainer.loss_pattern`, whose named groups
  are `loss` (the training loss), `step` (else the count of losses so far) and
  `eval_loss` (a held-out loss; the last one reported is the run's);
- a metrics file in its run folder (`trainer.metrics_file`): CSV with a header line, or
  JSON lines (one object a line), its columns named by `trainer.loss_column`,
  `trainer.step_column` (else `step` where there is one, else the row number) and
  `trainer.eval_column`; read as it grows, so progress and divergence show while it runs;
- TensorBoard event files (a folder, or one file), their scalar tags named by the same
  keys; read when the run ends, with the `tensorboard` package (the `tensorboard` extra).

Each reader collects a `Curve`: (step, loss) points in the order reported. A reader that
cannot read what it was told to (no file, no such column) raises `ReadError`, whose
message becomes the run's reason for failing.
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from lrtransfer.errors import ConfigError

STEP, LOSS, EVAL = "step", "loss", "eval_loss"
GROUPS = (STEP, LOSS, EVAL)
FORMATS = ("auto", "csv", "jsonl", "tensorboard")
JSON_SUFFIXES = (".jsonl", ".json", ".ndjson")


class ReadError(Exception):
    """A run's losses cannot be read as configured; the message says why (one line)."""


@dataclass
class Curve:
    points: list[tuple[int, float]] = field(default_factory=list)  # (step, loss), as reported
    eval_loss: float | None = None

    @property
    def last_step(self) -> int | None:
        return self.points[-1][0] if self.points else None


def number(text) -> float | None:
    """A loss as the script wrote it (`2.31`, `nan`, `inf`, `1e-3`), or None where it is no number."""
    if isinstance(text, bool):
        return None
    if isinstance(text, (int, float)):
        return float(text)
    try:
        return float(str(text).strip())
    except ValueError:
        return None


def compile_pattern(text: str, key: str, required: tuple[str, ...] = (LOSS,)) -> re.Pattern:
    """`text` compiled, or one ConfigError line: it must compile, name the groups `required`, and
    name no group but step, loss and eval_loss."""
    try:
        pattern = re.compile(text)
    except re.error as e:
        raise ConfigError(f"{key}={text!r} does not compile as a regular expression ({e})") from None
    named = set(pattern.groupindex)
    missing = [g for g in required if g not in named]
    if missing:
        raise ConfigError(f"{key}={text!r} has no named group '{missing[0]}': write (?P<{missing[0]}>...) around "
                          f"the number, e.g. 'step (?P<step>\\d+) loss (?P<loss>\\S+)'")
    odd = sorted(named - set(GROUPS))
    if odd:
        raise ConfigError(f"{key}={text!r} names a group '{odd[0]}'; valid names: {', '.join(GROUPS)}")
    return pattern


class Lines:
    """Losses from lines of standard output, matched by a pattern (`trainer.loss_pattern`)."""

    def __init__(self, pattern: re.Pattern) -> None:
        self.pattern, self.curve = pattern, Curve()

    def line(self, text: str) -> bool:
        """Read one line; True when it gave a training loss."""
        m = self.pattern.search(text)
        if m is None:
            return False
        found = m.groupdict()
        if found.get(EVAL) is not None and number(found[EVAL]) is not None:
            self.curve.eval_loss = number(found[EVAL])
        loss = number(found.get(LOSS)) if found.get(LOSS) is not None else None
        if loss is None:
            return False
        step = found.get(STEP)
        step = int(step) if step is not None and step.isdigit() else len(self.curve.points)
        self.curve.points.append((step, loss))
        return True


def table_format(path: str, configured: str) -> str:
    if configured != "auto":
        return configured
    if path.lower().endswith(JSON_SUFFIXES):
        return "jsonl"
    if path.lower().endswith(".csv"):
        return "csv"
    return "tensorboard"  # a folder of event files, or one events.out.tfevents.* file


class Table:
    """Losses from a CSV or JSON-lines file as it grows: only complete lines are read, and a file
    that shrinks or is replaced is read again from its start."""

    def __init__(self, path: Path, fmt: str, loss: str, step: str | None, eval_: str | None) -> None:
        self.path, self.fmt, self.loss, self.step, self.eval = path, fmt, loss, step, eval_
        self._reset()

    def _reset(self) -> None:
        self.curve, self.offset, self.inode, self.header, self.rows = Curve(), 0, None, None, 0

    def poll(self, final: bool = False) -> None:
        """Read what was appended since the last poll; `final`: also a last line with no newline."""
        try:
            st = self.path.stat()
        except OSError:
            if final:
                raise ReadError(f"{self.path.name} was not written in the run folder ({self.path})") from None
            return
        if st.st_ino != self.inode or st.st_size < self.offset:
            self._reset()
            self.inode = st.st_ino
        with open(self.path, "rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = len(data) if final else data.rfind(b"\n") + 1
        self.offset += end
        for raw in data[:end].decode("utf-8", errors="replace").splitlines():
            if raw.strip():
                self._row(raw)
        if final and self.header is None and self.fmt == "csv":
            raise ReadError(f"{self.path.name} is empty (no header line)")

    def _row(self, raw: str) -> None:
        if self.fmt == "csv":
            cells = next(csv.reader(io.StringIO(raw)))
            if self.header is None:
                self.header = cells
                self._check_columns(cells)
                return
            row = dict(zip(self.header, cells))
        else:
            try:
                row = json.loads(raw)
            except ValueError:
                raise ReadError(f"{self.path.name}: line {self.rows + 1} is not JSON") from None
            if not isinstance(row, dict):
                raise ReadError(f"{self.path.name}: line {self.rows + 1} is not a JSON object")
        self.rows += 1
        if self.eval and number(row.get(self.eval)) is not None:
            self.curve.eval_loss = number(row[self.eval])
        loss = number(row.get(self.loss)) if row.get(self.loss) not in (None, "") else None
        if loss is None:
            return
        step_key = self.step or (STEP if STEP in row else None)
        if self.step and self.step not in row:
            raise ReadError(f"{self.path.name} has no column '{self.step}' (trainer.step_column); its columns: "
                            f"{', '.join(map(str, row))}")
        step = number(row.get(step_key)) if step_key else None
        self.curve.points.append((int(step) if step is not None and math.isfinite(step) else len(self.curve.points), loss))

    def _check_columns(self, header: list[str]) -> None:
        for key, column in (("loss_column", self.loss), ("step_column", self.step), ("eval_column", self.eval)):
            if column and column not in header:
                raise ReadError(f"{self.path.name} has no column '{column}' (trainer.{key}); its columns: "
                                f"{', '.join(header)}")

    def finish(self) -> Curve:
        self.poll(final=True)
        if self.fmt == "jsonl" and self.rows and not self.curve.points:
            raise ReadError(f"{self.path.name}: no line has a number under '{self.loss}' (trainer.loss_column)")
        return self.curve


class Events:
    """Losses from TensorBoard event files (scalars, or the tensors TF2-style summaries write),
    read once the run has ended."""

    def __init__(self, path: Path, loss: str, eval_: str | None) -> None:
        self.path, self.loss, self.eval = path, loss, eval_

    def poll(self, final: bool = False) -> None:
        pass

    def finish(self) -> Curve:
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        if not self.path.exists():
            raise ReadError(f"no TensorBoard events at {self.path}")
        acc = EventAccumulator(str(self.path), size_guidance={"scalars": 0, "tensors": 0})
        acc.Reload()
        curve = Curve(points=[(s, v) for s, v in self._series(acc, self.loss)])
        if not curve.points:
            tags = sorted({*acc.Tags().get("scalars", []), *acc.Tags().get("tensors", [])})
            raise ReadError(f"the TensorBoard events at {self.path} have no tag '{self.loss}' (trainer.loss_column); "
                            f"tags: {', '.join(tags) or 'none'}")
        if self.eval:
            series = self._series(acc, self.eval)
            curve.eval_loss = series[-1][1] if series else None
        return curve

    @staticmethod
    def _series(acc, tag: str) -> list[tuple[int, float]]:
        tags = acc.Tags()
        if tag in tags.get("scalars", []):
            return [(e.step, float(e.value)) for e in acc.Scalars(tag)]
        if tag in tags.get("tensors", []):
            from tensorboard.util import tensor_util

            return [(e.step, float(tensor_util.make_ndarray(e.tensor_proto))) for e in acc.Tensors(tag)]
        return []


def metrics_reader(path: Path, fmt: str, loss: str, step: str | None, eval_: str | None):
    kind = table_format(str(path), fmt)
    if kind == "tensorboard":
        return Events(path, loss, eval_)
    return Table(path, kind, loss, step, eval_)


def last_line(path: Path, limit: int = 65536) -> str:
    """The last line of a file that is not blank, from its last `limit` bytes ('' when none)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, os.path.getsize(path) - limit))
            tail = f.read().decode("utf-8", errors="replace")
    except OSError:
        return ""
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    return lines[-1] if lines else ""

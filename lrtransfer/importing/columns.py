"""Which column of a table is what: the scales, the LR, the loss, the seed, and the columns that
tell groups apart, as named on the command line, checked against the table's own columns.

A scale or group column becomes a config key of each imported job: `--scale width=n_embd` puts
the column `n_embd` under the key `width` (the axis every figure and `predict --width` know);
`--scale n_embd` keeps the column's own name as the key (an axis called `n_embd`). A key is a
dotted name (`param.name`: a parameterization column read as lrtransfer's own, so SP is the
baseline every figure puts first), and none of lrtransfer's own (`lr`, `seed`, `name`, ...).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from lrtransfer.errors import UserError, choices
from lrtransfer.importing.tables import Table

KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*")
# Keys a record's config or its runs table already uses: a column under one of these would be
# read as lrtransfer's own (a seed, the LR grid, a run setting), or overwrite a run's number.
RESERVED = ("name", "results_dir", "seed", "n_seeds", "job_id", "study", "lr", "log2_lr", "hydra", "engine", "tracker",
            "adaptive", "grid", "grid_key", "grid_value", "source", "run_seed", "initial_loss", "train_loss",
            "eval_loss", "eval_acc", "diverged", "diverged_step", "history_step", "history_loss")
MAX_LISTED = 40  # columns listed in a message (a W&B export has hundreds)


@dataclass
class Columns:
    scales: dict[str, str]  # config key -> column, in the order given
    groups: dict[str, str]
    lr: str
    loss: str
    seed: str | None = None  # None: every run is seed 0
    eval_loss: str | None = None
    diverged: str | None = None  # a true/false column; else a run diverged where its loss is not finite

    def named(self) -> dict[str, str]:
        """Each option as typed (`--scale width`, `--lr`) -> its column."""
        out = {f"--scale {k}": c for k, c in self.scales.items()}
        out.update({f"--group {k}": c for k, c in self.groups.items()})
        out.update({f"--{flag.replace('_', '-')}": c for flag in ("lr", "loss", "seed", "eval_loss", "diverged")
                    if (c := getattr(self, flag)) is not None})
        return out

    def record(self) -> dict[str, str]:
        """What a record keeps of the mapping: each key or role -> its column."""
        return {**self.scales, **self.groups, **{role: c for role in ("lr", "loss", "seed", "eval_loss", "diverged")
                                                 if (c := getattr(self, role)) is not None}}


def parse(scales: list[str], groups: list[str], **roles: str | None) -> Columns:
    """The options as typed, checked for their own sense (before the table is read)."""
    if not scales:
        raise UserError("give the scale column: --scale width=COL (or depth=COL, or any KEY=COL; --scale COL keys it "
                        "by the column's own name)")
    for flag in ("lr", "loss"):
        if not roles.get(flag):
            raise UserError(f"give the {'learning rate' if flag == 'lr' else 'loss'} column: --{flag} COL")
    found = Columns(_keyed("--scale", scales), _keyed("--group", groups), **roles)
    keys = [*found.scales, *found.groups]
    for k in keys:
        clash = next((o for o in keys if o != k and o.startswith(k + ".")), None)
        if clash:
            raise UserError(f"keys {k} and {clash} cannot both be set: {k} would be a value and a section of keys")
    used: dict[str, str] = {}
    for option, column in found.named().items():
        if column in used:
            raise UserError(f"column {column!r} is named twice ({used[column]} and {option}); each column is one thing")
        used[column] = option
    return found


def _keyed(flag: str, given: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for text in given:
        key, sep, column = text.partition("=")
        if not sep:
            column = text
        if not column:
            raise UserError(f"{flag} {text!r}: no column after '='; give {flag} KEY=COL")
        if not KEY.fullmatch(key):
            what = "the column's name" if not sep else "the key"
            raise UserError(f"{flag} {text!r}: {what} {key!r} is no config key (letters, digits, _ and dots); give "
                            f"{flag} KEY=COL, e.g. {flag} {'width' if flag == '--scale' else 'param.name'}={column}")
        root = key.split(".")[0]
        if key in RESERVED or root in RESERVED:
            raise UserError(f"{flag} {text!r}: {root} is lrtransfer's own key (a run's LR, seed or loss, the study's "
                            f"name, a run setting); give {flag} KEY={column} with another key")
        if key in out:
            raise UserError(f"{flag} {key} is given twice ({out[key]!r} and {column!r})")
        out[key] = column
    return out


def check(found: Columns, table: Table) -> None:
    """Every named column is in the table, once: else one line naming it and the table's columns."""
    for option, column in found.named().items():
        if column in table.repeated:
            raise UserError(f"{option} {column}: {table.path} names the column {column!r} twice in its header; "
                            "rename one")
        if column not in table.columns:
            raise UserError(f"{option} {column}: no such column in {table.path}{column_choices(table.columns, column)}")


def column_choices(columns: list[str], bad: str) -> str:
    """`(did you mean 'x'?); valid: ...`, with at most `MAX_LISTED` columns listed."""
    said = choices(columns, bad)
    if len(columns) <= MAX_LISTED:
        return said
    hint = said[: said.index("; valid: ")]
    listed = sorted(columns)[:MAX_LISTED]
    return f"{hint}; valid: {', '.join(listed)}, ... ({len(columns) - MAX_LISTED} more)"

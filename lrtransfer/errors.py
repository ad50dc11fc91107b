"""What the user is told when something is wrong: one-line errors and warnings.

The floor of the package: every stage raises `UserError` (or a subclass) for what a
user can fix, with one line naming the bad value and, through `choices`, the valid
ones; `warn` says what went wrong but did not stop anything. Hydra's and OmegaConf's
own exceptions are turned into such lines where a sweep is composed
(`sweeps/messages.py`). Imports nothing of lrtransfer, and rich only when it warns.
"""

from __future__ import annotations

import difflib
import logging
import math
from collections.abc import Iterator
from contextlib import contextmanager

log = logging.getLogger("lrtransfer")
# Our lines go where the application points the root logger (a sweep: each job's job.log), never
# to logging's last-resort handler, which would print each warning a second time on the console.
log.addHandler(logging.NullHandler())


class UserError(Exception):
    """A problem with the user's input; the message is one line."""


class ConfigError(UserError, ValueError):
    """A configuration value is invalid; the message is one line meant for the user."""


class Fault(UserError):
    """Something outside the input stopped a command part way (a full disk): one line saying what
    was kept and how to go on, and exit code 1, since the input was fine."""

    exit_code = 1


# The names other tools give the learning rate: here the LRs are the sweep's grid, never one key.
_LR_NAMES = {"lr", "lrs", "learning_rate", "learning_rates"}
_LR_KEYS = {"log2_min", "log2_max", "log2_step", "resolution"}


def lr_hint(key: str, value: str | None = None) -> str:
    """A pointer to the LR grid, for a key that reads as a learning rate set the way another tool sets
    it (`optim.lr=0.1`, `lr=0.01`, `lr.values=[...]`, `hp.hidden.lr=2`); "" for any other key. Setting
    an LR is what a user of this tool tries first, and the grid's keys are not where they look for it.
    The sections that hold a sweep's inner axes (`grid`, `search`, `points`) name their own LR keys."""
    parts = str(key).split(".")
    if parts[-1] in _LR_NAMES and len(parts) >= 3 and parts[-3] == "hp":  # a role's LR is relative to the grid's
        return f"; the role's LR is the grid's LR times {'.'.join(parts[:-1])}.lr_mult"
    named = parts[-1] in _LR_NAMES or (parts[0] == "lr" and len(parts) > 1 and parts[-1] not in _LR_KEYS)
    if not named or parts[0] in ("grid", "search", "points"):
        return ""
    try:
        one = float(value)
    except (TypeError, ValueError):
        one = None
    if one is None or not 0 < one < math.inf:
        example = f"both its log2: {math.log2(0.01):.4g} for 0.01"
    else:
        example = f"{one:g}: lr.log2_min={math.log2(one):.4g} lr.log2_max={math.log2(one):.4g}"
    return f"; the LRs are the sweep's grid: 2^lr.log2_min .. 2^lr.log2_max, lr.log2_step octaves apart (one LR, {example})"


def file_kind(mode: int) -> str:
    """What a path that is no regular file is, from its `st_mode`: reading a FIFO waits for a writer,
    a device never ends, so such a path is named and refused, never opened."""
    import stat

    kinds = [(stat.S_ISFIFO, "a FIFO"), (stat.S_ISDIR, "a folder"), (stat.S_ISSOCK, "a socket"),
             (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")]
    return next((name for test, name in kinds if test(mode)), "a special file")


def shown(value: object, limit: int = 40, *, names_plain: bool = False) -> str:
    """A value read from a user's file, fit for one line of a message: its repr (newlines and
    terminal codes escaped), cut at `limit`; an integer too long for str() by its size;
    `names_plain`: a str that is a name (a dict key such as stoi) without quotes."""
    if isinstance(value, int) and value.bit_length() > 1000:  # str() refuses past 4,300 digits
        return f"<an integer of {value.bit_length()} bits>"
    text = value if names_plain and isinstance(value, str) and value.isidentifier() else repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def one_line(e: BaseException) -> str:
    """An exception that came from a user's code or a library, as `Type: message` on one line."""
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def choices(valid, bad: str | None = None) -> str:
    """`; valid: a, b, c`, with a `did you mean` hint for a near miss of `bad`."""
    valid = sorted(str(v) for v in valid)
    hint = ""
    if bad is not None:
        close = difflib.get_close_matches(str(bad), valid, n=1)
        if close:
            hint = f" (did you mean '{close[0]}'?)"
    return f"{hint}; valid: {', '.join(valid)}"


def console():
    """The one rich console everything prints through (standard error), so that a warning shows
    above the sweep's progress bars, which draw on it too."""
    global _console
    if _console is None:
        from rich.console import Console

        _console = Console(stderr=True)
    return _console


_console = None


_said: set[str] = set()  # what `warn` said since the job (or the command) began: `new_scope`
_shown: set[str] = set()  # what a `study` warning showed on screen since the command (or the sweep) began
_collecting: list[list[str]] = []  # `collected`'s lists, innermost last


def warn(message: str, study: bool = False) -> None:
    """A warning for the person at the screen (above the bars when a display is up) and in the job's log,
    once a job: a model built for each ensemble of a job would otherwise say the same thing each time.
    `study`: a fact of the whole study (the model's own loss, the same in every job), logged in each
    job's log but shown on screen once a process (once a sweep under the in-process launcher)."""
    if _collecting:
        _collecting[-1].append(message)
        return
    if message in _said:
        return
    _said.add(message)
    log.warning(message)
    if study and message in _shown:
        return
    _shown.add(message)
    console().print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)


def new_scope(command: bool = False) -> None:
    """A job (or, `command`, a command or a sweep) begins: what was said before in this process, it says
    again, once; a `study` warning again on screen only in a new command."""
    _said.clear()
    if command:
        _shown.clear()


@contextmanager
def collected() -> Iterator[list[str]]:
    """Within it, warnings are gathered into the list it gives instead of said (`inspect` makes them notes)."""
    _collecting.append([])
    try:
        yield _collecting[-1]
    finally:
        _collecting.pop()

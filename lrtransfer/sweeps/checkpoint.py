"""A job's training state in `<job folder>/checkpoint.pt`: saved atomically, loaded safely.

A results folder may be shared (docs/scale.md, SLURM), so a
checkpoint is untrusted input: it is loaded with `weights_only=True`, which
unpickles tensors and plain containers only and never runs code. Whatever cannot
be restored (truncated, foreign, another layout) is reported on screen, removed,
and the job starts afresh; a checkpoint is a saving of time, never a reason for a
job to fail. A save that fails (a full disk) is reported the same way and
training goes on without it.

Each checkpoint says what made it (`origin`): whether a `--rerun`, the complete record that
training is to replace, and the versions it ran under. An ordinary run resumes any checkpoint
of its runs; a `--rerun`, which recomputes a job, resumes only the one an interrupted
`--rerun` of the same record saved under the same versions (`FileCheckpoint.only_own`).
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from lrtransfer.errors import warn

log = logging.getLogger(__name__)

NAME = "checkpoint.pt"


class FileCheckpoint:
    """The engine's `Checkpointer` (see `engine.train`) for one job folder."""

    def __init__(self, path: Path, interval_s: float, origin: dict | None = None, only_own: bool = False) -> None:
        self.path, self.interval_s = Path(path), interval_s
        self.last = time.monotonic()
        self.failures = 0
        # what this training is (saved with each state), and whether it resumes only a state of its own origin
        self.origin, self.only_own = origin, only_own

    @property
    def enabled(self) -> bool:
        return self.interval_s > 0

    def load(self) -> dict | None:
        import torch

        if not self.path.exists():
            return None
        try:
            state = torch.load(self.path, map_location="cpu", weights_only=True)
        except Exception as e:  # truncated, foreign, or holding objects other than tensors and containers
            self.reject(f"unreadable ({e.__class__.__name__}: {_first_line(e)})")
            return None
        if not isinstance(state, dict):
            self.reject(f"not a training state (a {type(state).__name__})")
            return None
        why = set_aside(state, self.origin if self.only_own else None)
        if why:
            self.reject(why)
            return None
        log.info("resuming from %s", self.path)
        return state

    def reject(self, why: str) -> None:
        """Say on screen (and in job.log) why the checkpoint is not used, and remove it."""
        warn(f"ignoring checkpoint {self.path}: {why}; the job starts afresh")
        self.discard()

    def due(self) -> bool:
        return self.enabled and time.monotonic() - self.last >= self.interval_s

    def save(self, state: dict) -> None:
        import torch

        if not self.enabled:
            return
        tmp = self.path.with_name(f".{self.path.name}.{os.getpid()}.tmp")
        if self.origin is not None:
            state = {**state, "origin": self.origin}
        try:
            torch.save(state, tmp)
            os.replace(tmp, self.path)
        except (OSError, RuntimeError) as e:  # torch reports a failed write as RuntimeError
            tmp.unlink(missing_ok=True)
            message = f"could not save checkpoint {self.path} ({_first_line(e)}); training goes on without it"
            if self.failures == 0:  # on screen once; every time in job.log
                warn(message)
            else:
                log.warning(message)
            self.failures += 1
        self.last = time.monotonic()

    def discard(self) -> None:
        self.path.unlink(missing_ok=True)


def steps_done(path: Path, runs: list, steps: int, only: dict | None = None) -> int | None:
    """Run-steps the checkpoint at `path` has behind it for a job of these `runs`, each `steps`
    long (what a re-run does not train again); None when it is unreadable, holds other runs or,
    given `only` (a --rerun's origin), was saved by another origin, so that the job would start
    afresh. Loaded as safely as to resume, and never removed."""
    import torch

    from lrtransfer.training import engine
    from lrtransfer.training.runs import run_key

    try:
        state = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
        if set_aside(state, only):  # as `FileCheckpoint.load` would
            return None
        saved = [tuple(key) for chunk in state["chunks"] for key in chunk]
        if saved != [run_key(r) for r in runs]:
            return None
        return engine.steps_done(state, steps)
    except Exception:  # truncated, foreign, another layout: the job starts afresh
        return None


def set_aside(state: dict, only: dict | None) -> str | None:
    """Why a loaded state is not resumed, None where it may be: the one rule of a job's resume and
    of `--plan`'s count. only: a --rerun's origin, which resumes only a state of that origin."""
    forged = next((key for key in ("origin", "chunks") if not _plain(state.get(key))), None)
    if forged:  # compared as plain values: a tensor there raised where compared, failing every re-run
        return f"damaged ({forged} is not a few numbers and strings in shallow containers)"
    if only is not None and state.get("origin") != only:
        return f"{_other_origin(state.get('origin'), only)}, and --rerun recomputes the job"
    return None


def _other_origin(saved, mine: dict) -> str:
    """How a saved state's origin differs from this training's (a --rerun's, `FileCheckpoint.origin`)."""
    if not isinstance(saved, dict) or saved.get("rerun") is not True:
        return "saved by a run without --rerun"
    if saved.get("replaces") != mine.get("replaces"):
        return "saved by a --rerun of another record than the one there now"
    theirs = saved.get("versions") if isinstance(saved.get("versions"), dict) else {}
    differ = [f"{k} {theirs.get(k)}" for k, v in mine.get("versions", {}).items() if theirs.get(k) != v]
    return f"saved under other versions ({', '.join(differ) or 'unknown'})"


def _plain(value, depth: int = 8, most: int = 10**6) -> bool:
    """Whether `value` is None, a number, a string, or lists, tuples and dicts of such values nested
    at most `depth` deep, `most` values in all: walked without recursion, as a forged file may nest
    them past Python's stack, hold a list that holds itself, or one list many times over (a few
    bytes that compare or print for ever)."""
    todo = [(value, 0)]
    while todo and most > 0:
        (v, d), most = todo.pop(), most - 1
        if isinstance(v, (list, tuple, dict)):
            if d == depth:
                return False
            todo += [(x, d + 1) for x in ([*v, *v.values()] if isinstance(v, dict) else v)]
        elif not (v is None or isinstance(v, (bool, int, float, str))):
            return False
    return not todo


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), e.__class__.__name__)

"""Progress of a sweep in run-steps (one LR run, one training step), under every launcher.

Each job writes how many of its run-steps are done to `<job folder>/.progress`
(at most once a second, atomically), wherever it runs: in this process, a joblib
or submitit worker, a Ray actor, a SLURM node sharing the results folder. The
sweep's display polls those files and the jobs' records, so its bar counts work,
not jobs, and its ETA follows the work left. A job in this process (Hydra's basic
launcher) also shows its own bar. Nothing else reads the files: with engine.progress=false
no job writes one (`job.py`).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from lrtransfer.errors import console

PROGRESS_NAME = ".progress"
RECORD_NAME = "record.json"  # lrtransfer.store.RECORD_NAME: a finished job's work is all done
WRITE_EVERY_S = 1.0
POLL_EVERY_S = 0.5

_display: Progress | None = None

log = logging.getLogger(__name__)


def _columns(unit: str) -> list:
    return [TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TextColumn(unit),
            TimeElapsedColumn(), TextColumn("left"), TimeRemainingColumn()]


def done_in(folder: Path, total: int) -> int:
    """Run-steps done by the job in FOLDER, as far as its files tell."""
    if (folder / RECORD_NAME).exists():
        return total
    try:
        return min(total, int((folder / PROGRESS_NAME).read_text() or 0))
    except (OSError, ValueError):
        return 0


@contextmanager
def sweep_display(work: dict[Path, int], enabled: bool = True) -> Iterator[Progress | None]:
    """A bar over the run-steps of the jobs in WORK (job folder -> its run-steps), polled from their folders."""
    global _display
    total = sum(work.values())
    if not enabled or total == 0:
        yield None
        return
    progress = Progress(*_columns("run-steps (runs x steps)"), console=console(), transient=False)
    stop = threading.Event()
    with progress:
        task = progress.add_task(f"sweep ({len(work)} job{'' if len(work) == 1 else 's'})", total=total)

        def update() -> None:
            progress.update(task, completed=sum(done_in(f, n) for f, n in work.items()))

        def poll() -> None:
            while not stop.wait(POLL_EVERY_S):
                update()

        poller = threading.Thread(target=poll, daemon=True, name="lrtransfer-progress")
        _display = progress
        poller.start()
        try:
            yield progress
        finally:
            stop.set()
            poller.join()
            update()
            _display = None
            for folder in work:  # a finished job's record says it all
                if (folder / RECORD_NAME).exists():
                    (folder / PROGRESS_NAME).unlink(missing_ok=True)


class StepFile:
    """A job's run-steps done, written to its folder for the sweep's display to read."""

    def __init__(self, folder: Path) -> None:
        self.path, self.done, self.written = Path(folder) / PROGRESS_NAME, 0, 0.0

    def add(self, n: int) -> None:
        self.done += n
        if time.monotonic() - self.written >= WRITE_EVERY_S:
            self.write()

    def write(self) -> None:
        tmp = self.path.with_name(f"{PROGRESS_NAME}.{os.getpid()}.tmp")
        try:
            tmp.write_text(str(self.done))
            os.replace(tmp, self.path)
        except OSError:  # progress is a courtesy: never fail a job over it
            return
        self.written = time.monotonic()


@contextmanager
def job_steps(description: str, total: int, folder: Path | None = None) -> Iterator[Callable[[int], None] | None]:
    """A job's progress callback (run-steps): to its folder's step file and, in the sweep's process, its own bar."""
    steps = StepFile(folder) if folder is not None else None
    display = _display
    task = display.add_task(description, total=total) if display is not None else None
    if steps is None and task is None:
        yield None
        return

    def advance(n: int) -> None:
        if steps is not None:
            steps.add(n)
        if task is not None:
            display.advance(task, n)

    try:
        yield advance
    finally:
        if task is not None:
            display.remove_task(task)
        if steps is not None:
            steps.write()  # the final count; the sweep removes the file once the record exists


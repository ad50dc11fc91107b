"""Progress bars shared by the sweep (in the launching process) and its jobs.

The sweep opens a `rich` display; a job running in the same process (Hydra's
basic launcher) adds its own step bar to it. Jobs in other processes (joblib,
submitit, Ray) find no display and stay quiet: their progress is the sweep's job
count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

_display: Progress | None = None
_jobs_task = None

console = Console(stderr=True)
log = logging.getLogger(__name__)


@contextmanager
def sweep_display(total_jobs: int, enabled: bool = True) -> Iterator[Progress | None]:
    global _display, _jobs_task
    if not enabled or total_jobs == 0:
        yield None
        return
    progress = Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
    with progress:
        _display, _jobs_task = progress, progress.add_task("jobs", total=total_jobs)
        try:
            yield progress
        finally:
            _display = _jobs_task = None


def job_finished() -> None:
    if _display is not None:
        _display.advance(_jobs_task)


@contextmanager
def job_steps(description: str, total: int) -> Iterator[Callable[[int], None] | None]:
    """A step bar for one job, removed when the job ends; None when there is no display."""
    if _display is None:
        yield None
        return
    task = _display.add_task(description, total=total)
    try:
        yield lambda n: _display.advance(task, n)
    finally:
        _display.remove_task(task)


def warn(message: str) -> None:
    """A warning for the person at the screen, above the bars when a display is up, and in the job's log."""
    log.warning(message)
    console.print(f"warning: {message}", markup=False, highlight=False, soft_wrap=True)

"""A polite stop, the same under every local launcher.

The first Ctrl-C or SIGTERM asks training to stop at the next consistent point
(after saving a checkpoint); a second one to the sweep's process interrupts it at once. The engine only
polls `requested()`, so it knows nothing of signals or processes.

The sweep's process installs the handlers (`graceful`) and publishes who it is in
the environment its workers inherit. A job run in a worker process (joblib's
loky workers, submitit's local tasks) runs under `worker`, which turns a stop into
`requested()` there too, whichever way it arrives:

- a signal sent to the worker itself (a terminal's Ctrl-C reaches the whole
  process group);
- a signal sent to the sweep's process only (`kill PID`): its handler forwards
  the stop by creating a marker file, which the worker watches; this also reaches
  processes that are not the sweep's children (submitit's tasks, under its
  controller);
- the sweep's process dying (`kill -9`): the worker watches it too, so no job
  trains on for a sweep that is gone; once its job has saved, the worker exits.
  The sweep publishes itself for the whole launch (`lrtransfer.sweeps.launch`), so
  this holds for a sweep run from Python (`lrtransfer.sweep`) as from the CLI.

A stopped job saves its checkpoint and returns as interrupted; a job that starts
after the stop returns at once, so the launcher drains its queue quickly and the
sweep exits with 130. Workers on other machines (SLURM) keep the cluster's own
signal handling.
"""

from __future__ import annotations

import os
import platform
import signal
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "LRTRANSFER_SWEEP"  # "<host>:<pid>" of the sweep's process
POLL_S = 0.2
SIGNALS = (signal.SIGINT, signal.SIGTERM)

_requested = False


class Interrupted(KeyboardInterrupt):
    """Training or the sweep stopped on request (Ctrl-C, SIGTERM) at a consistent point."""


def requested() -> bool:
    return _requested


def request() -> None:
    global _requested
    _requested = True


def token() -> str:
    """This process as a sweep's workers know it (the value of `ENV` they inherit)."""
    return f"{platform.node()}:{os.getpid()}"


def _marker(who: str) -> Path:
    return Path(tempfile.gettempdir()) / f"lrtransfer-stop-{who.replace(':', '-').replace('/', '-')}"


def _on_signal(then=None, escalate: bool = True):
    def handler(signum, frame):
        if _requested and escalate:
            raise KeyboardInterrupt
        request()
        if then is not None:
            then()

    return handler


@contextmanager
def _handlers(handler) -> Iterator[None]:
    if threading.current_thread() is not threading.main_thread():  # signals go to the main thread only
        yield
        return
    previous = {s: signal.signal(s, handler) for s in SIGNALS}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextmanager
def graceful() -> Iterator[None]:
    """The sweep's process: within this block SIGINT/SIGTERM request a stop, here and in every worker."""
    global _requested
    me = token()
    marker = _marker(me)
    marker.unlink(missing_ok=True)
    previous_env = os.environ.get(ENV)
    os.environ[ENV] = me
    try:
        with _handlers(_on_signal(then=marker.touch)):
            yield
    finally:
        marker.unlink(missing_ok=True)
        if previous_env is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = previous_env
        _requested = False


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        return state not in ("Z", "X")  # a killed process not yet reaped by its parent is a zombie
    except FileNotFoundError:
        return False
    except OSError:  # no /proc: ask the kernel
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True


@contextmanager
def worker() -> Iterator[None]:
    """Around one job: in a worker of a sweep on this machine, watch for the sweep's stop (see module doc).

    In the sweep's own process (Hydra's basic launcher), or with no sweep, it does nothing.
    """
    global _requested
    sweep = os.environ.get(ENV, "")
    host, _, pid = sweep.rpartition(":")
    if not pid.isdigit() or host != platform.node() or int(pid) == os.getpid():
        yield
        return
    marker, sweep_pid = _marker(sweep), int(pid)

    def stopped() -> bool:
        return marker.exists() or not _alive(sweep_pid)

    done = threading.Event()

    def watch() -> None:
        while not done.wait(POLL_S):
            if stopped():
                request()
                return

    if stopped():
        request()
    watcher = threading.Thread(target=watch, name="lrtransfer-stop-watch", daemon=True)
    watcher.start()
    try:
        # No escalation here: one Ctrl-C can reach a worker twice (from the terminal, and
        # forwarded by submitit's controller); a second Ctrl-C is the sweep's to act on.
        with _handlers(_on_signal(escalate=False)):
            yield
    finally:
        done.set()
        watcher.join()
        _requested = False
        if not _alive(sweep_pid):  # nobody is left to take a result or give more work: leave, do not linger
            os._exit(130)

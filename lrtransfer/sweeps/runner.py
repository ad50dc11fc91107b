"""A job's command runs as processes, `parallel` at a time, their output read as it comes.

One loop, one thread: it starts a run whenever a slot is free, reads every running
process's standard output and error as they arrive (`selectors`), copying them to the run
folder's `stdout.log` and `stderr.log` and handing each line to the run's `Watch` (which
reads the losses), polls metrics files, and notices a run that diverged, a process that
ended, or a stop request (Ctrl-C, SIGTERM, SLURM's preemption signal: `stop.requested`).

Each run starts in a session of its own, so that a stop or a divergence ends the run's
whole process group (its `torchrun` workers too): SIGINT first, as Ctrl-C would (a script
flushes its logs), then SIGKILL after `GRACE_S`. A run's `.pid` file names its group, so a
run cut off by a kill -9 of the sweep, whose processes outlived it, is ended by the re-run
before it trains that run again (`end_orphan`).

Where the machine has GPUs (CUDA_VISIBLE_DEVICES, else `nvidia-smi -L`), the slots share
them: with N slots and G GPUs each run sees G // N of them (one each at N = G), through
CUDA_VISIBLE_DEVICES. A single slot leaves the variable as it is: the run has the machine
(or its SLURM allocation) to itself.
"""

from __future__ import annotations

import os
import re
import selectors
import signal
import subprocess
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

GRACE_S = 10.0  # seconds between SIGINT and SIGKILL
POLL_S = 0.2  # how often the loop looks at the clock, the stop flag and the metrics files
PID_NAME = ".pid"


@dataclass
class Task:
    """One run to start: its process and the run folder its output goes to."""

    key: object  # the caller's name for the run
    argv: list[str]
    cwd: str
    env: dict[str, str]
    folder: Path
    watch: object  # reads its losses: line(text, stream), poll(), should_stop() (`command_job.Watch`)


@dataclass
class Ended:
    key: object
    exit_code: int | None  # None: it never started
    seconds: float
    stopped_diverged: bool = False  # ended by this loop because its losses diverged
    error: str | None = None  # why it could not start


@dataclass
class _Running:
    task: Task
    slot: int
    popen: subprocess.Popen
    started: float
    logs: dict = field(default_factory=dict)  # fd -> [stream name, its log file, its partial last line]
    signalled: float | None = None  # when SIGINT was sent
    diverged: bool = False


def run(tasks: list[Task], parallel: int, on_end: Callable[[Ended], None], on_tick: Callable[[], None] | None = None,
        should_stop: Callable[[], bool] = lambda: False) -> bool:
    """Run every task, `parallel` at a time, calling `on_end` as each ends; return whether a stop
    request cut the rest off (the runs it ended, and those never started, get no `on_end`)."""
    pending, running = deque(tasks), {}
    gpus = visible_gpus(tasks[0].env) if parallel > 1 and tasks else []
    free = list(range(parallel))
    sel = selectors.DefaultSelector()
    stopping = False
    try:
        while pending or running:
            if not stopping and should_stop():
                stopping = True
                pending.clear()
                for r in running.values():
                    _signal(r)
            while pending and free and not stopping:
                task = pending.popleft()
                try:
                    r = _start(task, free[0], gpus, parallel, sel)
                except OSError as e:  # found when the config was checked; gone since, or not executable here
                    on_end(Ended(task.key, None, 0.0, error=f"cannot start {task.argv[0]}: {e.strerror or e}"))
                    continue
                running[r.popen.pid] = r
                free.pop(0)
            closed = any(all(fd not in sel.get_map() for fd in r.logs) for r in running.values())
            for key, _ in sel.select(timeout=0.005 if closed else POLL_S):  # closed: its exit is due any moment
                _read(key.data, key.fd, sel)
            for pid, r in list(running.items()):
                r.task.watch.poll()
                if not r.diverged and r.task.watch.should_stop():
                    r.diverged = True
                    _signal(r)
                if r.signalled is not None and time.monotonic() - r.signalled > GRACE_S:
                    _kill_group(r.popen.pid, signal.SIGKILL)
                if r.popen.poll() is not None:
                    _finish(r, sel)
                    del running[pid]
                    free.append(r.slot)
                    free.sort()
                    if not (stopping and not r.diverged):
                        on_end(Ended(r.task.key, r.popen.returncode, time.monotonic() - r.started, r.diverged))
            if on_tick is not None:
                on_tick()
    finally:
        for r in running.values():  # an exception here (never expected): no run outlives the loop
            _kill_group(r.popen.pid, signal.SIGKILL)
        sel.close()
    return stopping


def _start(task: Task, slot: int, gpus: list[str], parallel: int, sel) -> _Running:
    task.folder.mkdir(parents=True, exist_ok=True)
    env = dict(task.env)
    if gpus:
        share = max(1, len(gpus) // parallel)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[(slot * share + i) % len(gpus)] for i in range(share))
    popen = subprocess.Popen(task.argv, cwd=task.cwd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
    (task.folder / PID_NAME).write_text(f"{popen.pid} {_start_time(popen.pid)}\n")
    r = _Running(task, slot, popen, time.monotonic())
    for name, stream in (("stdout", popen.stdout), ("stderr", popen.stderr)):
        os.set_blocking(stream.fileno(), False)
        r.logs[stream.fileno()] = [name, open(task.folder / f"{name}.log", "ab"), b""]
        sel.register(stream.fileno(), selectors.EVENT_READ, r)
    return r


def _read(r: _Running, fd: int, sel) -> bool:
    """What the process wrote on `fd` since the last read: to its log, and line by line to its watch.
    False when there is nothing now, or the stream has ended."""
    log = r.logs[fd]
    try:
        data = os.read(fd, 1 << 16)
    except BlockingIOError:
        return False
    if not data:  # end of stream
        sel.unregister(fd)
        _lines(r, log, log[2], final=True)
        log[2] = b""
        return False
    log[1].write(data)
    log[1].flush()
    log[2] = _lines(r, log, log[2] + data)
    return True


def _lines(r: _Running, log, buffer: bytes, final: bool = False) -> bytes:
    """Hand the complete lines of `buffer` to the watch; return the rest. A carriage return ends a
    line too (a progress bar redrawn in place), so a line never grows without end."""
    *complete, rest = re.split(rb"\r\n|\r|\n", buffer)
    if final and rest:
        complete, rest = [*complete, rest], b""
    for line in complete:
        r.task.watch.line(line.decode("utf-8", errors="replace"), log[0])
    return rest


def _finish(r: _Running, sel) -> None:
    """The process has ended: what is left in its pipes is read (not what a child that outlived it
    may write later), the pipes and logs closed, and any process left in its group ended."""
    for fd, log in r.logs.items():
        for _ in range(64):  # at most 4 MiB more
            if fd not in sel.get_map() or not _read(r, fd, sel):
                break
        if fd in sel.get_map():  # still open: a child of the run holds it
            sel.unregister(fd)
            _lines(r, log, log[2], final=True)
        log[1].close()
    r.popen.stdout.close()
    r.popen.stderr.close()
    _kill_group(r.popen.pid, signal.SIGKILL)
    (r.task.folder / PID_NAME).unlink(missing_ok=True)


def _signal(r: _Running) -> None:
    if r.signalled is None:
        r.signalled = time.monotonic()
        _kill_group(r.popen.pid, signal.SIGINT)


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _start_time(pid: int) -> str:
    """The process's start time (clock ticks since boot, /proc), so a pid reused later is never taken for it."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return "?"


def end_orphan(folder: Path) -> None:
    """A run cut off by a kill -9 of the process that ran it may still be running: end its process
    group, named by the run folder's `.pid` file, if that process is still the one it names."""
    path = folder / PID_NAME
    try:
        pid, started = path.read_text().split()
        pid_ = int(pid)
    except (OSError, ValueError):
        return
    if started != "?" and _start_time(pid_) == started:
        _kill_group(pid_, signal.SIGKILL)
    path.unlink(missing_ok=True)


def visible_gpus(environment: dict[str, str]) -> list[str]:
    """The GPUs the runs may use: their environment's CUDA_VISIBLE_DEVICES where set (empty or -1: none),
    else those `nvidia-smi -L` lists; none where there is no nvidia-smi."""
    env = environment.get("CUDA_VISIBLE_DEVICES")
    if env is not None:
        ids = [d.strip() for d in env.split(",") if d.strip()]
        return [] if not ids or ids[0].startswith("-") else ids
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    return [str(i) for i, line in enumerate(line for line in out.splitlines() if line.startswith("GPU "))]

"""A SLURM job that is about to be killed saves its training state before it goes.

SLURM warns a job before its time limit (and a preempting admin can do the same
with `scancel --signal=USR2`) by sending the signal submitit listens for. submitit's
own handler requeues the job and exits on the spot, wherever training is: left
alone, a requeued job would resume from its last periodic checkpoint and redo up to
`engine.checkpoint_s` of training. Here the signal first asks training to stop at
its next consistent point, where the engine saves a checkpoint and raises
`Interrupted`; only then is submitit's handler called to requeue and exit. A job
that finishes before reaching that point simply finishes.
"""

from __future__ import annotations

import logging
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from lrtransfer.training import stop

log = logging.getLogger(__name__)


def _submitit_signal() -> signal.Signals | None:
    """The signal submitit's handler listens to in this process, if it installed one."""
    name = "SIG" + os.environ.get("SUBMITIT_PREEMPT_SIGNAL", "USR2")
    sig = getattr(signal, name, None)
    if sig is None:
        return None
    handler = signal.getsignal(sig)
    owner = getattr(handler, "__self__", None)
    return sig if type(owner).__name__ == "SignalHandler" and type(owner).__module__.startswith("submitit") else None


@contextmanager
def checkpoint_first() -> Iterator[None]:
    """Within this block, submitit's requeue signal stops training at a checkpoint before requeueing."""
    sig = _submitit_signal()
    if sig is None:
        yield
        return
    requeue = signal.getsignal(sig)
    caught: list[tuple[int, float]] = []

    def ask_to_stop(signum, frame):
        caught.append((signum, time.monotonic()))
        stop.request()

    signal.signal(sig, ask_to_stop)
    try:
        try:
            yield
        except KeyboardInterrupt:
            if not caught:
                raise
        # The job stopped at its checkpoint (the job reports that as `interrupted`), or
        # finished meanwhile (the requeued job then finds its record complete at once).
        if caught:
            signum, at = caught[0]
            log.info("training stopped and checkpointed %.1f s after %s; submitit requeues",
                     time.monotonic() - at, signal.Signals(signum).name)
            signal.signal(sig, requeue)
            requeue(signum, None)  # requeues the job and exits (or raises: too many timeouts)
    finally:
        signal.signal(sig, requeue)

"""The training engine: every run of a job (learning rate x seed) in one ensemble.

A job's runs differ only in learning rate and seed, so the engine trains them as
one model whose weights carry a leading run axis (see `nn/atoms.py`): one
forward, one backward and one optimizer step serve all K runs, and runs sharing a
seed share every batch. Each run still computes exactly what it would alone. The runs go
in ensembles as large as the memory budget allows, one after another (`ensemble.py` trains
one); a checkpoint saves where the job stands, and a job resumes from one that restores
exactly, or starts afresh.

The engine knows nothing of Hydra, configs, records or plots: it takes what
`build.job` made (the task, factories for the parameterization, model and
optimizer, the training settings) and a list of runs, each a log2 learning rate
and a seed (`runs.Run`), and returns one `RunResult` per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from lrtransfer.training import stop
from lrtransfer.training.ensemble import Ensemble
from lrtransfer.training.memory import chunk_size
from lrtransfer.training.results import RunResult
from lrtransfer.training.runs import Run, run_key
from lrtransfer.training.saved_state import DamagedState, brief, check_finished, is_int, require

if TYPE_CHECKING:
    from lrtransfer.training.build import Built


Interrupted = stop.Interrupted  # raised by `train` at a consistent point, after a checkpoint


class Checkpointer(Protocol):
    """Where and when a job's training state is saved (see `checkpoint.FileCheckpoint`)."""

    def load(self) -> dict | None: ...

    def due(self) -> bool: ...

    def save(self, state: dict) -> None: ...

    def reject(self, why: str) -> None: ...


def train(
    built: Built,
    runs: Sequence[Run],
    *,
    progress: Callable[[int], None] | None = None,
    checkpoint: Checkpointer | None = None,
) -> list[RunResult]:
    """Train every run of a job and return their results, in the order given.

    progress(n) is called with the number of run-steps completed since its last
    call. With a checkpointer, training state is saved when it says so (and when a
    stop is requested), and a saved state for the same runs is resumed from.
    """
    runs = list(runs)
    # Batched: the runs in ensembles as large as the memory budget allows. Otherwise the
    # reference path: one run at a time, same code.
    size = chunk_size(built, len(runs))
    chunks = [runs[i : i + size] for i in range(0, len(runs), size)]
    key = [[run_key(r) for r in chunk] for chunk in chunks]

    def make(index: int) -> Ensemble:
        return Ensemble(built, chunks[index])

    done, start, resumed = _resume(checkpoint, key, make) or ([], 0, None)
    if progress and done:
        progress(len(done) * built.train.steps)

    for index in range(start, len(chunks)):
        ens = resumed if resumed is not None and index == start else make(index)
        if ens is resumed and progress:
            progress(ens.step_index * ens.K)
        while not ens.finished:
            ens.step()
            if ens.at_check():
                ens.check()
                if progress:
                    progress(ens.since_last_report())
                if checkpoint and (checkpoint.due() or stop.requested()):
                    state = {"chunks": key, "chunk": index, "done": [vars(r) for r in done], "ensemble": ens.state_dict()}
                    checkpoint.save(state)
                if stop.requested():
                    raise Interrupted("stop requested")
        if progress:
            progress(ens.since_last_report())
        done += ens.results()
    return done


def steps_done(state: dict, steps: int) -> int:
    """Run-steps a saved state (`train`'s checkpoint) has behind it: its finished runs, `steps`
    each, and the steps of the chunk it stopped in. A state claiming steps no job of `steps`
    could have done raises `DamagedState`: a plan must not count a saving the job will not get
    (its resume rejects that state, `check_state`)."""
    chunks, chunk, step = state["chunks"], state["chunk"], state["ensemble"]["step_index"]
    require(is_int(chunk) and 0 <= chunk < len(chunks), f"chunk={brief(chunk)} is not one of {len(chunks)}")
    require(len(state["done"]) == sum(map(len, chunks[:chunk])), f"{len(state['done'])} finished runs before chunk {chunk}")
    require(is_int(step) and 0 <= step <= steps, f"step_index={brief(step)} is not a step of a {steps}-step job")
    return len(state["done"]) * steps + step * len(chunks[chunk])


def _resume(checkpoint: Checkpointer | None, key: list, make: Callable[[int], Ensemble]):
    """(finished results, index of the chunk to resume, its ensemble restored), or None to start afresh.

    A checkpoint that does not restore exactly (other runs, another layout) is
    rejected: reported and removed, so no job fails on one. So is one that loads but holds
    a state no training of this job reaches (edited, or damaged where it still unpickles):
    resumed, it would fail in the middle of the job, every re-run again, or worse, finish
    with wrong numbers (`check_state`, `check_finished`).
    """
    saved = checkpoint.load() if checkpoint else None
    if saved is None:
        return None
    if saved.get("chunks") != key:
        checkpoint.reject("it holds other runs (another LR grid, seeds or ensemble size)")
        return None
    try:
        start = saved["chunk"]
        require(is_int(start) and 0 <= start < len(key), f"chunk={brief(start)} is not one of the job's {len(key)}")
        ens = make(start)
        done = check_finished(saved["done"], [k for chunk in key[:start] for k in chunk], ens.steps)
        ens.load_state_dict(saved["ensemble"])
    except DamagedState as e:
        checkpoint.reject(f"damaged ({e})")
        return None
    except Exception as e:  # a layout of another version, or a damaged file that still unpickles
        checkpoint.reject(f"another layout ({e.__class__.__name__}: {e})")
        return None
    return done, start, ens

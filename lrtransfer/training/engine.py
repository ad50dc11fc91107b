"""The training engine: every run of a job (learning rate x seed) in one ensemble.

A job's runs differ only in learning rate and seed, so the engine trains them as
one model whose weights carry a leading run axis (see `nn/atoms.py`): one
forward, one backward and one optimizer step serve all K runs, and runs sharing a
seed share every batch. Each run still computes exactly what it would alone.

A step's update is the optimizer's own pass over each run's tensors where the
parameterization's update is the LR times the optimizer's direction (`Optimizer.update`,
`Parameterization.scales_directions`), else the direction, the parameterization's
`updates` and `apply_updates` in turn. Under train.dtype=bf16 the forward computes with
bfloat16 copies of the matrices (`precision.matmul_copies`), the gradients are theirs, and
the float32 masters are what the optimizer updates and the checkpoints save.

A tensor the forward did not use at a step (a user's module that skips a layer, or takes a
branch on some steps only) is skipped for that step, run by run, as torch's optimizers skip a
parameter without a gradient (`skips.py`).

A run whose loss turns NaN/inf (or exceeds `train.diverge_factor` x its initial
loss) is recorded as diverged at that step and frozen: its learning rate drops to
zero and its weights and optimizer state are reset to finite values, so nothing
of it can reach the other runs. Losses stay on the device; the host reads them
every `check_every` steps, the only synchronisation in the step loop. On a GPU, a
narrow model's step replays as one CUDA graph (`graphs.py`, `engine.graphs`).

The engine knows nothing of Hydra, configs, records or plots: it takes what
`build.job` made (the task, factories for the parameterization, model and
optimizer, the training settings) and a list of runs, each a log2 learning rate
and a seed, and returns one `RunResult` per run. It is the one place where a log2
learning rate becomes a rate.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from lrtransfer.training import skips, stop
from lrtransfer.nn.linalg import run_view
from lrtransfer.training.allocator import keep_freed_memory
from lrtransfer.training.graphs import GraphedStep, use_graphs
from lrtransfer.training.memory import chunk_size
from lrtransfer.training.precision import autocast, matmul_copies, matmul_precision
from lrtransfer.training.results import RunResult, results_of
from lrtransfer.training.saved_state import (
    DamagedState, brief, check_finished, described, finite_for, is_int, is_tensor_like, require, tensors_in,
)
from lrtransfer.training.schedule import lr_factor

if TYPE_CHECKING:
    from lrtransfer.training.build import Built
    from lrtransfer.options.data import Task


@dataclass(frozen=True)
class Run:
    log2_lr: float
    seed: int
    # The run's own value of each per-run key (`grid.<key>`), e.g. (("optim.weight_decay", 0.01),).
    grid: tuple[tuple[str, float], ...] = ()


def data_seed(seed: int) -> int:
    """The batch stream of a seed, kept apart from its initialisation stream."""
    return (seed * 1_000_003 + 7_919) % (2**63)


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


def run_key(run: Run) -> tuple:
    """A run as a checkpoint names it: (log2 LR, seed, each per-run key and value)."""
    return (run.log2_lr, run.seed, *(x for kv in run.grid for x in kv))


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


class Ensemble:
    """K runs of one configuration trained in lockstep, one step at a time."""

    def __init__(self, built: Built, runs: list[Run]) -> None:
        self.built, self.train, self.runs, self.task = built, built.train, runs, built.task
        device, dtype = built.device, built.dtype
        self.K, self.steps, self.device = len(runs), self.train.steps, device
        if device.type == "cpu":  # a step's large blocks reused, not mapped afresh (`allocator`)
            keep_freed_memory()
        # Each per-run key's values, (K,) float64 on the device: the options that take one
        # value per run get these in place of their scalar (`build.per_run`).
        self.values = per_run_values(runs, device)
        self.param = built.new_param(self.values)
        self.model = built.new_model(self.param, self.K)
        self.param.initialize(self.model, [r.seed for r in runs])
        self.model.to(device=device, dtype=dtype)
        self.slots = self.param.slots(self.model)
        self.tensors = [s.tensor for s in self.slots]  # the masters: what the optimizer updates
        # In bf16, each matrix's copy the forward computes with (None: the master itself), and
        # what the gradients are taken of
        self.copies = matmul_copies(self.slots, self.train.dtype.value)
        self.operands = [t if c is None else c for t, c in zip(self.tensors, self.copies)]
        self.opt = built.new_optimizer(self.slots, self.values)
        # A model whose forward may leave a trained tensor unused at a step (a user's module) says which
        # runs did (`skipping`); the steps each run used each tensor, None while all used all (`skips`)
        self.skipping = getattr(self.model, "skipping", None) is not None
        self.uses: Tensor | None = None
        self.every_run = torch.ones(self.K, dtype=torch.bool)
        self.optim = built.optim_options(self.values)  # what `decays` reads (weight_decay)
        who = f"model.target={self.model.target}" if hasattr(self.model, "target") else "the model"
        self.trained = skips.Trained(self.slots, self.tensors, self.copies, self.opt, self.param, self.optim, who)
        # Where the update is rate x direction, the optimizer's own pass does it all, run by run,
        # with each run's rate and decay read on the host (`_fused_update`)
        self.fused = self.param.scales_directions and hasattr(self.opt, "update")
        self.optim_host = built.optim_options(per_run_values(runs, torch.device("cpu")))
        # On a GPU, a step that is launch-bound replays as one CUDA graph (`graphs`): the direction
        # path, with the schedule's factor read from the device
        capturable = self.param.scales_directions and hasattr(self.opt, "advance")
        elements = sum(t.numel() for t in self.tensors)
        self.graphed = None
        if use_graphs(built.engine.graphs, device, elements, capturable):
            self.factor = torch.ones((), device=device, dtype=dtype)  # the schedule's, written before each replay
            self.graphed = GraphedStep(lambda x, y: self._compute(x, y, self.factor, advance=False))
            self.fused = False

        seeds = list(dict.fromkeys(r.seed for r in runs))
        self.gens = [torch.Generator().manual_seed(data_seed(s)) for s in seeds]  # on the CPU (`Task.sample`)
        # (K,) index of each run's seed, used only when runs have different seeds
        self.seed_index = torch.tensor([seeds.index(r.seed) for r in runs], device=device)

        self.lr_alive = torch.tensor([2.0**r.log2_lr for r in runs], device=device, dtype=dtype)  # 0 once frozen
        self.lr_host = self.lr_alive.cpu()  # the same numbers on the host, where the fused update reads them
        self.alive = torch.ones(self.K, dtype=torch.bool)  # host copy, updated at checks
        self.live = list(range(self.K))  # the runs not frozen, as the fused update walks them
        self.diverged_step: list[int | None] = [None] * self.K
        self.history = torch.full((self.K, self.steps), math.nan, device=device, dtype=dtype)
        self.step_index = 0  # steps done
        self.checked = 0  # steps examined for divergence
        self.reported = 0  # steps reported to the progress callback
        self.check_every = max(1, min(25, self.steps // 20))

    @property
    def finished(self) -> bool:
        return self.step_index >= self.steps or not bool(self.alive.any())

    def at_check(self) -> bool:
        return self.step_index - self.checked >= self.check_every or self.step_index == self.steps

    def since_last_report(self) -> int:
        """Run-steps to report: the steps done since the last report (a stopped job counts as done)."""
        upto = self.steps if self.finished else self.step_index
        n, self.reported = (upto - self.reported) * self.K, upto
        return n

    def step(self) -> None:
        train, t = self.train, self.step_index
        x, y = _batch(self.task, self.gens, self.seed_index, train.batch_size)
        factor = lr_factor(train.schedule.value, t, self.steps, train.warmup_steps)
        # a step that skips a tensor is not replayed (`skips`), nor one that sets each run's stream of random draws
        if self.graphed is not None and (self.uses is not None or getattr(self.model, "random", None)):
            self.graphed = None
        if self.graphed is not None:  # what the graph reads, written on the device; then the step
            self.factor.fill_(factor)
            self.opt.advance()
            losses = self.graphed(x, y)
        else:
            losses = self._compute(x, y, factor)
        self.history[:, t] = losses
        self.step_index += 1

    def _compute(self, x: Tensor, y: Tensor, factor: float | Tensor, advance: bool = True) -> Tensor:
        """One step's forward, backward and update; returns the (K,) losses before it. factor: the
        schedule's, a number, or a 0-dim device tensor in a graphed step (where the optimizer's
        step count was advanced before it: `advance` False)."""
        kind = self.train.dtype.value
        with matmul_precision(kind, self.device):
            with autocast(kind, self.device, cache=self.graphed is None):
                logits = self.model(x)  # (K, B, C), or (K, B, T, V) for tokens
                losses = self.task.losses(logits, y).to(self.history.dtype)  # (K,)
            grads = torch.autograd.grad(losses.sum(), self.operands, allow_unused=self.skipping)
        with torch.no_grad():
            skipped = skips.skipped(self.slots, grads, self.model.skipping(), self.every_run) if self.skipping else None
            if skipped is None and self.uses is None:
                self._update(grads, factor, advance)
            else:
                self.uses = skips.step(self.trained, grads, skipped, uses=self.uses, done=self.step_index,
                                       alive=self.alive, lr=self.lr_alive, factor=factor,
                                       update=lambda g: self._update(g, factor, advance, skipped))
        return losses.detach()

    def _update(self, grads: Sequence[Tensor], factor: float | Tensor, advance: bool,
                skipped: Sequence[Tensor | None] | None = None) -> None:
        """The step's update of every tensor; skipped: per slot, the runs that do not decay it this
        step (None: every run decays every tensor)."""
        if self.fused:
            self._fused_update(grads, factor, skipped)
        else:
            grads = [g.to(w.dtype) for g, w in zip(grads, self.tensors)]
            directions = self.opt.directions(grads) if advance else self.opt.directions(grads, advance=False)
            updates = self.param.updates(self.slots, directions, self.lr_alive * factor)
            decays = self.param.decays(self.slots, self.lr_alive, factor, self.optim)
            apply_updates(self.slots, updates, skips.without_skipped(decays, skipped))
            refresh(self.copies, self.tensors)

    def _fused_update(self, grads: Sequence[Tensor], factor: float, skipped=None) -> None:
        """The optimizer's one pass per live run, given each slot's rates and decays as the
        parameterization computes them (`rates`, `decays`), on the host copy of the LRs: the
        same numbers as on the device, read with no synchronisation."""
        rates = self.param.rates(self.slots, self.lr_host * factor)
        decays = self.param.decays(self.slots, self.lr_host, factor, self.optim_host)
        self.opt.update(grads, rates, skips.without_skipped(decays, skipped), self.live, self.copies)

    def check(self) -> None:
        """Read the losses since the last check (the host sync) and freeze runs that diverged."""
        dead = _check(self.history, self.checked, self.step_index, self.alive, self.diverged_step, self.train.diverge_factor)
        if dead:
            _freeze(dead, self.tensors + [c for c in self.copies if c is not None], self.opt, self.lr_alive)
            self.lr_host.copy_(self.lr_alive.cpu())
            self.live = torch.nonzero(self.alive).flatten().tolist()
        self.checked = self.step_index

    def state_dict(self) -> dict:
        return {
            "tensors": [t.detach().clone() for t in self.tensors],
            # running statistics (a user's BatchNorm, per run): state that training changes, too
            "buffers": {n: b.clone() for n, b in self.model.named_buffers() if _persistent(self.model, n)},
            "opt_state": [t.clone() for t in self.opt.state],
            "opt_t": self.opt.t,
            "gens": [g.get_state() for g in self.gens],
            "lr_alive": self.lr_alive.clone(),
            "alive": self.alive.clone(),
            "diverged_step": list(self.diverged_step),
            "history": self.history.clone(),
            "step_index": self.step_index,
            "checked": self.checked,
            "param": self.param.state_dict(),
            "uses": None if self.uses is None else self.uses.clone(),
            # each run's stream of random draws (a user's dropout), once its forward has drawn
            "streams": None if getattr(self.model, "streams", None) is None else torch.stack(self.model.streams),
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        """Checked whole first (`check_state`): a state that fails is rejected before anything of
        it is copied, and one that passes cannot fail or mislead the steps that follow."""
        self.check_state(state)
        for dst, src in zip(self.tensors + list(self.opt.state), state["tensors"] + state["opt_state"]):
            dst.copy_(src)
        buffers = {n: b for n, b in self.model.named_buffers() if _persistent(self.model, n)}
        saved = state.get("buffers", {})
        for name, b in buffers.items():
            b.copy_(saved[name])
        self.opt.t = state["opt_t"]
        for g, s in zip(self.gens, state["gens"]):
            g.set_state(s)
        self.lr_alive.copy_(state["lr_alive"])
        self.lr_host.copy_(state["lr_alive"])
        refresh(self.copies, self.tensors)
        self.alive.copy_(state["alive"])
        self.live = torch.nonzero(self.alive).flatten().tolist()
        self.diverged_step = list(state["diverged_step"])
        self.history.copy_(state["history"])
        self.param.load_state_dict(_to(state["param"], self.device))
        self.uses = None if state.get("uses") is None else state["uses"].clone()
        if state.get("streams") is not None:
            self.model.random, self.model.streams = True, [s.clone() for s in state["streams"]]
        self.step_index = self.reported = state["step_index"]
        self.checked = state["checked"]

    @torch.no_grad()
    def check_state(self, state: dict) -> None:
        """Raise `DamagedState` unless `state` is one this ensemble, fresh, reaches by training.

        A checkpoint loads with any numbers in it, and the step loop trusts its own: a counter
        past the job's steps ends it with NaN losses recorded as complete, a NaN rate records
        every run as diverged, a frozen run without its step fails at the record. So each field
        is held to what the loop makes of it, by the loop's own rules where there are some
        (`_check` for which runs diverged and where, this ensemble's rates), and a field of the
        wrong kind raises here or in the lookups (another layout) before anything is restored.
        """
        K, steps = self.K, self.steps
        step, checked, t = state["step_index"], state["checked"], state["opt_t"]
        require(is_int(step) and 0 <= step <= steps, f"step_index={brief(step)} is not a step of a {steps}-step job")
        require(is_int(checked) and 0 <= checked <= step, f"checked={brief(checked)} is not a step in [0, step_index={step}]")
        # An optimizer that counts steps (`advance`) counts one per step of the loop
        counts = hasattr(self.opt, "advance")
        require(is_int(t) and (t == step if counts else t >= 0),
                 f"opt_t={brief(t)} is not the optimizer's step count after {step} steps")

        history = state["history"]
        require(is_tensor_like(history, self.history), f"history {described(history)} is not {described(self.history)}")
        alive, diverged = state["alive"], state["diverged_step"]
        require(is_tensor_like(alive, self.alive), f"alive {described(alive)} is not {described(self.alive)}")
        require(isinstance(diverged, list) and len(diverged) == K and all(d is None or is_int(d) for d in diverged),
                 f"diverged_step={brief(diverged)} is not {K} steps or nulls")
        # Which runs diverged, and at which step, follows from the losses examined so far (`_check`)
        expect_alive, expect_diverged = torch.ones(K, dtype=torch.bool), [None] * K
        if checked:
            _check(history, 0, checked, expect_alive, expect_diverged, self.train.diverge_factor)
        require(torch.equal(alive.cpu(), expect_alive) and diverged == expect_diverged,
                 f"alive={alive.tolist()}, diverged_step={diverged} are not what the saved history's losses say "
                 f"(alive={expect_alive.tolist()}, diverged_step={expect_diverged})")
        lr = state["lr_alive"]
        require(is_tensor_like(lr, self.lr_alive), f"lr_alive {described(lr)} is not {described(self.lr_alive)}")
        expect_lr = torch.where(expect_alive, self.lr_alive.cpu(), 0)
        require(torch.equal(lr.cpu(), expect_lr),
                 f"lr_alive={lr.tolist()} is not each live run's rate and 0 for a frozen one ({expect_lr.tolist()})")

        live = torch.nonzero(expect_alive).flatten()
        buffers = {n: b for n, b in self.model.named_buffers() if _persistent(self.model, n)}
        saved_buffers = state.get("buffers", {})
        require(isinstance(saved_buffers, dict) and set(saved_buffers) == set(buffers),
                 f"saved buffers {sorted(saved_buffers)[:3]} for {sorted(buffers)[:3]}")
        for name, dsts in (("tensors", self.tensors), ("opt_state", list(self.opt.state)),
                           ("buffers", list(buffers.values()))):
            srcs = state[name] if name != "buffers" else [saved_buffers[n] for n in buffers]
            require(isinstance(srcs, list) and len(srcs) == len(dsts), f"{name}: {len(srcs)} saved tensors for {len(dsts)}")
            for i, (dst, src) in enumerate(zip(dsts, srcs)):
                require(is_tensor_like(src, dst), f"{name}[{i}] {described(src)} is not {described(dst)}")
                require(finite_for(src, live, K), f"{name}[{i}] is not finite for a run still training")
        gens = state["gens"]
        require(isinstance(gens, list) and len(gens) == len(self.gens)
                 and all(is_tensor_like(s, g.get_state()) for s, g in zip(gens, self.gens)),
                 f"gens is not the state of {len(self.gens)} generators")
        # The parameterization's (the power iteration's warm start): laid out as a fresh one lays
        # it out, one entry per tensor, its vectors made by training, so finite
        param, fresh = state["param"], self.param.state_dict()
        require(isinstance(param, dict) and set(param) == set(fresh), f"param is not a dict of the keys {sorted(fresh)}")
        for name, entries in fresh.items():
            if isinstance(entries, list):
                require(isinstance(param[name], list) and len(param[name]) == len(entries),
                         f"param[{name!r}] is not {len(entries)} entries")
        require(all(finite_for(t, live, K) for t in tensors_in(param)), "param is not finite for a run still training")
        # The steps each run used each tensor (`skips`): none past the steps done
        uses = state.get("uses")
        require(uses is None or (self.skipping and is_tensor_like(uses, torch.zeros(len(self.tensors), K, dtype=torch.long))
                                 and bool(((uses >= 0) & (uses <= step)).all())),
                 f"uses {described(uses)} is not the steps of use of {len(self.tensors)} tensors in [0, {step}]")
        streams = state.get("streams")
        takes = getattr(self.model, "takes_streams", None)
        require(streams is None or (takes is not None and takes(streams, self.device)),
                 f"streams {described(streams)} is not {K} states of torch's generator")

    def results(self) -> list[RunResult]:
        return results_of(self.train, self.runs, self.task, self.model, self.history, self.alive, self.diverged_step)


def per_run_values(runs: Sequence[Run], device: torch.device) -> dict[str, Tensor]:
    """{key: (K,) float64 tensor} of the runs' own values (`Run.grid`); {} when they have none.

    Float64 so that code computing with a value rounds it to the training dtype once,
    where a scalar would be: a run equals the job with that key set to its value.
    """
    keys = list(dict.fromkeys(k for r in runs for k, _ in r.grid))
    table = [dict(r.grid) for r in runs]
    if any(set(t) != set(keys) for t in table):
        raise ValueError("every run of an ensemble must set the same per-run keys")
    return {k: torch.tensor([t[k] for t in table], device=device, dtype=torch.float64) for k in keys}


@torch.no_grad()
def apply_updates(slots, updates, decays) -> None:
    """w <- (1 - decay) * w - update; decays: one (K,) tensor per slot, or None.

    The parameterization decides both (`updates`, `decays`): the engine only applies them.
    """
    for i, (s, u) in enumerate(zip(slots, updates)):
        if decays is not None:
            s.tensor.mul_(1 - run_view(decays[i], s.tensor))
        s.tensor.sub_(u)


def _persistent(model: torch.nn.Module, name: str) -> bool:
    """Whether the buffer `name` is state (running statistics), not a constant the model set
    (a forward multiplier, kept as a non-persistent buffer)."""
    owner, _, leaf = name.rpartition(".")
    return leaf not in model.get_submodule(owner)._non_persistent_buffers_set


def _to(state, device: torch.device):
    """A checkpoint's nested dicts and lists with every tensor moved to `device` (checkpoints load
    onto the CPU, and may have been written on another device)."""
    if isinstance(state, Tensor):
        return state.to(device)
    if isinstance(state, dict):
        return {k: _to(v, device) for k, v in state.items()}
    if isinstance(state, (list, tuple)):
        return type(state)(_to(v, device) for v in state)
    return state


def _batch(task: Task, gens: list[torch.Generator], seed_index: Tensor, B: int) -> tuple[Tensor, Tensor]:
    if len(gens) == 1:
        return task.sample(gens[0], B)  # x: (B, *input_shape) shared by every run
    xs, ys = zip(*(task.sample(g, B) for g in gens))
    return torch.stack(xs)[seed_index], torch.stack(ys)[seed_index]  # (K, B, *input_shape), (K, B, ...)


def _check(history: Tensor, start: int, end: int, alive: Tensor, diverged_step: list, factor: float) -> list[int]:
    """Mark runs that diverged in steps [start, end); return the newly dead ones."""
    window = history[:, :end].cpu()
    initial = window[:, 0]
    bad = ~torch.isfinite(window) | (window > factor * initial.unsqueeze(1).abs())
    newly = []
    for k in torch.nonzero(alive & bad[:, start:end].any(1)).flatten().tolist():
        diverged_step[k] = int(torch.nonzero(bad[k]).min())
        alive[k] = False
        newly.append(k)
    return newly


@torch.no_grad()
def refresh(copies: Sequence[Tensor | None], masters: Sequence[Tensor]) -> None:
    """Write each low-precision copy from its master (where no optimizer pass did)."""
    for c, w in zip(copies, masters):
        if c is not None:
            c.copy_(w)


@torch.no_grad()
def _freeze(dead: list[int], tensors, opt, lr_alive: Tensor) -> None:
    """Stop dead runs for good: zero LR, and finite (zero) weights, their copies and optimizer state."""
    idx = torch.tensor(dead, device=lr_alive.device)
    lr_alive[idx] = 0
    for t in list(tensors) + list(opt.state):
        t[idx] = 0



"""The training engine: every run of a job (learning rate x seed) in one ensemble.

A job's runs differ only in learning rate and seed, so the engine trains them as
one model whose weights carry a leading run axis (see `model/layers.py`): one
forward, one backward and one optimizer step serve all K runs, and runs sharing a
seed share every batch. Each run still computes exactly what it would alone.

A run whose loss turns NaN/inf (or exceeds `train.diverge_factor` x its initial
loss) is recorded as diverged at that step and frozen: its learning rate drops to
zero and its weights and optimizer state are reset to finite values, so nothing
of it can reach the other runs. Losses stay on the device; the host reads them
every `check_every` steps, the only synchronisation in the step loop.

The engine knows nothing of Hydra, configs, records or plots: it takes what
`build.job` made (the task, factories for the parameterization, model and
optimizer, the training settings) and a list of runs, each a log2 learning rate
and a seed, and returns one `RunResult` per run. It is the one place where a log2
learning rate becomes a rate.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import torch
from torch import Tensor

from lrtransfer import stop
from lrtransfer.errors import UserError
from lrtransfer.param.base import run_view
from lrtransfer.schedule import lr_factor

if TYPE_CHECKING:
    from lrtransfer.build import Built
    from lrtransfer.data import Task


@contextmanager
def matmul_precision(kind: str, device: torch.device) -> Iterator[None]:
    """TF32 in CUDA matmuls and convolutions exactly when `train.dtype` is tf32, around a step's
    forward and backward. Set both ways: cuDNN allows TF32 convolutions by default, which would
    make a float32 conv net on a GPU a TF32 one."""
    if device.type != "cuda":
        yield
        return
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = kind == "tf32"
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


@contextmanager
def autocast(kind: str, device: torch.device) -> Iterator[None]:
    """bf16 autocast around a forward pass when `train.dtype` is bf16_autocast (backward follows
    the forward's types by itself, outside the context, as torch.autocast asks)."""
    if kind == "bf16_autocast":
        with torch.autocast(device.type, dtype=torch.bfloat16):
            yield
    else:
        yield


@contextmanager
def precision(kind: str, device: torch.device) -> Iterator[None]:
    """The numerics of `train.dtype` around a forward pass with no backward (evaluation)."""
    with matmul_precision(kind, device), autocast(kind, device):
        yield


@dataclass(frozen=True)
class Run:
    log2_lr: float
    seed: int
    # The run's own value of each per-run key (`grid.<key>`), e.g. (("optim.weight_decay", 0.01),).
    grid: tuple[tuple[str, float], ...] = ()


@dataclass
class RunResult:
    log2_lr: float
    lr: float  # 2**log2_lr
    seed: int
    initial_loss: float | None
    final_loss: float | None  # mean training loss over the final window; None if diverged
    diverged: bool
    diverged_step: int | None
    eval_loss: float | None = None
    eval_acc: float | None = None
    history_step: list[int] = field(default_factory=list)
    history_loss: list[float | None] = field(default_factory=list)
    grid: dict[str, float] = field(default_factory=dict)  # the run's per-run values (`Run.grid`)


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
    # Batched: the runs in ensembles as large as the memory budget allows (one, for
    # small models). Otherwise the reference path: one run at a time, same code.
    size = chunk_size(built, len(runs))
    chunks = [runs[i : i + size] for i in range(0, len(runs), size)]
    key = [[(r.log2_lr, r.seed, *(x for kv in r.grid for x in kv)) for r in chunk] for chunk in chunks]

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


def _resume(checkpoint: Checkpointer | None, key: list, make: Callable[[int], Ensemble]):
    """(finished results, index of the chunk to resume, its ensemble restored), or None to start afresh.

    A checkpoint that does not restore exactly (other runs, another layout) is
    rejected: reported and removed, so no job fails on one.
    """
    saved = checkpoint.load() if checkpoint else None
    if saved is None:
        return None
    if saved.get("chunks") != key:
        checkpoint.reject("it holds other runs (another LR grid, seeds or ensemble size)")
        return None
    try:
        done = [RunResult(**r) for r in saved["done"]]
        start = saved["chunk"]
        if not (isinstance(start, int) and 0 <= start < len(key) and len(done) == sum(map(len, key[:start]))):
            raise ValueError(f"chunk {start!r} with {len(done)} finished runs")
        ens = make(start)
        ens.load_state_dict(saved["ensemble"])
    except Exception as e:  # a layout of another version, or a damaged file that still unpickles
        checkpoint.reject(f"another layout ({e.__class__.__name__}: {e})")
        return None
    return done, start, ens


def chunk_size(built: Built, K: int) -> int:
    """Runs per ensemble: engine.chunk if set; else as many as the memory budget allows
    and, on a CPU, as keep the ensemble's optimizer working set within the last-level
    cache, in chunks of equal size.

    Past the cache, every elementwise pass (optimizer, activations) runs at memory
    speed, and one run at a time is faster than an ensemble (README: Performance);
    on a GPU only the memory budget applies.
    """
    engine = built.engine
    if not engine.batched:
        return 1
    if engine.chunk > 0:
        return min(K, engine.chunk)
    fp = footprint(built)
    limit = int(engine.max_memory_gb * 2**30 // fp.bytes_per_run)
    if built.device.type == "cpu":
        limit = min(limit, last_level_cache() // fp.working_set_per_run)
    limit = max(1, min(K, limit))
    chunks = math.ceil(K / limit)
    return math.ceil(K / chunks)


class MemoryLimitError(UserError, ValueError):
    """One run of the job cannot fit in the memory it may use."""


def check_fits(built: Built, label: str) -> None:
    """Refuse, before any training, a run whose estimated memory exceeds engine.max_memory_gb or the device's.

    The ensemble is sized to the budget (`chunk_size`), but a single run is never
    split: without this check it allocates until the system's OOM killer acts.
    `label` names the job's scale in the message (width, depth, batch).
    """
    need = footprint(built).bytes_per_run
    budget = built.engine.max_memory_gb * 2**30
    total = device_memory(built.device)
    if need <= min(budget, total):
        return
    over = f"engine.max_memory_gb={built.engine.max_memory_gb:g}" if budget < total else "this machine's memory"
    raise MemoryLimitError(
        f"{label}: one run needs about "
        f"{need / 2**30:.1f} GiB (estimated), more than {over} ({min(budget, total) / 2**30:.1f} GiB; "
        f"{built.device.type} has {total / 2**30:.1f} GiB); use a smaller width, depth or batch"
        + (", or raise engine.max_memory_gb" if budget < total else "")
    )


def device_memory(device: torch.device) -> int:
    """Bytes of memory on the device: the GPU's, or this machine's physical memory."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).total_memory
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):  # not POSIX: nothing to compare against
        return 2**62


@dataclass
class Footprint:
    weights: int  # trained numbers of one run
    outputs: int  # numbers the layers output for one example
    element: int  # bytes per number
    batch: int

    @property
    def working_set_per_run(self) -> int:
        """What every step streams through: for the optimizer, weight, gradient, two moments
        and direction; for the forward and backward, every layer's output at the batch size.
        In an MLP the weights dominate; in a conv net the activations."""
        return (5 * self.weights + self.outputs * self.batch) * self.element

    @property
    def bytes_per_run(self) -> int:
        """Training memory: the working set plus every layer output twice more (what
        backward saves, its gradient): three copies of the activations in all."""
        return self.working_set_per_run + 2 * self.outputs * self.batch * self.element + 1


def footprint(built: Built) -> Footprint:
    """One run's sizes, measured by a forward pass on the meta device (nothing allocated)."""
    x, _ = built.task.sample(torch.Generator().manual_seed(0), 1)  # one example: its shape, dtype
    dtype = built.dtype
    with torch.device("meta"):
        model = built.new_model(built.new_param(), 1)
    model.to(dtype=dtype)
    outputs = []
    leaves = [m for m in model.modules() if not any(True for _ in m.children())]
    hooks = [m.register_forward_hook(lambda mod, inp, out: outputs.append(out.numel())) for m in leaves]
    with torch.no_grad():
        model(x.to("meta"))
    for h in hooks:
        h.remove()
    weights = sum(p.numel() for p in model.parameters())
    return Footprint(weights, sum(outputs), torch.finfo(dtype).bits // 8, built.train.batch_size)


def last_level_cache() -> int:
    """Bytes of the CPU's largest cache (Linux sysfs), or 32 MiB when it cannot be read."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        unit = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        try:
            sizes.append(int(text.rstrip("KMG")) * unit)
        except ValueError:
            continue
    return max(sizes, default=32 * 2**20)


class Ensemble:
    """K runs of one configuration trained in lockstep, one step at a time."""

    def __init__(self, built: Built, runs: list[Run]) -> None:
        self.built, self.train, self.runs, self.task = built, built.train, runs, built.task
        device, dtype = built.device, built.dtype
        self.K, self.steps, self.device = len(runs), self.train.steps, device
        # Each per-run key's values, (K,) float64 on the device: the options that take one
        # value per run get these in place of their scalar (`build.per_run`).
        self.values = per_run_values(runs, device)
        self.param = built.new_param(self.values)
        self.model = built.new_model(self.param, self.K)
        self.param.initialize(self.model, [r.seed for r in runs])
        self.model.to(device=device, dtype=dtype)
        self.slots = self.param.slots(self.model)
        self.tensors = [s.tensor for s in self.slots]
        self.opt = built.new_optimizer(self.slots, self.values)
        self.optim = built.optim_options(self.values)  # what `decays` reads (weight_decay)

        seeds = list(dict.fromkeys(r.seed for r in runs))
        self.gens = [torch.Generator().manual_seed(data_seed(s)) for s in seeds]  # on the CPU (`Task.sample`)
        # (K,) index of each run's seed, used only when runs have different seeds
        self.seed_index = torch.tensor([seeds.index(r.seed) for r in runs], device=device)

        self.lr_alive = torch.tensor([2.0**r.log2_lr for r in runs], device=device, dtype=dtype)  # 0 once frozen
        self.alive = torch.ones(self.K, dtype=torch.bool)  # host copy, updated at checks
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
        with matmul_precision(train.dtype.value, self.device):
            with autocast(train.dtype.value, self.device):
                logits = self.model(x)  # (K, B, C), or (K, B, T, V) for tokens
                losses = self.task.losses(logits, y).to(self.history.dtype)  # (K,)
            self.history[:, t] = losses.detach()
            grads = torch.autograd.grad(losses.sum(), self.tensors)
        factor = lr_factor(train.schedule.value, t, self.steps, train.warmup_steps)
        with torch.no_grad():
            directions = self.opt.directions(grads)
            updates = self.param.updates(self.slots, directions, self.lr_alive * factor)
            apply_updates(self.slots, updates, self.param.decays(self.slots, self.lr_alive, factor, self.optim))
        self.step_index += 1

    def check(self) -> None:
        """Read the losses since the last check (the host sync) and freeze runs that diverged."""
        dead = _check(self.history, self.checked, self.step_index, self.alive, self.diverged_step, self.train.diverge_factor)
        if dead:
            _freeze(dead, self.slots, self.opt, self.lr_alive)
        self.checked = self.step_index

    def state_dict(self) -> dict:
        return {
            "tensors": [t.detach().clone() for t in self.tensors],
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
        }

    @torch.no_grad()
    def load_state_dict(self, state: dict) -> None:
        dsts, srcs = self.tensors + list(self.opt.state), state["tensors"] + state["opt_state"]
        if len(dsts) != len(srcs) or len(self.gens) != len(state["gens"]):
            raise ValueError(f"{len(srcs)} saved tensors for {len(dsts)}")
        for dst, src in zip(dsts, srcs):
            if dst.shape != src.shape:
                raise ValueError(f"a saved tensor of shape {tuple(src.shape)} for one of {tuple(dst.shape)}")
            dst.copy_(src)
        self.opt.t = state["opt_t"]
        for g, s in zip(self.gens, state["gens"]):
            g.set_state(s)
        self.lr_alive.copy_(state["lr_alive"])
        self.alive.copy_(state["alive"])
        self.diverged_step = list(state["diverged_step"])
        self.history.copy_(state["history"])
        self.param.load_state_dict(_to(state["param"], self.device))
        self.step_index = self.checked = self.reported = state["step_index"]

    def results(self) -> list[RunResult]:
        return _results(self.train, self.runs, self.task, self.model, self.history, self.alive, self.diverged_step)


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
def _freeze(dead: list[int], slots, opt, lr_alive: Tensor) -> None:
    """Stop dead runs for good: zero LR, and finite (zero) weights and optimizer state."""
    idx = torch.tensor(dead, device=lr_alive.device)
    lr_alive[idx] = 0
    for t in [s.tensor for s in slots] + list(opt.state):
        t[idx] = 0


@torch.no_grad()
def _results(train, runs, task: Task, model, history: Tensor, alive: Tensor, diverged_step) -> list[RunResult]:
    K, steps = history.shape
    hist = history.cpu().double()
    window = max(1, math.ceil(train.final_window * steps))
    final = hist[:, steps - window :].mean(1)
    eval_loss = eval_acc = None
    ev = task.eval_set()
    if ev is not None:
        with precision(train.dtype.value, history.device):
            eval_loss, eval_acc = _evaluate(model, task, *ev)
    keep = sorted(set(torch.linspace(0, steps - 1, min(steps, train.history_points)).round().long().tolist()))

    out = []
    for k, run in enumerate(runs):
        ok = bool(alive[k])
        stop = steps if ok else diverged_step[k] + 1
        idx = [i for i in keep if i < stop]
        if not ok and (not idx or idx[-1] != stop - 1):
            idx.append(stop - 1)  # always keep the step where it diverged
        losses = [_finite(hist[k, i]) for i in idx]
        out.append(
            RunResult(
                log2_lr=round(run.log2_lr, 10),
                lr=2.0**run.log2_lr,
                seed=run.seed,
                initial_loss=_finite(hist[k, 0]),
                final_loss=float(final[k]) if ok else None,
                diverged=not ok,
                diverged_step=None if ok else diverged_step[k],
                eval_loss=float(eval_loss[k]) if ok and eval_loss is not None else None,
                eval_acc=float(eval_acc[k]) if ok and eval_acc is not None else None,
                history_step=idx,
                history_loss=losses,
                grid=dict(run.grid),
            )
        )
    return out


def _evaluate(model, task: Task, x: Tensor, y: Tensor, predictions: int = 1024) -> tuple[Tensor, Tensor]:
    """Held-out mean loss and accuracy of each run, (K,) each, on the host.

    Every example holds the same number of predictions (1, or T for tokens); chunks
    of about `predictions` of them bound the memory of the logits.
    """
    chunk = max(1, predictions // y[0].numel())
    loss_sum = correct = 0
    for i in range(0, len(y), chunk):
        logits = model(x[i : i + chunk])  # (K, n, C) or (K, n, T, V)
        n = len(y[i : i + chunk])
        loss_sum = loss_sum + task.losses(logits, y[i : i + chunk]).double() * n
        correct = correct + task.correct(logits, y[i : i + chunk])
    return (loss_sum / len(y)).cpu(), (correct.double() / y.numel()).cpu()


def _finite(v: Tensor) -> float | None:
    v = float(v)
    return v if math.isfinite(v) else None


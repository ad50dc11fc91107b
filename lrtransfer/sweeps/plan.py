"""A sweep seen before it runs (`lrtransfer sweep --plan`, `lrtransfer.plan(...)`): its jobs, which are done, and what the rest costs.

The lrtransfer sweeper calls `survey` instead of launching when asked for a plan
(`lrtransfer sweep --plan`, `--cfg job`): every check of a real sweep runs, by the
same function (`multirun.check_jobs`), so the plan lists exactly the jobs a sweep
would run and refuses the same bad input (a value, a model too big for memory, a
missing GPU or dataset, a folder that cannot be written). Nothing is trained or
written: data a sweep would download is not fetched (nor checked), a token cache a sweep
would make (data=hf_disk) is not made (the plan says so, and times the jobs on random ids
of the same vocabulary), and a folder made to test it is removed; a dataset that caches
what it generates (MNIST-1D) may fill its cache, as the sweep would. A job with a checkpoint counts only the run-steps left.

The time estimate (`estimate`) prices each job by its own model's rate on this machine,
in seconds per run-step (one LR run, one training step): the finished jobs of the same
model under the results folder (the same config but for its LRs, seeds and steps, on
the same device and threads), else a few steps of its ensemble timed here. A nanoGPT
is not priced as the demo's MLP, and the plan says which rate each model got.
"""

from __future__ import annotations

import fcntl
import functools
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lrtransfer.config import run_steps, runs_per_job
from lrtransfer.store import iter_records, read_record

LOCK_NAME = ".lock"  # the file a running job holds an flock on (lrtransfer.sweeps.job.job_lock)


@dataclass
class PlanEntry:
    varying: str  # the overrides that tell this job from the others of the sweep
    job_id: str
    folder: Path
    status: str  # done | reruns (done, and --rerun) | running | failed (will be retried) | resumes (from its checkpoint) | missing
    run_steps: int  # K runs x training steps, less those a checkpoint it resumes from has done
    runs: int = 0  # K: LRs x values of `grid.<key>` x seeds, one ensemble


@dataclass
class Rate:
    """A model's seconds per run-step on this machine, and where it comes from."""

    seconds_per_run_step: float
    source: str  # "N finished job(s) of it" | "timed: N step(s) here"
    jobs: list[str] = field(default_factory=list)  # the varying overrides of the jobs to run it prices


@dataclass
class Plan:
    jobs: list[PlanEntry] = field(default_factory=list)
    first_config: DictConfig | None = None  # the first job's composed config, without `hydra`
    adaptive: list[str] = field(default_factory=list)  # an adaptive sweep's round and budget, said first
    configs: dict = field(default_factory=dict, repr=False)  # job id -> (composed config, validated config)
    notes: list[str] = field(default_factory=list)  # said last: what this machine makes of the jobs' settings, what the plan left to the sweep

    @functools.cached_property
    def rates(self) -> dict[str, Rate]:
        """Job id (of each job to run) -> its model's rate (`estimate`; timing runs once, when asked)."""
        return estimate(self.todo, self.configs)

    @property
    def todo(self) -> list[PlanEntry]:
        return [j for j in self.jobs if j.status in ("missing", "resumes", "failed", "reruns")]

    @property
    def run_steps_todo(self) -> int:
        return sum(j.run_steps for j in self.todo)

    @property
    def estimate_s(self) -> float | None:
        todo = self.todo
        if not todo or any(j.job_id not in self.rates for j in todo):
            return None
        return sum(j.run_steps * self.rates[j.job_id].seconds_per_run_step for j in todo)


def survey(sweeper, job_overrides: list[list[str]]) -> Plan:
    """Every check the sweep makes (`multirun.check_jobs`: the same function), writing nothing;
    each job classified by what is on disk, and counted by the run-steps it has left; under
    `--rerun` a finished job is one to run again ("reruns"), as the sweep would."""
    from lrtransfer.sweeps.multirun import check_jobs

    plan = Plan()
    jobs = check_jobs(sweeper, job_overrides, rerun=False, writing=False)
    for job in jobs:
        if plan.first_config is None:
            plan.first_config = OmegaConf.masked_copy(job.cfg, [k for k in job.cfg if k != "hydra"])
        status, left = status_of(job.folder), run_steps(job.typed)
        if status == "done" and sweeper.rerun:
            status = "reruns"
        if status in ("missing", "failed", "reruns"):
            done = checkpointed_steps(job.folder, job.typed, sweeper.rerun)
            if done is not None:
                status, left = ("resumes" if status == "missing" else status), left - done
        plan.jobs.append(PlanEntry(job.varying or "(the only job)", job.folder.name, job.folder, status, left,
                                   runs_per_job(job.typed)))
        plan.configs[job.folder.name] = (job.cfg, job.typed)
    plan.notes = machine_notes([typed for _, typed in plan.configs.values()]) + data_notes(
        [j.typed for j in jobs if j.folder.name in {p.job_id for p in plan.todo}])
    return plan


def data_notes(configs) -> list[str]:
    """What the plan did not do for the data of the jobs to run that their sweep will (make a token cache)."""
    from lrtransfer.options.data import plan_note

    data = {repr(c.data): c.data for c in configs}
    return [n for n in dict.fromkeys(plan_note(d) for d in data.values()) if n]


def checkpointed_steps(folder: Path, typed, rerun: bool = False) -> int | None:
    """Run-steps the job's `checkpoint.pt` has done, which a re-run does not do again; None without
    one it would resume from (none, unreadable, or of other runs; under --rerun, one of another
    origin, `FileCheckpoint.only_own`: the job starts afresh)."""
    from lrtransfer.sweeps.checkpoint import NAME, steps_done
    from lrtransfer.sweeps.job import origin, runs_of

    path = folder / NAME
    if not path.exists():
        return None
    return steps_done(path, runs_of(typed), typed.train.steps, origin(folder, True) if rerun else None)


def machine_notes(configs) -> list[str]:
    """What this machine makes of the jobs' settings: bf16 without a bf16 matrix unit (once per dtype)."""
    from lrtransfer.training.build import DeviceError, select_device
    from lrtransfer.training.precision import bf16_note

    notes = []
    for kind, device in dict.fromkeys((c.train.dtype.value, c.engine.device) for c in configs):
        try:
            note = bf16_note(kind, select_device(device))
        except DeviceError:
            continue
        if note and note not in notes:
            notes.append(note)
    return notes


def status_of(folder: Path) -> str:
    record = folder / "record.json"
    if record.exists():
        try:
            return "done" if read_record(record)["status"] == "complete" else "failed"
        except Exception:  # an unreadable record is recomputed by the sweep
            return "missing"
    return "running" if lock_held(folder) else "missing"


def lock_held(folder: Path) -> bool:
    """True while a job holds the folder's lock (a shared probe, released at once)."""
    path = folder / LOCK_NAME
    if not path.exists():
        return False
    with open(path) as f:
        try:
            fcntl.flock(f, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
    return False


def record_run_steps(record: dict) -> int:
    return len(record.get("runs") or []) * int(record["config"]["train"]["steps"])


# ---------------------------------------------------------------- the time estimate
TIMED_STEPS = (2, 20, 0.5)  # steps timed after a warm-up one: at least 2, at most 20, until 0.5 s have passed


def estimate(todo: list[PlanEntry], configs: dict) -> dict[str, Rate]:
    """Each job's rate: its own model's finished jobs under the results folder (their wall time over
    their run-steps), else its ensemble timed here (`timed_rate`), once per model. `configs`: job
    id -> (composed config, validated config)."""
    keys = {j.job_id: model_key(*configs[j.job_id]) for j in todo}
    found = finished_rates({j.folder.parent.parent for j in todo}, set(keys.values()))
    rates: dict[tuple, Rate] = {}
    tasks: dict = {}  # each data config's task, built once
    for j in todo:
        key = keys[j.job_id]
        if key not in rates:
            rates[key] = found.get(key) or timed_rate(configs[j.job_id][1], tasks)
        rates[key].jobs.append(j.varying)
    return {j.job_id: rates[keys[j.job_id]] for j in todo}


def model_key(cfg: DictConfig, typed) -> tuple:
    """What sets a job's time per run-step: its config but for its LRs, seeds and steps (`semantic`,
    as its record's), the device and the threads it runs on."""
    from lrtransfer.config import semantic
    from lrtransfer.sweeps.job import thread_count

    job = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])  # Hydra's own keys resolve only in a job
    return _key(semantic(job), str(_device(typed.engine.device)), thread_count(typed.engine.threads))


def _key(semantic_config: dict, device: str, threads: int) -> tuple:
    same = {k: v for k, v in semantic_config.items() if k not in ("lr", "seed", "n_seeds")}
    same["train"] = {k: v for k, v in (same.get("train") or {}).items() if k != "steps"}
    return repr(sorted(same.items())), device, threads


def _device(spec: str):
    from lrtransfer.training.build import select_device

    return select_device(spec)


def finished_rates(roots: set[Path], wanted: set[tuple]) -> dict[tuple, Rate]:
    """Seconds per run-step of the finished jobs below `roots`, per model (`model_key`) of `wanted`."""
    from lrtransfer.config import semantic

    totals: dict[tuple, list] = {}
    for root in roots:
        for _, record in iter_records(root, warn=False) if root.is_dir() else ():
            try:
                n = record_run_steps(record) if record["status"] == "complete" else 0
                key = _key(semantic(record["config"]), str(record.get("device")), record.get("threads"))
            except (KeyError, TypeError, ValueError, AttributeError):  # another version's record: not this model's
                continue
            if n and record.get("wall_time_s") and key in wanted:
                t = totals.setdefault(key, [0.0, 0, 0])
                t[0], t[1], t[2] = t[0] + record["wall_time_s"], t[1] + n, t[2] + 1
    return {k: Rate(seconds / steps, f"{jobs} finished job(s) of it") for k, (seconds, steps, jobs) in totals.items()}


def timed_rate(typed, tasks: dict) -> Rate:
    """Seconds per run-step of a job's model, timed here: one ensemble of its runs (as many as the
    engine puts in one) steps once to warm up (allocation, first kernels), then `TIMED_STEPS`."""
    import time

    import torch

    from lrtransfer.sweeps.job import runs_of, thread_count
    from lrtransfer.training import build, engine
    from lrtransfer.training.memory import chunk_size

    def now() -> float:
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        return time.perf_counter()

    threads = torch.get_num_threads()
    torch.set_num_threads(thread_count(typed.engine.threads))
    try:
        device, dtype = _device(typed.engine.device), build.DTYPES[typed.train.dtype.value]
        if (repr(typed.data), dtype) not in tasks:
            tasks[repr(typed.data), dtype] = build.task(typed, device, dtype, writing=False)
        built = build.job(typed, device, data=tasks[repr(typed.data), dtype])
        runs = runs_of(typed)
        ensemble = engine.Ensemble(built, runs[: chunk_size(built, len(runs))])
        started = now()
        ensemble.step()
        first = now() - started  # all there is of a one-step job
        least, most, seconds = TIMED_STEPS
        n, started = 0, now()
        while n < min(most, typed.train.steps - 1) and (n < least or now() - started < seconds):
            ensemble.step()
            n += 1
        per_step = (now() - started) / n if n else first
    finally:
        torch.set_num_threads(threads)
    return Rate(per_step / ensemble.K, f"timed: {n or 1} step(s) here")


def format_duration(seconds: float) -> str:
    seconds = round(seconds)
    h, rest = divmod(seconds, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}"


def describe(plan: Plan) -> list[str]:
    """The plan as lines for a terminal: one per job, then the totals."""
    width = max((len(j.varying) for j in plan.jobs), default=0)
    lines = list(plan.adaptive)
    for study in dict.fromkeys(j.folder.parent for j in plan.jobs):
        jobs = [j for j in plan.jobs if j.folder.parent == study]
        counts = {s: sum(j.status == s for j in jobs) for s in ("done", "reruns", "running", "failed", "resumes",
                                                               "missing")}
        lines.append(f"{study}/: {len(jobs)} job(s): " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        for j in jobs:
            lines.append(f"  {j.status:<8} {j.varying:<{width}}  {j.run_steps:>9,} run-steps  {j.job_id}  K={j.runs}")
    todo = plan.todo
    total = f"to run: {len(todo)} job(s), {plan.run_steps_todo:,} run-steps (K runs x steps; K = LRs x seeds, x the values of a grid.<key>)"
    if not todo:
        return [*lines, "nothing to run: every job is done or running", *plan.notes]
    if plan.estimate_s is None:
        return [*lines, total, *plan.notes]
    return [*lines, f"{total}; ~{format_duration(plan.estimate_s)} in-process, at each model's own rate:",
            *rate_lines(plan), *plan.notes]


def rate_lines(plan: Plan) -> list[str]:
    """One line per model of the jobs to run: its rate, where it comes from, the jobs it prices."""
    out = []
    for rate in {id(r): r for r in plan.rates.values()}.values():
        jobs = ", ".join(rate.jobs[:3]) + (f" and {len(rate.jobs) - 3} more" if len(rate.jobs) > 3 else "")
        out.append(f"  {rate.seconds_per_run_step * 1e3:.3g} ms per run-step ({rate.source}): {jobs}")
    return out

"""A sweep seen before it runs (`lrtransfer sweep --plan`, `lrtransfer.plan(...)`): its jobs, which are done, and what the rest costs.

The lrtransfer sweeper calls `survey` instead of launching when asked for a plan
(`lrtransfer sweep --plan`, `--cfg job`): every job is composed and validated as
for a real sweep, so the plan lists exactly the jobs a sweep would run and refuses
the same bad input. Nothing is trained, prepared or written.

The time estimate divides work by a rate measured on this machine: the seconds per
run-step (one LR run, one training step) of the jobs already finished in the same
studies, else anywhere under the results folder. Jobs differ in size, so it is a
rough figure, and the plan says which jobs it was measured on.
"""

from __future__ import annotations

import fcntl
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from lrtransfer.config import ConfigError, inner_grid, validate
from lrtransfer.store import iter_records, job_dir, read_record

LOCK_NAME = ".lock"  # the file a running job holds an flock on (lrtransfer.sweeps.job.job_lock)


@dataclass
class PlanEntry:
    varying: str  # the overrides that tell this job from the others of the sweep
    job_id: str
    folder: Path
    status: str  # done | running | failed (will be retried) | missing
    run_steps: int  # K runs x training steps
    runs: int = 0  # K: LRs x values of `grid.<key>` x seeds, one ensemble


@dataclass
class Plan:
    jobs: list[PlanEntry] = field(default_factory=list)
    first_config: DictConfig | None = None  # the first job's composed config, without `hydra`
    seconds_per_run_step: float | None = None
    rate_from: str = ""  # which finished jobs the rate was measured on
    adaptive: list[str] = field(default_factory=list)  # an adaptive sweep's round and budget, said first
    notes: list[str] = field(default_factory=list)  # said last: what this machine makes of the jobs' settings

    @property
    def todo(self) -> list[PlanEntry]:
        return [j for j in self.jobs if j.status in ("missing", "failed")]

    @property
    def run_steps_todo(self) -> int:
        return sum(j.run_steps for j in self.todo)

    @property
    def estimate_s(self) -> float | None:
        return None if self.seconds_per_run_step is None else self.run_steps_todo * self.seconds_per_run_step


def survey(sweeper, job_overrides: list[list[str]]) -> Plan:
    """Compose and validate every job of the sweep; classify each by what is on disk."""
    loader = sweeper.hydra_context.config_loader
    common = set.intersection(*(set(o) for o in job_overrides)) if len(job_overrides) > 1 else set()
    plan, seen, typed_configs = Plan(), set(), []
    for overrides in job_overrides:
        cfg = loader.load_sweep_config(sweeper.config, list(overrides))
        varying = " ".join(o for o in overrides if o not in common)
        try:
            typed = validate(cfg)
        except ConfigError as e:
            raise ConfigError(f"{e} (job {varying})" if varying else str(e)) from None
        folder = job_dir(cfg)
        if folder.name in seen:
            continue
        seen.add(folder.name)
        typed_configs.append(typed)
        if plan.first_config is None:
            plan.first_config = OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"])
        plan.jobs.append(PlanEntry(varying or "(the only job)", folder.name, folder, status_of(folder), run_steps(typed), runs_per_job(typed)))
    plan.seconds_per_run_step, plan.rate_from = measured_rate({j.folder.parent for j in plan.jobs})
    plan.notes = machine_notes(typed_configs)
    return plan


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


def run_steps(typed) -> int:
    """A job's work: one run per LR of its grid, value of its `grid.<key>` and seed, each `train.steps` steps."""
    return runs_per_job(typed) * typed.train.steps


def runs_per_job(typed) -> int:
    """K: LRs x values of the second inner axis (1 without one) x seeds."""
    found = inner_grid(typed)
    return typed.n_seeds * len(typed.lr.values()) * (1 if found is None else len(found[1]))


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


def measured_rate(studies: set[Path]) -> tuple[float | None, str]:
    """Seconds per run-step of the finished jobs in `studies`, else anywhere under their results folder."""
    roots = [(sorted(studies), "in this study" if len(studies) == 1 else "in these studies"),
             (sorted({s.parent for s in studies}), "elsewhere under the results folder")]
    for folders, where in roots:
        seconds = steps = jobs = 0
        for folder in folders:
            if not folder.is_dir():
                continue
            for _, record in iter_records(folder, warn=False):
                n = record_run_steps(record) if record["status"] == "complete" else 0
                if n and record.get("wall_time_s"):
                    seconds, steps, jobs = seconds + record["wall_time_s"], steps + n, jobs + 1
        if steps:
            return seconds / steps, f"{jobs} finished job(s) {where}"
    return None, ""


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
        counts = {s: sum(j.status == s for j in jobs) for s in ("done", "running", "failed", "missing")}
        lines.append(f"{study}/: {len(jobs)} job(s): " + ", ".join(f"{n} {s}" for s, n in counts.items() if n))
        for j in jobs:
            lines.append(f"  {j.status:<8} {j.varying:<{width}}  {j.run_steps:>9,} run-steps  {j.job_id}  K={j.runs}")
    todo = plan.todo
    total = f"to run: {len(todo)} job(s), {plan.run_steps_todo:,} run-steps (K runs x steps; K = LRs x seeds, x the values of a grid.<key>)"
    if not todo:
        total = "nothing to run: every job is done or running"
    elif plan.estimate_s is not None:
        total += (f"; ~{format_duration(plan.estimate_s)} in-process at {plan.seconds_per_run_step * 1e3:.3g} ms "
                  f"per run-step (the mean of {plan.rate_from}; bigger jobs take longer per step)")
    else:
        total += "; no finished job here yet to measure this machine's rate on (run one, then ask again)"
    return [*lines, total, *plan.notes]

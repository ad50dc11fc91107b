"""An adaptive sweep: rounds of jobs, each chosen from what the rounds before it measured,
until every group's verdict is decided or the budget is spent (`--until-decided`).

The user's sweep gives the *base* jobs (one per scale of each group); what each round
adds to them (the LRs and seeds of `rounds.py`'s policy) becomes ordinary jobs, each one
LR block and one seed, planned, skipped when already done, and launched through the
configured launcher as one multirun. Every round's decision is made from the records of
the jobs planned in the rounds before it and nothing else, and the analysis is
deterministic, so a re-run of an interrupted sweep replays the same rounds from the
records already written and continues where it stopped, with the same records and the
same verdict as a sweep never interrupted (a wall-clock budget aside).
"""

from __future__ import annotations

import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

from omegaconf import OmegaConf

from lrtransfer.analysis.verdicts import verdict_text
from lrtransfer.config import ConfigError, recorded, validate
from lrtransfer.store import RECORD_NAME, job_dir, read_record
from lrtransfer.sweeps import rounds

# The keys each round's jobs set; a user's value for them is the base job's, replaced.
SET_HERE = ("lr.log2_min", "lr.log2_max", "lr.log2_step", "seed", "n_seeds")
WAIT_S = 0.5  # how often a job another sweep runs is looked at, while this one waits for it


@dataclass
class Base:
    """One job of the user's sweep: a scale of a group, before any LR or seed is chosen."""

    overrides: list[str]  # the user's, less SET_HERE
    typed: object  # the validated config
    index: int


@dataclass
class Cut:
    """A round the budget let train in part: a re-run with more budget replays the rounds before
    it and trains the rest of it first, so the next step is that rest, whatever was planned later."""

    index: int
    needs: int  # the budget that trains the whole round: run-steps before it + its cost
    left_out: list  # its requests not trained


@dataclass
class Trained:
    """One round of one group as it ended: what it trained and the interval after it."""

    index: int
    requests: list  # the round's `rounds.Request`s for this group
    run_steps: int  # their run-steps (jobs already planned by an earlier round cost nothing again)
    drift: float | None
    drift_ci: list | None
    verdict: str
    state: str  # what the group does next: refining | seeding, or how it ended


@dataclass
class GroupRun:
    """One group of the sweep as the rounds go: its scales' states, its jobs, its latest analysis."""

    axis: str
    fixed: dict
    bases: dict[float, Base]
    states: dict[float, rounds.ScaleState]
    jobs: list[Path] = field(default_factory=list)  # every job folder planned for it, in order
    records: dict[Path, dict] = field(default_factory=dict)  # each job's complete record, read once
    spent: int = 0  # run-steps of those jobs
    analysis: object = None  # the latest `analysis.Group`
    step: rounds.Step | None = None
    end: str | None = None  # decided | stuck | out of seeds | seeds copied | budget | failed
    cut: Cut | None = None  # the first round the budget cut short, if one was
    history: list[Trained] = field(default_factory=list)  # its rounds so far

    @property
    def settings(self) -> rounds.Settings:
        return settings_of(next(iter(self.bases.values())).typed)

    @property
    def label(self) -> str:
        return "  ".join(f"{k}={v}" for k, v in self.fixed.items())

    def cost(self, requests) -> int:
        """Run-steps of `requests`: each one's LRs x its scale's training steps."""
        return sum(len(rq.block.values()) * self.bases[rq.scale].typed.train.steps for rq in requests)

    def runs_per_seed(self) -> dict[float, int]:
        """Run-steps one more seed costs at each scale: its LRs x training steps."""
        return {sc: len(st.points()) * self.bases[sc].typed.train.steps for sc, st in self.states.items()}


@dataclass
class Round:
    """What the CLI prints as a round ends."""

    index: int
    groups: list[GroupRun]
    spent: int  # run-steps of every job planned so far
    budget: int | None
    lines: list[str] = field(default_factory=list)  # budget trims, failures


@dataclass
class Outcome:
    """How an adaptive sweep ended, group by group."""

    rounds: int
    spent: int
    budget: int | None
    groups: list[GroupRun]
    lines: list[str] = field(default_factory=list)


def requested(sweeper, job_overrides: list[list[str]]) -> bool:
    """Whether the sweep's config asks for rounds (`adaptive.enabled`, set by `--until-decided`)."""
    from lrtransfer.sweeps.multirun import compose

    return bool(OmegaConf.select(compose(sweeper, job_overrides[0]), "adaptive.enabled", default=False))


def run(sweeper, job_overrides: list[list[str]], *, on_round=None):
    """Run the rounds (or, for `--plan`, replay the finished ones and plan the next); return the
    `SweepReport` with its `adaptive` outcome, or the `Plan` of the next round."""
    from lrtransfer.sweeps.multirun import SweepReport

    groups, settings, metric, budget_s = _groups(sweeper, job_overrides)
    budget = groups[0].bases[next(iter(groups[0].bases))].typed.adaptive.budget
    report = SweepReport()
    plan_only = sweeper.action == "plan"
    started = time.monotonic()
    requests = {id(g): [rq for sc in g.states for rq in rounds.requests_of(sc, g.states[sc], g.states[sc].blocks, "coarse")]
                for g in groups}
    first = sum(g.cost(requests[id(g)]) for g in groups)
    if budget is not None and first > budget:  # a round is cut only after the first: that one measures where to go
        raise ConfigError(f"--budget {budget:,} run-steps is below round 1's {first:,} (the coarse grid at every "
                          f"scale, which every later round starts from); give --budget {first:,} or more")
    index, lines = 0, []
    while any(requests.values()):
        index += 1
        jobs = [(g, rq, _job_overrides(g.bases[rq.scale], rq)) for g in groups for rq in requests[id(g)]]
        if plan_only:
            from lrtransfer.sweeps.plan import survey

            survey_ = survey(sweeper, [o for _, _, o in jobs])
            if survey_.todo:
                survey_.adaptive = _plan_lines(index, groups, jobs, budget, budget_s)
                return survey_
            folders = [j.folder for j in survey_.jobs]
        else:
            folders = _run_round(sweeper, [o for _, _, o in jobs], report)
        folders = folders if len(folders) == len(jobs) else [_folder(sweeper, o) for _, _, o in jobs]
        before = {id(g): g.spent for g in groups}
        for (g, rq, _), folder in zip(jobs, folders):
            rounds.apply(g.states, [rq])
            if folder not in g.jobs:
                g.jobs.append(folder)
                g.spent += g.cost([rq])
        failed = _analyse(groups, metric, settings)
        lines = []
        if failed:
            lines.append(failed)
            for g in groups:
                g.end = g.end or "failed"
        requests = {id(g): (g.step.requests if g.step and not g.end else []) for g in groups}
        for g in groups:
            if not g.end and g.step and not g.step.requests:
                g.end = g.step.state
        spent = sum(g.spent for g in groups)
        requests, trimmed = _within_budget(groups, requests, spent, budget, budget_s, started, index + 1)
        lines += trimmed
        for g in groups:
            mine = [rq for h, rq, _ in jobs if h is g]
            if mine and g.analysis is not None:
                a = g.analysis
                g.history.append(Trained(index, mine, g.spent - before[id(g)], a.drift, a.drift_ci,
                                         verdict_text(a.verdict, a.leans), g.end or (g.step.state if g.step else "")))
        if on_round is not None and not plan_only:
            on_round(Round(index, groups, spent, budget, lines))
    if plan_only:
        from lrtransfer.sweeps.plan import Plan

        return Plan(adaptive=[f"adaptive sweep: all {index} round(s) are done; every group ended "
                              f"({', '.join(sorted({g.end or '?' for g in groups}))})"])
    report.adaptive = Outcome(index, sum(g.spent for g in groups), budget, groups, lines)
    return report


def _groups(sweeper, job_overrides):
    """The user's jobs, validated and grouped as the analysis will group their records."""
    from lrtransfer.analysis import records
    from lrtransfer.analysis.grouping import partition, scale_value

    from lrtransfer.sweeps.multirun import compose

    bases, fake = [], []
    for i, overrides in enumerate(job_overrides):
        cfg = compose(sweeper, overrides)
        typed = validate(cfg)
        _check_base(typed, overrides)
        resolved = recorded(OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]),
                                                   resolve=True, enum_to_str=True))  # grouped as its records will be
        bases.append(Base([o for o in overrides if _key(o) not in SET_HERE], typed, i))
        # nothing measured yet, so no loss (the grouping counts seeds with equal losses as one)
        fake.append({"job_id": str(i), "status": "complete", "config": resolved,
                     "runs": [{"seed": typed.seed, "lr": 1.0, "log2_lr": 0.0, "final_loss": None, "diverged": False}]})
    _check_same_settings(bases)
    first = bases[0].typed
    settings = settings_of(first)
    groups = []
    for axis, fixed, sub, _ in partition(records.table(fake)):
        members = {}
        for _, row in sub.iterrows():
            scale = scale_value(row[axis])
            if scale in members:
                raise ConfigError(f"an adaptive sweep chooses its seeds itself (from seed={first.seed} on), but two jobs "
                                  f"share {axis}={scale:g} ({' '.join(fixed_part(fixed))}): drop seed=... from the sweep")
            members[scale] = bases[int(row["job_id"])]
        if len(members) < 2:
            raise ConfigError(f"an adaptive sweep needs two or more values of the scale per group to measure a drift; "
                              f"{' '.join(fixed_part(fixed)) or 'the sweep'} has {axis}={next(iter(members)):g} only "
                              f"(e.g. width=64,256,1024)")
        g = GroupRun(axis, fixed, dict(sorted(members.items())), {})
        g.states = rounds.first_round(list(g.bases), first.seed, settings)
        groups.append(g)
    return groups, settings, first.adaptive.metric.value, first.adaptive.budget_s


def fixed_part(fixed: dict) -> list[str]:
    return [f"{k}={v}" for k, v in fixed.items()]


def settings_of(typed) -> rounds.Settings:
    a = typed.adaptive
    return rounds.Settings(log2_min=typed.lr.log2_min, log2_max=typed.lr.log2_max, coarse_step=a.coarse_step,
                           resolution=typed.lr.resolution, max_seeds=a.max_seeds, extend=a.extend)


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _check_base(typed, overrides) -> None:
    from lrtransfer.config import inner_grid

    if typed.n_seeds != 1:
        raise ConfigError(f"n_seeds={typed.n_seeds}: an adaptive sweep adds seeds itself, one job each, from "
                          f"seed={typed.seed} on; drop n_seeds")
    found = inner_grid(typed)
    if found is not None:
        raise ConfigError(f"grid.{found[0]}: an adaptive sweep refines the LR alone; run the second axis as a fixed "
                          "sweep (without --until-decided)")


def _check_same_settings(bases: list[Base]) -> None:
    first = bases[0].typed
    for b in bases[1:]:
        if (b.typed.adaptive, b.typed.lr.resolution) != (first.adaptive, first.lr.resolution):
            raise ConfigError("adaptive.* and lr.resolution must be the same for every job of an adaptive sweep "
                              f"(job {' '.join(b.overrides)} differs)")


# ---------------------------------------------------------------- one round
def _job_overrides(base: Base, rq: rounds.Request) -> list[str]:
    b = rq.block
    return [*base.overrides, f"lr.log2_min={b.log2_min!r}", f"lr.log2_max={b.log2_max!r}",
            f"lr.log2_step={b.step!r}", f"seed={rq.seed}", "n_seeds=1"]


def _folder(sweeper, overrides: list[str]) -> Path:
    from lrtransfer.sweeps.multirun import compose

    return job_dir(compose(sweeper, overrides))


def _run_round(sweeper, job_overrides: list[list[str]], report) -> list[Path]:
    """Plan the round's jobs (validate, skip the finished), launch the rest as one multirun; the
    folder of every job, in order."""
    from lrtransfer.sweeps.multirun import plan, run_jobs

    folders: list[Path] = []
    todo, skipped, studies = plan(sweeper, job_overrides, rerun=sweeper.rerun, folders=folders)
    report.total += len(todo) + skipped
    report.skipped += skipped
    report.study_dirs = list(dict.fromkeys([*report.study_dirs, *studies]))
    while todo:
        start = len(report.returns)
        run_jobs(sweeper, todo, report, first_index=start)
        busy = [(job, r) for job, r in zip(todo, report.returns[start:]) if r.get("status") == "busy"]
        todo = [job for job, r in busy if not _finished_elsewhere(job.folder, r)]
        report.returns = [r for r in report.returns if r.get("status") != "busy"]  # left to the rerun or done
    return folders


def _finished_elsewhere(folder: Path, returned: dict) -> bool:
    """Wait for a job another sweep is running (sharing the results folder) to end there: True when
    it left a complete record (counted as done), False when it stopped without one (this sweep
    then trains it). The next round needs every job of this one."""
    from lrtransfer.store import is_complete
    from lrtransfer.sweeps.plan import lock_held
    from lrtransfer.training import stop

    while lock_held(folder):
        if stop.requested():
            raise stop.Interrupted("interrupted while waiting for a job another sweep is running; every finished "
                                   "record is kept: re-run the same command to go on")
        time.sleep(WAIT_S)
    if is_complete(folder):
        returned["status"] = "done"
        return True
    return False


def _analyse(groups: list[GroupRun], metric: str, settings: rounds.Settings) -> str | None:
    """Each open group's records analysed and its next step decided; a line when a job has no
    complete record (failed, or running in another sweep), which stops the sweep."""
    from lrtransfer import analysis

    for g in groups:
        if g.end:
            continue
        for folder in g.jobs:
            if folder in g.records:  # a complete record does not change: each round reads only the new ones
                continue
            path = folder / RECORD_NAME
            rec = read_record(path) if path.exists() else None
            if rec is None or rec["status"] != "complete":
                why = "no record: it is running in another sweep, or was cut off" if rec is None else rec.get("error")
                return (f"job {folder.name} has no complete record ({why}); the adaptive sweep stops here: "
                        "re-run the same command once it is fixed, every finished job is kept")
            g.records[folder] = rec
        with warnings.catch_warnings():  # what the grouping warns of, the summary after the rounds says once
            warnings.simplefilter("ignore", analysis.SkippedRecordWarning)
            found = analysis.groups(analysis.records.table(g.records[f] for f in g.jobs), metric)
        g.analysis = found[0]
        g.step = rounds.next_step(g.analysis, g.states, settings)
    return None


# ---------------------------------------------------------------- the budget
def _within_budget(groups, requests, spent, budget, budget_s, started, index):
    """Round `index` cut to what the budget leaves (in run-steps, or in seconds at the rate
    measured so far); a group whose next step does not fit at all ends undecided ("budget"),
    and the first round of a group trained in part is kept as its `cut`."""
    lines = []
    left = None if budget is None else budget - spent
    if budget_s is not None:
        rate = _seconds_per_run_step(groups)
        left_s = budget_s - (time.monotonic() - started)
        by_time = max(0.0, left_s) / rate if rate else (math.inf if left_s > 0 else 0.0)
        left = by_time if left is None else min(left, by_time)
    out = {}
    for g in groups:
        asked = requests[id(g)]
        kept = rounds.trim(asked, g.cost, left)
        if left is not None:
            left -= g.cost(kept)
        if asked and not kept:
            g.end = "budget"
        elif len(kept) < len(asked):
            lines.append(f"{g.label}: the budget leaves room for part of the next round only")
            if g.cut is None:
                g.cut = Cut(index, g.spent + g.cost(asked), [rq for rq in asked if not any(rq is k for k in kept)])
        out[id(g)] = kept
    return out, lines


def _seconds_per_run_step(groups) -> float | None:
    seconds = steps = 0.0
    for g in groups:
        for rec in g.records.values():
            if rec.get("wall_time_s"):
                seconds += rec["wall_time_s"]
                steps += len(rec["runs"]) * int(rec["config"]["train"]["steps"])
    return seconds / steps if steps else None


def _plan_lines(index: int, groups: list[GroupRun], jobs, budget, budget_s) -> list[str]:
    steps = sum(g.cost([rq]) for g, rq, _ in jobs)
    limit = " and ".join(x for x in (f"{budget:,} run-steps" if budget else "", f"{budget_s:g} s" if budget_s else "") if x)
    return [f"adaptive sweep: round {index} trains {len(jobs)} job(s), {steps:,} run-steps; later rounds follow from "
            f"what it measures (budget: {limit or 'none, adaptive.max_seeds seeds per scale at most'})"]

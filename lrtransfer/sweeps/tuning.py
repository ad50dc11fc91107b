"""`lrtransfer tune`: a search at the base scale, in rounds, each round one batched ensemble.

The user's sweep gives one job (the base scale) and the ranges (`search.<key>=[lo,hi]`, the global
LR's `search.lr` by default the LR grid's span). Each round trains two jobs whose runs are rows
(`points`): the search's points (`sweeps/search.py`'s policy: the global LR and every searched key)
and, for the same budget, an LR-only twin (the same policy over the LR alone, every other key at
the job's own value): what the search is measured against. After the last round the best point of
each is trained again at `search.seeds` fresh seeds (`confirm`), so that their losses and the gain
come with an interval free of the winner's curse (the best of many draws at one seed is
optimistic).

Every round is chosen from the records of the rounds before it (the losses at seed `seed`) and a
generator seeded by the round, so a re-run of an interrupted search replays the finished rounds
from their records and goes on where it stopped, as an adaptive sweep does (`adaptive.py`, whose
round runner it uses). `tune.json` in the study folder keeps the base job's overrides (a transfer
check reads them: `sweeps/transfer.py`) and each round's state, for the readers.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from lrtransfer.config import ConfigError, has_points, search_ranges, validate
from lrtransfer.store import RECORD_NAME, read_record, study_dir, write_json_atomic
from lrtransfer.sweeps import search
from lrtransfer.sweeps.search import LR, Dim, Space, State

TUNE_NAME = "tune.json"
DEFAULT_ROUNDS = 4  # rounds without a budget
# The keys a tune's base job may not set: the search sets the runs itself
SET_HERE = ("points", "n_seeds", "search.enabled")


@dataclass
class Tune:
    """A search as it goes: the base job, its space, each arm's state, what was spent."""

    overrides: list[str]  # the base job's
    typed: object
    space: Space  # the global LR and every searched key
    lr_space: Space  # the LR alone (the baseline's)
    search: State = field(default_factory=State)
    baseline: State = field(default_factory=State)
    rounds: list[dict] = field(default_factory=list)
    spent: int = 0  # run-steps of the search arm (the baseline spends as much)
    confirm: str | None = None  # the confirming job's id


def requested(sweeper, job_overrides: list[list[str]]) -> bool:
    from omegaconf import OmegaConf

    from lrtransfer.sweeps.multirun import compose

    return bool(OmegaConf.select(compose(sweeper, job_overrides[0]), "search.enabled", default=False))


def space_of(typed) -> tuple[Space, Space]:
    """(the search's space: the LR first, then each searched key; the LR alone)."""
    ranges = search_ranges(typed)
    lr = ranges.pop(LR, None) or [2.0**typed.lr.log2_min, 2.0**typed.lr.log2_max]
    if lr[0] >= lr[1]:
        raise ConfigError(f"the LR grid spans one LR (lr.log2_min={typed.lr.log2_min:g} = lr.log2_max): give "
                          "search.lr=[lo,hi] for the search's LR range")
    if not ranges:
        raise ConfigError("nothing to search beside the LR: give one or more ranges search.<key>=[lo,hi] "
                          "(search.hp.hidden.lr_mult=[0.25,4], search.optim.weight_decay=[0,0.1])")
    dims = (Dim(LR, *lr), *(Dim(k, *v) for k, v in ranges.items()))
    return Space(dims), Space(dims[:1])


def default_value(typed, key: str) -> float:
    """The job's own value of a per-run key: what the LR-only baseline trains with (a per-module
    multiplier: its `hp` value, else 1; a beta: its `hp` value, else the optimizer's)."""
    parts = key.split(".")
    if parts[0] == "hp":
        own = getattr(getattr(typed.hp, parts[1]), parts[2])
        if own is not None:
            return float(own)
        return float(getattr(typed.optim, parts[2])) if parts[2] in search.BETAS else 1.0
    return float(getattr(getattr(typed, parts[0]), parts[1]))


def points_override(keys: list[str], log2_lrs: list[float], rows: list[list[float]], kind: str, round_: int,
                    centre: list[float] = (), reference: list[float] = ()) -> str:
    """The job's runs as one override: `points={keys: [...], log2_lr: [...], values: [[...], ...], ...}`."""
    def numbers(xs) -> str:
        return "[" + ",".join(repr(float(x)) for x in xs) + "]"

    quoted = ",".join(f"'{k}'" for k in keys)
    return (f"points={{keys:[{quoted}],log2_lr:{numbers(log2_lrs)},values:[{','.join(map(numbers, rows))}],"
            f"kind:{kind},round:{round_},centre:{numbers(centre)},reference:{numbers(reference)}}}")


def log2_of(lr: float) -> float:
    return round(math.log2(lr), 6)


def run(sweeper, job_overrides: list[list[str]], *, on_round=None):
    """Run the rounds, then the confirming job; return the `SweepReport` (its `tuning`: the study folder)."""
    from lrtransfer.sweeps.multirun import SweepReport

    tune = _base(sweeper, job_overrides)
    typed = tune.typed
    s = typed.search
    per_round = s.round_size * typed.train.steps
    if s.budget is not None and s.budget < per_round:
        raise ConfigError(f"--budget {s.budget:,} run-steps is below one round's {per_round:,} (search.round_size="
                          f"{s.round_size} points x train.steps={typed.train.steps}); give --budget {per_round:,} or "
                          "more, or a smaller search.round_size")
    rounds = s.budget // per_round if s.budget is not None else (None if s.budget_s is not None else DEFAULT_ROUNDS)
    report = SweepReport()
    folder = study_dir(typed.results_dir, typed.name)
    report.tuning = folder
    started, index = time.monotonic(), 0
    while rounds is None or index < rounds:
        if rounds is None and index and time.monotonic() - started >= s.budget_s:
            break
        index += 1
        jobs, search_rows, base_rows = _round_jobs(tune, index)
        if sweeper.action == "plan":
            plan = _plan_round(sweeper, jobs, index)
            if plan is not None:
                return plan
            folders = [_folder(sweeper, o) for o in jobs]
        else:
            folders = _run(sweeper, jobs, report)
        losses = [_losses(f, keys, rows, s.metric) for f, keys, rows in
                  zip(folders, (tune.space.keys[1:], []), (search_rows, base_rows))]
        tune.search = search.update(tune.search, tune.space.units(search_rows), losses[0], s.shrink)
        tune.baseline = search.update(tune.baseline, tune.lr_space.units(base_rows), losses[1], s.shrink)
        tune.spent += per_round
        tune.rounds.append({"round": index, "jobs": [f.name for f in folders], "best": _num(tune.search.best),
                            "baseline_best": _num(tune.baseline.best), "radius": tune.search.radius,
                            "run_steps": tune.spent})
        if sweeper.action != "plan":
            _write(folder, tune, typed)
            if on_round is not None:
                on_round(tune)
    confirm = _confirm_job(tune)
    if confirm is None:
        raise ConfigError("every point of the search diverged: no best point to confirm; narrow search.lr or "
                          "the ranges")
    if sweeper.action == "plan":
        plan = _plan_round(sweeper, [confirm], index + 1)
        if plan is not None:
            return plan
        from lrtransfer.sweeps.plan import Plan

        return Plan(adaptive=[f"tune: all {index} round(s) and the confirming job are done"])
    (done,) = _run(sweeper, [confirm], report)
    tune.confirm = done.name
    _write(folder, tune, typed)
    return report


def _base(sweeper, job_overrides: list[list[str]]) -> Tune:
    from lrtransfer.sweeps.multirun import compose

    if len(job_overrides) != 1:
        raise ConfigError(f"tune searches at one scale, the base: the sweep gives {len(job_overrides)} jobs; give one "
                          "value of each key (width=64 depth=2), then check larger scales with "
                          "`lrtransfer sweep --transfer-from STUDY width=...`")
    (overrides,) = job_overrides
    typed = validate(compose(sweeper, overrides))
    if has_points(typed) or typed.n_seeds != 1:
        raise ConfigError("tune chooses each round's runs and seeds itself: drop points=... and n_seeds=... "
                          "(search.seeds sets the seeds the best points are confirmed at)")
    found = _grid_keys(typed)
    if found:
        raise ConfigError(f"grid.{found[0]}: tune searches its keys itself; give search.{found[0]}=[lo,hi] instead")
    if typed.adaptive.enabled:
        raise ConfigError("tune and --until-decided are two ways to choose runs; give one")
    space, lr_space = space_of(typed)
    radius = typed.search.radius
    kept = [o for o in overrides if _key(o) not in SET_HERE and not _key(o).startswith("hydra.")]
    return Tune(kept, typed, space, lr_space, State(radius=radius), State(radius=radius))


def _grid_keys(typed) -> list[str]:
    from lrtransfer.config import inner_grid

    found = inner_grid(typed)
    return [] if found is None else [found[0]]


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def _round_jobs(tune: Tune, index: int) -> tuple[list[list[str]], list[list[float]], list[list[float]]]:
    """Round `index`'s two jobs (the search's, the baseline's) and their rows (unit-space order)."""
    s, seed = tune.typed.search, tune.typed.seed
    us = search.propose(tune.space, s.policy, tune.search, s.round_size, seed)
    ub = search.propose(tune.lr_space, s.policy, tune.baseline, s.round_size, seed + 1_000_003)
    search_rows, base_rows = _unique(tune.space.values(us)), _unique(tune.lr_space.values(ub))
    keys = tune.space.keys[1:]
    jobs = [
        [*tune.overrides, points_override(keys, [log2_of(r[0]) for r in search_rows], [r[1:] for r in search_rows],
                                          "search", index), "n_seeds=1"],
        [*tune.overrides, points_override([], [log2_of(r[0]) for r in base_rows], [[] for _ in base_rows],
                                          "baseline", index), "n_seeds=1"],
    ]
    return jobs, search_rows, base_rows


def _unique(rows: list[list[float]]) -> list[list[float]]:
    """Rows once each (a narrow trust region rounds two draws to one point, rarely; the LR to 6 decimals)."""
    seen, out = set(), []
    for r in rows:
        k = (log2_of(r[0]), *r[1:])
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def _confirm_job(tune: Tune) -> list[str] | None:
    """The best point of the search and of its LR-only twin, each at `search.seeds` fresh seeds."""
    s, typed = tune.search, tune.typed
    if s.incumbent is None or tune.baseline.incumbent is None:
        return None
    best = tune.space.values(np.array([s.incumbent]))[0]
    base_lr = tune.lr_space.values(np.array([tune.baseline.incumbent]))[0][0]
    keys = tune.space.keys[1:]
    rows = [(log2_of(best[0]), best[1:]), (log2_of(base_lr), [default_value(typed, k) for k in keys])]
    if rows[0] == rows[1]:
        rows = rows[:1]
    return [*tune.overrides, points_override(keys, [e for e, _ in rows], [v for _, v in rows], "confirm", 0),
            f"n_seeds={typed.search.seeds}", f"seed={typed.seed + 1}"]


def _run(sweeper, jobs: list[list[str]], report) -> list[Path]:
    """Train the jobs (those not done yet) as one multirun; their folders, each with a complete record."""
    from lrtransfer.sweeps.adaptive import _run_round

    folders = _run_round(sweeper, jobs, report)
    for f in folders:
        path = f / RECORD_NAME
        rec = read_record(path) if path.exists() else None
        if rec is None or rec["status"] != "complete":
            why = "no record: it is running in another sweep, or was cut off" if rec is None else rec.get("error")
            raise ConfigError(f"job {f.name} has no complete record ({why}); the search stops here: re-run the same "
                              "command once it is fixed, every finished round is kept")
    return folders


def _folder(sweeper, overrides: list[str]) -> Path:
    from lrtransfer.store import job_dir
    from lrtransfer.sweeps.multirun import compose

    return job_dir(compose(sweeper, overrides))


def _plan_round(sweeper, jobs: list[list[str]], index: int):
    """`--plan`: the first round not yet done, as a plan (None when this one is done)."""
    from lrtransfer.sweeps.plan import survey

    surveyed = survey(sweeper, jobs)
    if not surveyed.todo:
        return None
    surveyed.adaptive = [f"tune: round {index} trains {len(jobs)} job(s); later rounds follow from what it measures"]
    return surveyed


def _losses(folder: Path, keys: list[str], rows: list[list[float]], metric: str) -> list[float]:
    """Each row's loss in its job's record (inf where it diverged), in the rows' order."""
    rec = read_record(folder / RECORD_NAME)
    found = {}
    for run in rec["runs"]:
        value = run.get("final_loss") if metric == "train_loss" else run.get(metric)
        loss = math.inf if run["diverged"] or value is None or not math.isfinite(value) else float(value)
        found[(round(float(run["log2_lr"]), 6), *(float(run["grid"][k]) for k in keys))] = loss
    return [found[(log2_of(r[0]), *map(float, r[1:]))] for r in rows]


def _num(x: float) -> float | None:
    return x if math.isfinite(x) else None


def _write(folder: Path, tune: Tune, typed) -> None:
    s = typed.search
    write_json_atomic(folder / TUNE_NAME, {
        "overrides": tune.overrides, "policy": s.policy, "round_size": s.round_size, "metric": s.metric,
        "space": [{"key": d.key, "range": [d.lo, d.hi], "log": d.log} for d in tune.space.dims],
        "rounds": tune.rounds, "confirm": tune.confirm,
    })

"""`lrtransfer sweep --transfer-from TUNED width=...`: does a tuned vector hold at larger scales?

From a search's best point (`lrtransfer tune`'s study TUNED: its base job's overrides in
`tune.json`, its best point and its LR-only twin's best LR in its records), each job of the sweep
(a larger scale: width, depth, batch, horizon, any key) and the base scale itself train one
ensemble of scans: each tuned key's value (1 - beta for a beta; the global LR among them) times
2^f for f in `search.scan` (-2 .. 2 octaves), the other keys at their tuned values; and the LR-only
setting's LR times 2^f with every key at the job's own value. `analysis/transfer.py` reads them:
each key's optimum per scale, its drift per doubling, the loss of not retuning it, and the tuned
vector against the LR-only setting at the largest scale.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from lrtransfer.config import ConfigError, has_points, validate
from lrtransfer.errors import UserError
from lrtransfer.sweeps.search import coordinate, from_coordinate
from lrtransfer.sweeps.tuning import TUNE_NAME, points_override

LR = "lr"


def requested(sweeper, job_overrides: list[list[str]]) -> bool:
    from omegaconf import OmegaConf

    from lrtransfer.sweeps.multirun import compose

    return OmegaConf.select(compose(sweeper, job_overrides[0]), "search.transfer_from", default=None) is not None


def tuned(folder: Path):
    """(the base job's overrides, the search read from its records) of a tune study folder."""
    from lrtransfer import analysis
    from lrtransfer.analysis.tuning import searches

    path = folder / TUNE_NAME
    if not path.is_file():
        raise UserError(f"--transfer-from {folder}: no {TUNE_NAME} there; give the study folder of `lrtransfer tune` "
                        "(results/NAME)")
    try:
        saved = json.loads(path.read_text())
        overrides = saved["overrides"]
        assert isinstance(overrides, list) and all(isinstance(o, str) for o in overrides)
    except (OSError, ValueError, KeyError, TypeError, AssertionError) as e:
        raise UserError(f"--transfer-from {folder}: {TUNE_NAME} is unreadable ({type(e).__name__}); re-run the "
                        "tune to write it again") from None
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        found = searches(analysis.scan(folder).points)
    if len(found) != 1 or not found[0].best or found[0].baseline_log2_lr is None:
        raise UserError(f"--transfer-from {folder}: no finished search there (its records hold "
                        f"{len(found)} search(es) with a best point); run `lrtransfer tune` to its end first")
    return overrides, found[0]


def scan_rows(s, factors: list[float], typed) -> tuple[list[str], list[tuple[float, list[float]]]]:
    """(keys, rows (log2 LR, values)): the tuned point, each key (and the LR) scanned by 2^f around
    it, and the LR-only setting's LR scanned; a row a key cannot take (a beta pushed to 1 or past 0)
    is left out."""
    from lrtransfer.config.validate import check_per_run_value

    keys = list(s.keys)
    centre = [s.best[k] for k in keys]
    rows = [(s.best["log2_lr"] + f, centre) for f in factors]
    for j, k in enumerate(keys):
        c = coordinate(k, centre[j])
        if not c > 0:  # a value of 0 (no decay): no multiplicative scan
            continue
        for f in factors:
            v = float(f"{from_coordinate(k, c * 2.0**f):.6g}")
            try:
                check_per_run_value(typed, k, v)
            except ConfigError:
                continue
            rows.append((s.best["log2_lr"], [*centre[:j], v, *centre[j + 1:]]))
    defaults = [s.defaults.get(k, centre[j]) for j, k in enumerate(keys)]
    rows += [(s.baseline_log2_lr + f, defaults) for f in factors]
    unique, seen = [], set()
    for e, v in rows:
        key = (round(e, 6), *v)
        if key not in seen:
            seen.add(key)
            unique.append((round(e, 6), v))
    return keys, unique


def run(sweeper, job_overrides: list[list[str]]):
    """Each job of the sweep, and the base scale, as one ensemble of scans; one multirun."""
    from lrtransfer.sweeps.adaptive import _run_round
    from lrtransfer.sweeps.multirun import SweepReport, compose
    from lrtransfer.store import study_dir

    first = validate(compose(sweeper, job_overrides[0]))
    folder = Path(first.search.transfer_from)
    base, s = tuned(folder)
    factors = sorted(set([0.0, *first.search.scan]))
    jobs = []
    for user in [base_scale(base, job_overrides), *job_overrides]:
        mine = {_key(o) for o in user} | {"name"}  # the check is a study of its own
        overrides = [o for o in base if _key(o) not in mine] + list(user)
        if not any(_key(o) == "name" for o in user):
            overrides.append(f"name={folder.name}_check")
        if not any(_key(o) == "search.transfer_from" for o in overrides):
            overrides.append(f"search.transfer_from={first.search.transfer_from}")
        typed = validate(compose(sweeper, overrides))
        if has_points(typed):
            raise ConfigError("--transfer-from chooses each job's runs itself: drop points=...")
        keys, rows = scan_rows(s, factors, typed)
        centre = [s.best["log2_lr"], *(s.best[k] for k in keys)]
        reference = [s.baseline_log2_lr, *(s.defaults.get(k, s.best[k]) for k in keys)]
        over = [*overrides, points_override(keys, [e for e, _ in rows], [v for _, v in rows], "scan", 0, centre,
                                            reference),
                f"n_seeds={typed.search.seeds}", f"seed={typed.seed + 1}"]
        if over not in jobs:
            jobs.append(over)
    if sweeper.action == "plan":
        from lrtransfer.sweeps.plan import survey

        surveyed = survey(sweeper, jobs)
        surveyed.adaptive = [f"transfer check of {folder}: {len(jobs)} job(s), the base scale's among them, each "
                             f"one ensemble of scans ({len(factors)} factors per key)"]
        return surveyed
    report = SweepReport()
    folders = _run_round(sweeper, jobs, report)
    report.tuning = folders[0].parent if folders else study_dir(first.results_dir, first.name)
    return report


SETTINGS = ("name", "results_dir", "search.", "engine.", "tracker.", "adaptive.", "hydra.")  # where and how jobs run


def base_scale(base: list[str], job_overrides: list[list[str]]) -> list[str]:
    """What the sweep's jobs say of the base scale's: where and how they run (`SETTINGS`), and each
    override every job gives alike that the search's base job left at its default (`train.steps=100`
    for the whole check); a key the search set (its scale: width=64) keeps the search's value."""
    searched = {_key(o) for o in base}
    common = set.intersection(*(set(j) for j in job_overrides))
    return [o for o in job_overrides[0] if o in common
            and (_key(o).startswith(SETTINGS) or _key(o) not in searched)]


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0]


def factor_of(key: str, value: float, tuned_value: float) -> float:
    """log2 of the factor a scan row moved `key` by (on its coordinate: 1 - beta for a beta)."""
    return round(math.log2(coordinate(key, value) / coordinate(key, tuned_value)), 6)

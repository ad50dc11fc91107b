"""The results store: one folder per job, one JSON record per folder.

Layout: `<results_dir>/<name>/<job_id>/record.json`, where `job_id` hashes the job's
semantic config (see `config.semantic`). The same point of a sweep therefore lands
in the same folder whatever launcher ran it, and a re-run can tell what is done.

A record is written once, atomically (temp file + rename), when the job ends: a
folder without a record is unfinished, never mistaken for a finished job.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lrtransfer.config import inner_grid, semantic
from lrtransfer.config.validate import MAX_ABS_LOG2_LR, MAX_DEPTH, MAX_INT
from lrtransfer.errors import ConfigError, UserError, file_kind, shown

RECORD_NAME = "record.json"
ROUNDS_NAME = "adaptive.json"  # an adaptive sweep's rounds, group by group, beside its study's records
FORMAT_VERSION = 1
IMPORTED = "import"  # a record's source.kind when its runs came from a table (`lrtransfer import`), not a job
# Levels of lists and mappings a record may hold; a job writes 5 at most (a run's grid value,
# a grid's list of values), a model's own keyword arguments a few more.
MAX_NESTING = 32
# Beyond these a record's numbers are damage, not results: a job's learning rates lie on the config's
# own grid (-MAX_ABS_LOG2_LR .. MAX_ABS_LOG2_LR octaves), no model is 2^40 wide or deeper than the
# config allows, and the analysis reads integers as numpy's int64 (a larger one is an object that
# numpy's log2 and a float division refuse).
MAX_WIDTH = 2**40
SCALE_BOUNDS = {"width": (MAX_WIDTH, "2^40"), "depth": (MAX_DEPTH, str(MAX_DEPTH))}
INT64 = (-MAX_INT - 1, MAX_INT)


class RecordError(UserError, ValueError):
    """A record file cannot be used; the message names the file and why. `record` is what was
    read of it (None where the file is no JSON at all)."""

    def __init__(self, message: str, record: Any = None) -> None:
        super().__init__(message)
        self.record = record


def job_id(cfg: DictConfig | dict) -> str:
    """A short stable hash of the config's semantic part."""
    if isinstance(cfg, DictConfig):
        # Convert key by key: the root holds `hydra`, whose sweep.subdir calls this
        # very function, so it must never be resolved from here.
        cfg = {
            k: OmegaConf.to_container(cfg[k], resolve=True, enum_to_str=True)
            if isinstance(cfg[k], DictConfig)
            else cfg[k]
            for k in cfg
            if k != "hydra"
        }
    text = json.dumps(semantic(cfg), sort_keys=True, default=str)
    return hashlib.sha1(text.encode()).hexdigest()[:12]


def _resolve_job_id(*, _root_: DictConfig) -> str:
    return job_id(_root_)


if not OmegaConf.has_resolver("lrt_job_id"):
    OmegaConf.register_new_resolver("lrt_job_id", _resolve_job_id, use_cache=False)


def study_dir(results_dir: str | os.PathLike, name: str) -> Path:
    return Path(results_dir) / name


def job_dir(cfg: DictConfig | dict) -> Path:
    return study_dir(cfg["results_dir"], cfg["name"]) / job_id(cfg)


def probe_writable(folder: Path) -> None:
    """Make `folder` if missing and write a file in it, or raise the OSError that says why not:
    the one test of "can results go here", asked before any work (a results folder, an --out)."""
    folder.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-test-"):
        pass


def write_text_atomic(path: Path, text: str) -> None:
    """Write `text` so that readers see the old file or the new one, never half of one.

    The file gets the mode any other file would (0666 less the umask, typically
    0644), not mkstemp's private 0600: a shared results folder stays readable.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json_atomic(path: Path, data: Any) -> None:
    write_text_atomic(path, json.dumps(data, indent=1, allow_nan=True))


def _umask() -> int:
    mask = os.umask(0o022)  # reading the umask means setting it: put it straight back
    os.umask(mask)
    return mask


def write_record(folder: Path, record: dict) -> Path:
    path = Path(folder) / RECORD_NAME
    write_json_atomic(path, {"format": FORMAT_VERSION, **record})
    return path


def read_record(path: Path) -> dict:
    """The record at `path`, or a `RecordError` naming the file and what is wrong with it.

    Reading runs no code (plain JSON) and never recurses without bound: a file nested
    deeper than Python can parse, or than a record ever is, is refused like a truncated one.
    """
    record = None
    try:
        with _open_regular(path) as f:
            record = json.load(f)
    except RecordError:
        raise
    except RecursionError:
        raise RecordError(f"{path}: unreadable record (nested deeper than {MAX_NESTING} levels)") from None
    except (OSError, ValueError, UnicodeDecodeError) as e:  # ValueError: JSONDecodeError, an integer too long to read
        raise RecordError(f"{path}: unreadable record ({e.__class__.__name__}: {e})") from None
    problem = record_problem(record)
    if problem:
        raise RecordError(f"{path}: {problem}", record)
    return record


def _open_regular(path: Path):
    """`path` opened for reading, or a RecordError where it is no regular file. Opened without
    blocking and checked on the open file itself: a FIFO named record.json (or adaptive.json) would otherwise wait
    forever for a writer, and a check before opening could be raced by a rename. A symlink to a
    regular file is read through, as `open` does."""
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise RecordError(f"{path}: unreadable record (not a regular file: {file_kind(mode)})")
        return os.fdopen(fd)
    except BaseException:
        os.close(fd)
        raise


def record_problem(record: Any) -> str | None:
    """What makes `record` no usable record, or None: its shape, its nesting, and in a complete
    one every run's numbers (a record is written whole by a job, so a bad value anywhere
    means the file was damaged or edited, and none of it is read)."""
    if not isinstance(record, dict) or "config" not in record or "status" not in record:
        return "not an lrtransfer record (no 'config' or 'status')"
    if nesting(record) > MAX_NESTING:
        return f"malformed record (nested deeper than {MAX_NESTING} levels)"
    if not isinstance(record["config"], dict):
        return f"malformed record (config is a {type(record['config']).__name__}, not a mapping)"
    if not isinstance(record.get("job_id"), (str, type(None))):
        return f"malformed record (job_id={record['job_id']!r} is not a string)"
    inputs = record.get("inputs", {})  # what its files held (`config.inputs`); older records lack it
    if not (isinstance(inputs, dict) and all(isinstance(v, str) for v in inputs.values())):
        return f"malformed record (inputs={shown(inputs)} is not a mapping of file fingerprints)"
    huge = _huge_int(record)
    if huge:
        return f"malformed record ({huge[0]}={shown(huge[1])} is beyond a 64-bit integer)"
    if record["status"] != "complete":
        return None
    for axis, (bound, said) in SCALE_BOUNDS.items():  # a config without them is refused by the analysis' own check
        v = record["config"].get(axis, 1)
        if not (_number(v) and 0 < v <= bound):  # also refuses NaN and inf
            return f"malformed record (config.{axis}={shown(v)} is not a positive number up to {said})"
    runs = record.get("runs")
    if not isinstance(runs, list):
        return "complete record without a 'runs' list"
    if not runs:
        return "complete record with no runs"
    try:
        keys = per_run_keys_of(record["config"])
    except (ConfigError, AttributeError, TypeError) as e:
        return f"malformed record ({e})"
    seen: dict[tuple, int] = {}
    for i, run in enumerate(runs):
        why = run_problem(run, keys)
        if why:
            return f"malformed record (run {i}: {why})"
        key = (run["seed"], run["log2_lr"], *(run["grid"][k] for k in keys))
        if key in seen:  # a job trains each LR of its grid (each row of its points) once per seed: one was added
            return f"malformed record (runs {seen[key]} and {i} are both seed {key[0]} at log2_lr={key[1]}" + \
                (" with the same values)" if keys else ")")
        seen[key] = i
    return None


def per_run_keys_of(config: dict) -> list[str]:
    """The keys a record's runs each carry a value of: its `grid.<key>`, or its `points.keys`."""
    points = config.get("points")
    if isinstance(points, dict) and points.get("log2_lr"):
        keys = points.get("keys") if isinstance(points, dict) else None
        if not (isinstance(keys, list) and all(isinstance(k, str) for k in keys)):
            raise ConfigError(f"points.keys={shown(keys)} is not a list of keys")
        return list(keys)
    found = inner_grid(config)
    return [] if found is None else [found[0]]


def _number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool)


def _finite(v: Any) -> bool:
    return _number(v) and math.isfinite(v)


def run_problem(run: Any, grid_keys: list[str] | str | None = None) -> str | None:
    """What is wrong with one run of a complete record, or None. Finite numbers where the
    analysis reads numbers; a diverged run has no final loss (None), a held-out loss may be
    missing (None) or not finite (a model that overflows on held-out data only)."""
    if not isinstance(run, dict):
        return f"a {type(run).__name__}, not a mapping"
    if "final_loss" not in run:
        return "no final_loss"
    seed, log2_lr, lr, diverged, final = (run.get(k) for k in ("seed", "log2_lr", "lr", "diverged", "final_loss"))
    checks = [
        (isinstance(seed, int) and not isinstance(seed, bool), "seed", seed, "a whole number"),
        (_finite(log2_lr) and abs(log2_lr) <= MAX_ABS_LOG2_LR, "log2_lr", log2_lr,
         f"a finite number in -{MAX_ABS_LOG2_LR} .. {MAX_ABS_LOG2_LR} (the config's LR range)"),
        (_finite(lr) and lr > 0, "lr", lr, "a finite positive number"),
        (isinstance(diverged, bool), "diverged", diverged, "true or false"),
        (final is None or _number(final) if diverged is True else _finite(final), "final_loss", final,
         "a finite number (null only for a diverged run)"),
        (run.get("initial_loss") is None or _finite(run["initial_loss"]), "initial_loss", run.get("initial_loss"),
         "a finite number or null"),
        (run.get("diverged_step") is None or isinstance(run["diverged_step"], int), "diverged_step",
         run.get("diverged_step"), "a whole number or null"),
    ]
    checks.append((run.get("eval_loss") is None or _number(run["eval_loss"]), "eval_loss", run.get("eval_loss"),
                   "a number or null"))
    checks.append((run.get("eval_acc") is None or (_number(run["eval_acc"]) and 0 <= run["eval_acc"] <= 1), "eval_acc",
                   run.get("eval_acc"), "a fraction in [0, 1] or null"))
    checks += [(isinstance(run.get(k, []), list) and all(v is None or _number(v) for v in run.get(k, [])), k,
                run.get(k), "a list of numbers") for k in ("history_step", "history_loss")]
    for grid_key in [grid_keys] if isinstance(grid_keys, str) else grid_keys or []:
        value = run.get("grid", {}).get(grid_key) if isinstance(run.get("grid"), dict) else None
        checks.append((_finite(value), f"grid.{grid_key}", value, "a finite number"))
    for ok, key, value, valid in checks:
        if not ok:
            return f"{key}={shown(value)} is not {valid}"
    if not math.isclose(lr, 2.0**log2_lr, rel_tol=1e-9):  # a job writes both; log2_lr is rounded to 10 digits
        return f"lr={shown(lr)} is not 2**log2_lr={2.0**log2_lr:.6g}"
    steps, losses = run.get("history_step", []), run.get("history_loss", [])
    if len(steps) != len(losses):  # each loss is the one at its step: a plot pairs them
        return f"history_loss has {len(losses)} values, history_step {len(steps)}"
    return None


def _huge_int(record: dict) -> tuple[str, int] | None:
    """The first integer of `record` outside int64, with its dotted key, or None. Walked without
    recursion; a key is spelt out only for the integer found (a record holds thousands of values)."""
    stack: list[tuple[Any, Any, Any]] = [(record, None, None)]  # (container, its parent's entry, its key there)
    while stack:
        entry = stack.pop()
        node = entry[0]
        for k, v in node.items() if isinstance(node, dict) else enumerate(node):
            if isinstance(v, (dict, list)):
                stack.append((v, entry, k))
            elif type(v) is int and not INT64[0] <= v <= INT64[1]:  # an int subclass (bool) is never huge
                keys = [f"[{k}]" if isinstance(node, list) else f".{k}"]
                while entry[1] is not None:
                    keys.append(f"[{entry[2]}]" if isinstance(entry[1][0], list) else f".{entry[2]}")
                    entry = entry[1]
                return "".join(reversed(keys)).lstrip("."), v
    return None


def nesting(obj: Any) -> int:
    """How deep lists and mappings nest in `obj` (1: a flat one), counted without recursion and
    only as far as one level past `MAX_NESTING`."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        if depth > MAX_NESTING:
            break
        stack.extend((v, depth + 1) for v in (node.values() if isinstance(node, dict) else node)
                     if isinstance(v, (dict, list)))
    return deepest if isinstance(obj, (dict, list)) else 0


def is_complete(folder: Path) -> bool:
    """True when the folder holds a readable record of a finished job."""
    path = Path(folder) / RECORD_NAME
    if not path.exists():
        return False
    try:
        return read_record(path)["status"] == "complete"
    except RecordError:
        return False


def iter_records(root: str | os.PathLike, *, warn: bool = True) -> Iterator[tuple[Path, dict]]:
    """Every readable record below `root`; unreadable ones are skipped with a warning."""
    for path in sorted(Path(root).rglob(RECORD_NAME)):
        try:
            yield path, read_record(path)
        except RecordError as e:
            if warn:
                warnings.warn(f"skipped {e}", stacklevel=2)


def write_rounds(study: Path, groups: list[dict]) -> None:
    """An adaptive sweep's groups (`sweeps/outcome.rounds_log`) into its study's rounds file; the
    groups another sweep wrote there (no job in common with these) are kept."""
    path = Path(study) / ROUNDS_NAME
    ours = {j for g in groups for j in g["jobs"]}
    kept = [g for g in read_rounds(path) if not ours & set(g["jobs"])] if path.exists() else []
    write_json_atomic(path, {"format": FORMAT_VERSION, "groups": kept + groups})


def read_rounds(path: Path) -> list[dict]:
    """The groups of a rounds file that have the fields a report reads; a file that is not one is
    skipped with a warning."""
    try:
        with _open_regular(path) as f:
            doc = json.load(f)
        groups = doc["groups"]
        if not isinstance(groups, list):
            raise TypeError("'groups' is not a list")
    except RecordError as e:  # no regular file
        warnings.warn(f"skipped {e}", stacklevel=2)
        return []
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as e:
        why = "nested deeper than Python can parse" if isinstance(e, RecursionError) else f"{e.__class__.__name__}: {e}"
        warnings.warn(f"skipped {path}: not an adaptive sweep's rounds ({why})", stacklevel=2)
        return []
    return [g for g in groups if _rounds_group(g)]


def _rounds_group(g) -> bool:
    """Whether a rounds file's group has every field `report` reads, of its type."""
    def number(v) -> bool:
        return isinstance(v, (int, float)) and not isinstance(v, bool)

    def interval(ci) -> bool:
        return ci is None or (isinstance(ci, list) and len(ci) == 2 and all(map(number, ci)))

    def round_(r) -> bool:
        return (isinstance(r, dict) and number(r.get("round")) and number(r.get("run_steps"))
                and (r.get("drift") is None or number(r["drift"])) and interval(r.get("drift_ci"))
                and all(isinstance(r.get(k), str) for k in ("added", "verdict", "state")))

    return (isinstance(g, dict) and isinstance(g.get("jobs"), list) and all(isinstance(j, str) for j in g["jobs"])
            and isinstance(g.get("rounds"), list) and all(map(round_, g["rounds"]))
            and isinstance(g.get("ended"), str) and number(g.get("run_steps")))

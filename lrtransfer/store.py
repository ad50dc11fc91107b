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
import os
import tempfile
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lrtransfer.config import semantic
from lrtransfer.errors import UserError

RECORD_NAME = "record.json"
ROUNDS_NAME = "adaptive.json"  # an adaptive sweep's rounds, group by group, beside its study's records
FORMAT_VERSION = 1


class RecordError(UserError, ValueError):
    """A record file cannot be read; the message names the file."""


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
    try:
        with open(path) as f:
            record = json.load(f)
    except (OSError, json.JSONDecodeError, UnicodeDecodeError) as e:
        raise RecordError(f"{path}: unreadable record ({e.__class__.__name__}: {e})") from None
    if not isinstance(record, dict) or "config" not in record or "status" not in record:
        raise RecordError(f"{path}: not an lrtransfer record (no 'config' or 'status')")
    if record["status"] == "complete" and not isinstance(record.get("runs"), list):
        raise RecordError(f"{path}: complete record without a 'runs' list")
    return record


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
        with open(path) as f:
            doc = json.load(f)
        groups = doc["groups"]
        if not isinstance(groups, list):
            raise TypeError("'groups' is not a list")
    except (OSError, ValueError, KeyError, TypeError) as e:
        warnings.warn(f"skipped {path}: not an adaptive sweep's rounds ({e.__class__.__name__}: {e})", stacklevel=2)
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

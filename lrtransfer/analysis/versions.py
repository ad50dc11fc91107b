"""Versions of a group's inputs: jobs equal in every config key but built from other contents of
the same files (a token file re-made or scrambled, a model file edited).

A job's id holds what its data files and its model's source files held (`config.identity`), so a
changed file trains new jobs beside the old ones in one study folder, and a group would mix the
two. A record keeps those fingerprints (`inputs`, read as `inputs.<key>` columns). Within a group,
each distinct set of them is a version, dated by the newest job built from it: readers analyse
the newest version and name the jobs of the others (`Superseded`), or, asked for all versions,
make each a group of its own, named `inputs=<hash> (<date>)`.

A record without a fingerprint (written before records kept them) cannot be told apart on it:
it joins the newest version that agrees with it on those it has. A change to a config value
(a `--config-dir` YAML edited) is no version: the value tells the groups apart itself.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

import pandas as pd

from lrtransfer.analysis.records import INPUTS

VERSION = "inputs"  # the key that names a version, where a group has several and all are shown


@dataclass
class Version:
    label: str  # '<hash of its fingerprints> (<its newest job's date>)'
    inputs: dict  # key (data.train_path, model.source) -> fingerprint; None where its records lack it
    runs: pd.DataFrame


@dataclass
class Superseded:
    """The jobs of a group left out as built from older versions of its inputs."""

    jobs: list[str]  # their ids, in order
    changed: list[str]  # the inputs they differ in from the newest version (data.train_path, model.source)
    newest: str  # the newest version's label

    def warning(self) -> str:
        shown = ", ".join(self.jobs[:6]) + (f" and {len(self.jobs) - 6} more" if len(self.jobs) > 6 else "")
        return (f"older inputs: {len(self.jobs)} job(s) of this group were built from an older version of "
                f"{' and '.join(self.changed)} and are left out ({shown}); these numbers are the newest version's, "
                f"{self.newest}; --all-versions shows each version as a group of its own")


def split(runs: pd.DataFrame) -> list[Version]:
    """A group's runs by the version of its inputs, newest first; one Version (label "") when the
    group has one, or its records keep no inputs."""
    cols = sorted(c for c in runs.columns if c.startswith(INPUTS))
    if not cols or "job_id" not in runs:
        return [Version("", {}, runs)]
    jobs = runs.drop_duplicates("job_id")
    own = {j: tuple(None if pd.isna(v) else str(v) for v in row)
           for j, row in zip(jobs["job_id"], jobs[cols].itertuples(index=False))}
    when = dict(zip(jobs["job_id"], jobs["created"].map(lambda c: c if isinstance(c, str) else "")
                    if "created" in jobs else [""] * len(jobs)))
    newest = {}
    for j, key in own.items():
        newest[key] = max(newest.get(key, ""), when[j])
    order = sorted(newest, key=lambda k: (newest[k], str(k)), reverse=True)  # newest first

    def agrees(a: tuple, b: tuple) -> bool:
        return all(x is None or y is None or x == y for x, y in zip(a, b))

    member = {j: next(k for k in order if agrees(k, key)) for j, key in own.items()}
    kept = [k for k in order if k in member.values()]
    if len(kept) == 1:
        return [Version("", _named(cols, kept[0]), runs)]
    out = []
    for key in kept:
        ids = [j for j, k in member.items() if k == key]
        date = max(when[j] for j in ids)
        label = f"{_hash(cols, key)} ({date[:16].replace('T', ' ') or 'date unknown'})"  # short enough for a panel's title
        out.append(Version(label, _named(cols, key), runs[runs["job_id"].isin(ids)]))
    return out


def superseded(versions: list[Version]) -> Superseded | None:
    """The jobs of every version but the newest (`split`'s first), and the inputs that changed."""
    if len(versions) < 2:
        return None
    first = versions[0].inputs
    changed = sorted({k for v in versions[1:] for k, x in v.inputs.items()
                      if x is not None and first.get(k) is not None and x != first[k]})
    jobs = [j for v in versions[1:] for j in dict.fromkeys(v.runs["job_id"])]
    return Superseded(jobs, changed or sorted(first), versions[0].label)


def _named(cols: list[str], key: tuple) -> dict:
    return {c.removeprefix(INPUTS): v for c, v in zip(cols, key)}


def _hash(cols: list[str], key: tuple) -> str:
    """Six hex digits of the version's fingerprints: the same files give the same hash in every group."""
    text = json.dumps(_named(cols, key), sort_keys=True)
    return hashlib.sha1(text.encode()).hexdigest()[:6]

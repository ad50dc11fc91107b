"""tracker=none (the default): the record is the only place results go."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class NoTrackerOptions:
    name: str = "none"


OPTIONS = NoTrackerOptions


def log(options: NoTrackerOptions, job) -> None:
    """Nothing to log: the record already holds every run."""

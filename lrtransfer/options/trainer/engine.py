"""trainer=engine (the default): lrtransfer's own engine trains every run of a job as one ensemble.

It has no keys of its own: the config's model, param, optim, data, train and engine say
what it trains and how. It is left out of a job's identity and of its record
(`config.identity.recorded`), so jobs and records read as they did before trainers existed.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class EngineOptions:
    name: str = "engine"


OPTIONS = EngineOptions

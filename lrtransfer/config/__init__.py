"""The root config: its typed keys, the checks on their values, and a job's identity.

`keys.py` types the config's own keys (sizes, seeds, the LR grid, training, the engine)
beside the options' dataclasses and registers them with Hydra; `runs.py` reads from a config
a job's runs (how many, along which inner axes, with which per-run keys); `validate.py` checks
what types cannot; `identity.py` says which part of a config makes a job what it is.

What this folder may import: `options/` (each option's typed options, found by name),
`errors`. Never torch, the engine or anything above: the sweep, the job, the builder,
the diagnostics and the analysis all read the config through here.
"""

from lrtransfer.config.identity import activation_of, added_values, inputs, model_activation, recorded, semantic
from lrtransfer.config.keys import (
    RUN_SETTINGS,
    Config,
    DType,
    Engine,
    LRGrid,
    Schedule,
    Train,
    default_grid,
    grid_schema,
    register,
)
from lrtransfer.config.runs import (
    flatten,
    has_points,
    inner_grid,
    per_run_keys,
    run_steps,
    runs_per_job,
    search_ranges,
    tuned_keys,
    varied_keys,
)
from lrtransfer.config.validate import MAX_DEPTH, MAX_RUNS_PER_JOB, validate
from lrtransfer.options.schema import ConfigError

__all__ = ["Config", "ConfigError", "DType", "Engine", "LRGrid", "RUN_SETTINGS", "Schedule", "Train", "activation_of", "added_values",
           "default_grid", "flatten", "grid_schema", "inner_grid", "inputs", "model_activation", "per_run_keys", "register",
           "run_steps", "runs_per_job", "has_points", "search_ranges", "tuned_keys", "varied_keys",
           "recorded", "semantic", "validate", "MAX_DEPTH", "MAX_RUNS_PER_JOB"]

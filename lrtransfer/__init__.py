"""lrtransfer: does my learning rate transfer when I scale this model up?

The Python API (docs/api.md; docs/api_example.py):

    import lrtransfer
    lrtransfer.plan(["width=64,256", "optim=sgd"])    # the jobs, done or not, and their work
    result = lrtransfer.sweep(["width=64,256", "optim=sgd"])  # run; result["groups"]: the summary
    runs = lrtransfer.load("results/default")          # a pandas DataFrame, one row per run
    groups = lrtransfer.summarize("results/default")   # best LR per scale, drift, verdict
    lrtransfer.predict("results/width", 4096)          # the optimal LR the drift predicts at width 4096

Bad input raises `lrtransfer.UserError` with the CLI's one-line message. The names
load on first use, so `import lrtransfer` imports neither torch nor Hydra.

The package is laid out by the stages a study flows through, each a folder whose
`__init__` says what it owns and what it may import:

    cli/          the command line                      -> sweeps, diagnostics, analysis, reporting
    api.py        the same, as Python functions         -> sweeps, analysis
    sweeps/       plan and launch a sweep; run each job, write its record
    diagnostics/  coordinate check and inspect: one model built, looked into
    training/     a validated config -> built objects -> the engine's ensembles
    config/       the root config: its keys, their checks, a job's identity
    options/      every option, one module + one YAML each (model, param, optim, data, tracker)
    nn/           the run-axis building blocks models are made of, and their linear algebra
    store.py      records: job ids, atomic writes, reading
    analysis/     records -> numbers (optima, drift, verdict, prediction)
    reporting/    numbers -> figures, the HTML report, exported tables
    errors.py     one-line errors and warnings for the user (the floor: imports nothing of ours)
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {"sweep": "lrtransfer.api", "plan": "lrtransfer.api", "load": "lrtransfer.api",
        "summarize": "lrtransfer.api", "predict": "lrtransfer.api", "UserError": "lrtransfer.errors"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'lrtransfer' has no attribute '{name}'")
    module = importlib.import_module(_API[name])
    return getattr(module, name)

"""lrtransfer: does my learning rate transfer when I scale this model up?

The Python API (see README, "Python API"; docs/api_example.py):

    import lrtransfer
    lrtransfer.plan(["width=64,256", "optim=sgd"])    # the jobs, done or not, and their work
    result = lrtransfer.sweep(["width=64,256", "optim=sgd"])  # run; result["groups"]: the summary
    runs = lrtransfer.load("results/default")          # a pandas DataFrame, one row per run
    groups = lrtransfer.summarize("results/default")   # best LR per scale, drift, verdict
    lrtransfer.predict("results/width", 4096)          # the optimal LR the drift predicts at width 4096

Bad input raises `lrtransfer.UserError` with the CLI's one-line message. The names
load on first use, so `import lrtransfer` imports neither torch nor Hydra.
`lrtransfer.sweep` is also the module `lrtransfer/sweep.py` (a submodule import
rebinds the name); the module is callable and calls `api.sweep`.
"""

from __future__ import annotations

import importlib

__version__ = "0.1.0"

_API = {"sweep": "lrtransfer.sweep", "plan": "lrtransfer.api", "load": "lrtransfer.api",
        "summarize": "lrtransfer.api", "predict": "lrtransfer.api", "UserError": "lrtransfer.errors"}
__all__ = ["__version__", *_API]


def __getattr__(name: str):
    if name not in _API:
        raise AttributeError(f"module 'lrtransfer' has no attribute '{name}'")
    module = importlib.import_module(_API[name])
    return module if name == "sweep" else getattr(module, name)

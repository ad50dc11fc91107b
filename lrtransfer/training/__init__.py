"""Training: a validated config made into objects, and the engine that trains a job's runs.

`build.py` turns each option into objects (the task, and factories for the
parameterization, model and optimizer), handing each option only its own options and
the numbers it needs; `engine.py` trains every run of a job (LR x seed, `runs.py`) as
batched ensembles (`ensemble.py`), sized by `memory.py`, in the numerics of
`precision.py`, with the LR schedule of `schedule.py`, and stops at a consistent point
when `stop.py` says so; `results.py` turns each run's losses into what its record says.

What this folder may import: `options`, `nn`, `config` (only `build` reads it),
`errors`. The engine itself receives built objects: it knows no config, record,
plot or command line.
"""

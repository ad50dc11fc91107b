"""Trainers: what trains a job's runs (`trainer=engine|command`).

`trainer=engine` (the default) is lrtransfer's own engine: the model, parameterization,
optimizer and data of the config, every run of a job in one batched ensemble
(`lrtransfer/training/`). `trainer=command` runs the user's own training script
instead, one process per run, each in its own run folder, and reads its losses from
what the script already writes (`command.py`; the job around it is
`lrtransfer/sweeps/command_job.py`). Either way a job writes one record of the same
schema, so every reading command works on it unchanged.

The command's modules here need neither torch nor the engine: `template.py` renders a
command for a run (safe arithmetic, never `eval`), `readers.py` reads a run's losses
(its output, a CSV or JSON-lines file, TensorBoard event files), `curve.py` turns
them into what the record says of the run.
"""

# The config groups only lrtransfer's engine reads: under a trainer that runs the user's own
# script they compute nothing, so they are no part of its jobs' records or identities.
ENGINE_GROUPS = ("model", "param", "optim", "data")

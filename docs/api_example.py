# %% [markdown]
# # lrtransfer from Python
#
# The same sweep, records and summary as the CLI, as data for a notebook.
# Run it as a script (`python docs/api_example.py`) or cell by cell (`# %%` cells);
# the test suite runs it (tests/test_api.py). It writes to a temporary folder.

# %%
import tempfile

import lrtransfer

results = tempfile.mkdtemp(prefix="lrtransfer-api-")
overrides = ["width=16,32", "train.steps=20", "lr.log2_min=-9", "lr.log2_max=-5",
             f"results_dir={results}", "name=api"]

# %% What would run, before anything runs
plan = lrtransfer.plan(overrides)
for job in plan.jobs:
    print(job.status, job.varying, job.run_steps, "run-steps")

# %% Run it: finished jobs are skipped on a re-run, as on the command line
result = lrtransfer.sweep(overrides + ["engine.progress=false"])
print("ran", result["ran"], "skipped", result["skipped"], "failed", len(result["failed"]))
(group,) = result["groups"]
print("best log2 LR per width:", dict(zip(group["scales"], group["best_log2_lr"])))
print("drift:", group["drift"], "->", group["verdict"])

# %% Every run as a row of a pandas DataFrame
runs = lrtransfer.load(f"{results}/api")
table = runs.pivot_table(index="log2_lr", columns="width", values="train_loss")
print(table.round(3))

# %% The summary of any results folder, as plain dicts
for g in lrtransfer.summarize(f"{results}/api"):
    print(g["axis"], g["scales"], g["verdict"])

# %% Bad input raises lrtransfer.UserError with the CLI's one-line message
try:
    lrtransfer.sweep(["optim=adamw", f"results_dir={results}"])
except lrtransfer.UserError as e:
    print("UserError:", e)

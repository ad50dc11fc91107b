"""A sweep, from the command line's overrides to one record per job.

`launch.py` hands the overrides to Hydra, validates every job and skips the finished
ones before any trains, and launches the rest through Hydra's launcher (`launchers.py`
prepares Ray and SLURM); `plan.py` is the same survey without the training
(`sweep --plan`); `job.py` is what a launcher runs for one job: lock its folder,
build, train (resuming from `checkpoint.py`), write its record, log it to a tracker;
under `trainer=command` the job's runs are processes of the user's command instead
(`command_job.py`, N at a time by `runner.py`);
`progress.py` shows the work done across processes, `requeue.py` saves before SLURM
requeues a job, `messages.py` turns Hydra's errors into one line. An adaptive sweep
(`--until-decided`, `adaptive.py`) runs in rounds, each chosen by `rounds.py` from the
analysis of the records before it.

What this folder may import: `training` (to build and train a job), `config`,
`options` (the data a job needs on disk, the tracker it logs to), `store`, `analysis`
(an adaptive sweep's rounds), `errors`. Never `reporting`: the command line draws the
records afterwards.
"""

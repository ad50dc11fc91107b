"""tracker=mlflow: MLflow runs in a local file store by default.

One MLflow run per job (named by its title, tagged with its job id and overrides,
the job's config as parameters) holding one nested run per LR run: its tags and
parameters log2_lr, lr, seed, the metric `train_loss` at the record's steps, and the
final numbers as metrics at the last step (`diverged` as 0/1). The experiment is
named after the study. The store is `file:<results_dir>/<name>/mlruns` unless
`tracking_uri` names another (a `sqlite:` database, a tracking server).

MLflow keeps its file store in "maintenance mode" and refuses it unless the
environment says `MLFLOW_ALLOW_FILE_STORE=true`; `log` sets that for its own calls
only and restores the caller's environment.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from lrtransfer.options import tracker

ALLOW_FILE_STORE = "MLFLOW_ALLOW_FILE_STORE"
MAX_PARAM = 500  # characters of a parameter's value kept (MLflow refuses long ones)
BATCH = 100  # entries per log_batch call: MLflow takes at most 1000 metrics and 100 parameters


@dataclass
class MLflowOptions:
    name: str = "mlflow"
    tracking_uri: Optional[str] = None  # None: file:<results_dir>/<name>/mlruns
    experiment: Optional[str] = None  # None: the study's name

    def check(self) -> None:
        tracker.require(self.name, "mlflow")


OPTIONS = MLflowOptions


def store_uri(options: MLflowOptions, job: tracker.Job) -> str:
    if options.tracking_uri:
        return options.tracking_uri
    return (job.study_dir / "mlruns").resolve().as_uri()


@contextmanager
def _file_store_allowed() -> Iterator[None]:
    before = os.environ.get(ALLOW_FILE_STORE)
    os.environ[ALLOW_FILE_STORE] = "true"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(ALLOW_FILE_STORE, None)
        else:
            os.environ[ALLOW_FILE_STORE] = before


def log(options: MLflowOptions, job: tracker.Job) -> None:
    with _file_store_allowed():
        _log(store_uri(options, job), options.experiment or job.study, job)


def _experiment(client, name: str, lock: Path) -> str:
    """The experiment's id, created by the first job that needs it. Parallel workers take
    turns (a file store checks a name's uniqueness without a lock of its own); a server
    or database refuses a second one, and then the other's is found."""
    from mlflow.exceptions import MlflowException

    lock.parent.mkdir(parents=True, exist_ok=True)
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        found = client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        try:
            return client.create_experiment(name)
        except MlflowException:  # created meanwhile through another store's front door
            return client.get_experiment_by_name(name).experiment_id


def _log(uri: str, experiment: str, job: tracker.Job) -> None:
    from mlflow.entities import Metric, Param
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = _experiment(client, experiment, job.study_dir / ".mlflow.lock")
    now = int(time.time() * 1000)
    params = [Param(k, str(v)[:MAX_PARAM]) for k, v in job.config.items()]
    parent = client.create_run(exp, run_name=job.title, tags=job.tags()).info.run_id
    for i in range(0, len(params), BATCH):
        client.log_batch(parent, params=params[i:i + BATCH])
    for run in job.runs:
        tags = {**job.tags(), **{k: str(v) for k, v in tracker.run_tags(run).items()}, "mlflow.parentRunId": parent}
        child = client.create_run(exp, run_name=tracker.run_name(run), tags=tags).info.run_id
        metrics = [Metric("train_loss", loss, now, step) for step, loss in tracker.curve(run)]
        last = tracker.last_step(run)
        metrics += [Metric(k, float(run[k]), now, last) for k in tracker.FINAL if run.get(k) is not None]
        run_params = [Param(k, str(v)) for k, v in tracker.run_tags(run).items()]
        client.log_batch(child, params=run_params)
        for i in range(0, len(metrics), BATCH):
            client.log_batch(child, metrics=metrics[i:i + BATCH])
        client.set_terminated(child)
    client.set_terminated(parent)

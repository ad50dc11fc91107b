"""What lrtransfer adds around Hydra's launcher plugins, in the process that launches.

The plugins report a user's mistake late and loudly: a Ray address with no cluster
behind it hangs for minutes, then dies with a traceback; a plugin that is not
installed shows up as an unknown config option; a count of 0 CPUs passes their types
and fails on the cluster, or is obeyed to no purpose. `check` reads the launcher's
values from the config alone (no plugin, scheduler or cluster needed) before any job
is planned; `prepare` runs after every job is validated and before any is launched.
Both make those mistakes one line (`UserError`) while nothing has trained yet.
`prepare` also keeps submitit's polling of `sacct` from warning on every poll where
SLURM accounting is not set up.
"""

from __future__ import annotations

import logging
import os
import platform
import shutil
import socket
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from omegaconf import OmegaConf

from lrtransfer.config.validate import MAX_THREADS  # hydra.launcher.n_jobs' bound, as engine.threads'
from lrtransfer.errors import ConfigError, UserError, choices, shown

# The plugins' own launcher configs, and the extra that installs each.
PLUGIN_EXTRAS = {"joblib": "joblib", "submitit_local": "submitit", "submitit_slurm": "submitit",
                 "ray": "ray", "ray_aws": "ray"}
JOBLIB = "hydra_plugins.hydra_joblib_launcher."
SUBMITIT = "hydra_plugins.hydra_submitit_launcher."
RAY = "hydra_plugins.hydra_ray_launcher."
SUBMITIT_LOCAL = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
SCRATCH = "lrtransfer-submitit"

MAX_COUNT = 2**31 - 1  # nodes, GPUs, requeues, ...: a C int, what sbatch reads them into
# (the plugin whose launcher config has it, key under hydra.launcher, least valid value, most, what it
# counts); null, where the plugin's type allows it, is the plugin's default and always valid
COUNTS = [
    (SUBMITIT_LOCAL, "nodes", 1, 1, "node (hydra/launcher=processes runs on this machine)"),
    (SUBMITIT, "nodes", 1, MAX_COUNT, "nodes"),
    (SUBMITIT, "tasks_per_node", 1, 1, "task per node (a job is one process: more would train it again beside itself)"),
    (SUBMITIT, "cpus_per_task", 1, MAX_THREADS, "CPUs per job"),  # a SLURM job's torch threads
    (SUBMITIT, "cpus_per_gpu", 1, MAX_THREADS, "CPUs per GPU"),
    (SUBMITIT, "gpus_per_node", 0, MAX_COUNT, "GPUs per node"),
    (SUBMITIT, "gpus_per_task", 1, MAX_COUNT, "GPUs per task"),
    (SUBMITIT, "mem_gb", 0, MAX_COUNT, "GB per node (0: SLURM's all of it)"),
    (SUBMITIT, "array_parallelism", 1, MAX_COUNT, "jobs at once"),
    (SUBMITIT, "max_num_timeout", 0, MAX_COUNT, "requeues"),
    (SUBMITIT, "signal_delay_s", 0, MAX_COUNT, "seconds"),
    (RAY, "ray.remote.num_cpus", 0, MAX_THREADS, "CPUs per job"),
    (RAY, "ray.remote.num_gpus", 0, MAX_COUNT, "GPUs per job"),
    (RAY, "ray.init.num_cpus", 1, MAX_THREADS, "CPUs (a local cluster of none runs nothing)"),
    (RAY, "ray.init.num_gpus", 0, MAX_COUNT, "GPUs"),
]
# (key, the values joblib.Parallel takes from Hydra's joblib launcher, why)
JOBLIB_CHOICES = [
    ("backend", ("loky", "null"), " (Hydra's joblib launcher always runs loky)"),
    ("prefer", ("processes", "threads", "null"), ""),
    ("require", ("null",), " (loky, which Hydra's joblib launcher always runs, shares no memory)"),
    ("mmap_mode", ("r+", "r", "w+", "c", "null"), ""),
]


def check(cfg) -> None:
    """Refuse (ConfigError) a launcher value its plugin's type lets through but its engine refuses
    mid-launch, with a traceback, or obeys to no purpose; read from the config alone, so the check
    needs neither the plugin nor the scheduler or cluster behind it."""
    def get(key: str):
        return OmegaConf.select(cfg, f"hydra.launcher.{key}", default=None)

    n_jobs = get("n_jobs")
    if n_jobs == 0 or (isinstance(n_jobs, int) and abs(n_jobs) > MAX_THREADS):
        raise ConfigError(f"hydra.launcher.n_jobs={n_jobs} runs {'nothing' if n_jobs == 0 else 'more workers than any machine has'}; "
                          f"valid: 1 .. {MAX_THREADS} jobs at once, or -N (joblib's: all cores but N - 1; -1 is one "
                          "job per core)")
    for key, valid in (("timeout_min", "minutes > 0"), ("timeout", "seconds > 0, or null")):
        timeout = get(key)
        if isinstance(timeout, (int, float)) and not timeout > 0:
            raise ConfigError(f"hydra.launcher.{key}={timeout}: a job would be stopped before it starts; valid: {valid}")
    target = _target(cfg)
    _check_counts(target, get)
    _check_pairs(target, get)
    if target.startswith(JOBLIB):
        _check_joblib(get)


def _check_counts(target: str, get) -> None:
    checked = set()  # a key is checked by the first entry of its plugin (processes' nodes before submitit's)
    for plugin, key, low, high, unit in COUNTS:
        value = get(key)
        if not target.startswith(plugin) or key in checked or value is None:
            continue
        checked.add(key)
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if not (number and low <= value <= high):
            span = f"{low}" if low == high else f"{low:,} .. {high:,}"
            raise ConfigError(f"hydra.launcher.{key}={shown(value)} {'is out of range' if number else 'is not a number'}; "
                              f"valid: {span} {unit}")


def _check_pairs(target: str, get) -> None:
    """Values valid alone that together stop every job: a warning signal due before the job starts;
    a job asking more CPUs than the local Ray cluster has, which waits for them for ever."""
    delay, limit = get("signal_delay_s"), get("timeout_min")
    if target.startswith(SUBMITIT) and isinstance(delay, int) and isinstance(limit, (int, float)) and delay >= limit * 60:
        raise ConfigError(f"hydra.launcher.signal_delay_s={delay} is not shorter than the time limit "
                          f"(timeout_min={limit}: {limit * 60:g} s), so every job would be told to stop as it starts; "
                          f"valid: 0 .. {max(0, int(limit * 60) - 1)} seconds")
    wants, has = get("ray.remote.num_cpus"), get("ray.init.num_cpus")
    if target.startswith(RAY) and isinstance(wants, (int, float)) and isinstance(has, int) and wants > has:
        raise ConfigError(f"hydra.launcher.ray.remote.num_cpus={wants} is more than the local Ray cluster's "
                          f"ray.init.num_cpus={has}, so no job could start (they would wait for ever); valid: 0 .. {has}")


def _check_joblib(get) -> None:
    for key, valid, why in JOBLIB_CHOICES:
        value = "null" if get(key) is None else get(key)
        if value not in valid:
            raise ConfigError(f"unknown value {shown(value)} for hydra.launcher.{key}{choices(valid, value)}{why}")
    batch = str(get("batch_size") or "auto")
    if batch != "auto" and not (batch.isdigit() and int(batch) >= 1):  # joblib: "auto" or a positive int
        raise ConfigError(f"unknown value {shown(batch)} for hydra.launcher.batch_size; valid: auto, or a whole number >= 1")


def prepare(cfg) -> None:
    """Check (and connect) the configured launcher's engine; raise UserError for what a user can fix."""
    target = _target(cfg)
    if target.startswith("hydra_plugins.hydra_ray_launcher.ray_launcher."):
        connect_ray(OmegaConf.to_container(cfg.hydra.launcher.ray.init, resolve=True))
    elif target.startswith("hydra_plugins.hydra_submitit_launcher.") and target.endswith("SlurmLauncher"):
        quiet_sacct()
    elif target == SUBMITIT_LOCAL:
        _remove_stale_scratch()


@contextmanager
def finished(cfg) -> Iterator[None]:
    """Around a multirun's launches: after them, submitit's local job files (pickles, logs) have
    served their purpose, whichever way the multirun ended."""
    try:
        yield
    finally:
        if _target(cfg) == SUBMITIT_LOCAL:
            shutil.rmtree(scratch_dir(), ignore_errors=True)


def _target(cfg) -> str:
    return str(OmegaConf.select(cfg, "hydra.launcher._target_", default="") or "")


def scratch_dir() -> str:
    """`${lrt_scratch:}`: where `hydra/launcher=processes` keeps submitit's job files, this process's
    own folder under the temporary directory. Not in the study folder: it held them after every
    sweep (and a killed one's for good), and a results folder holds records, nothing a process
    unpickles. A SLURM sweep keeps them in the study folder, which its nodes share."""
    return str(Path(tempfile.gettempdir()) / SCRATCH / f"{platform.node()}-{os.getpid()}")


def _remove_stale_scratch() -> None:
    """The folders of sweeps on this machine that are gone (killed before `finished`)."""
    for folder in (Path(tempfile.gettempdir()) / SCRATCH).glob(f"{platform.node()}-*"):
        pid = folder.name.rpartition("-")[2]
        if pid.isdigit() and not _running(int(pid)):
            shutil.rmtree(folder, ignore_errors=True)


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process
        return True
    return True


if not OmegaConf.has_resolver("lrt_scratch"):
    OmegaConf.register_new_resolver("lrt_scratch", scratch_dir, use_cache=False)


def connect_ray(init: dict) -> None:
    """Connect to the Ray cluster at `init['address']` here, before launching: the plugin then uses
    this connection as it is. `local` and no address leave it to the plugin (it starts a cluster)."""
    address = init.get("address")
    if address in (None, "", "local"):
        return
    import ray

    if ray.is_initialized():  # an earlier multirun of this process (an adaptive sweep's round) connected
        return
    key = "hydra.launcher.ray.init.address"
    if address != "auto":
        _probe(key, str(address))
    try:
        ray.init(**{"logging_level": "warning", **init})
    except ConnectionError as e:
        raise UserError(
            f"{key}={address}: no running Ray cluster found ({_first_line(e)}); start one with "
            "`ray start --head`, give its HOST:PORT, or use hydra/launcher=ray_local"
        ) from None
    except (ValueError, TypeError) as e:
        raise UserError(f"hydra.launcher.ray.init: {_first_line(e)}") from None


def _probe(key: str, address: str, timeout_s: float = 5.0) -> None:
    """Fail in seconds where Ray would retry for minutes: is anything listening at HOST:PORT?"""
    hostport = address.split("://", 1)[-1]
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit():
        raise UserError(f"{key}={address}: expected HOST:PORT (e.g. 10.0.0.5:6379), ray://HOST:PORT, or auto")
    try:
        socket.create_connection((host, int(port)), timeout=timeout_s).close()
    except OSError as e:
        raise UserError(
            f"{key}={address}: no Ray cluster answers there ({e.strerror or e}); start one with "
            "`ray start --head --port PORT` on HOST, or use hydra/launcher=ray_local"
        ) from None


def _first_line(e: BaseException) -> str:
    return next((line.strip() for line in str(e).splitlines() if line.strip()), type(e).__name__)


def quiet_sacct() -> None:
    """Where `sacct` cannot answer (SLURM accounting off, as on a small cluster), say so once and
    stop submitit from calling it on every poll: each call printed sacct's error and submitit's
    warning. Job states then come from the job folders, which is how submitit collects results anyway."""
    import subprocess

    from submitit.slurm import slurm

    try:
        probe = subprocess.run(["sacct", "-n", "-X", "-j", "1"], capture_output=True, text=True, timeout=30)
        works = probe.returncode == 0
        why = _first_line(Exception(probe.stderr or probe.stdout or f"exit code {probe.returncode}"))
    except (OSError, subprocess.TimeoutExpired) as e:
        works, why = False, _first_line(e)
    if works or getattr(slurm.SlurmInfoWatcher, "_lrtransfer_quiet", False):
        return
    logging.getLogger(__name__).warning("sacct does not answer here (%s): job states are read from the job folders", why)
    slurm.SlurmInfoWatcher._make_command = lambda self: ["true"]  # no output: submitit's "state unknown"
    slurm.SlurmInfoWatcher._lrtransfer_quiet = True

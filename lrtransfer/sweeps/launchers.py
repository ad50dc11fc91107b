"""What lrtransfer adds around Hydra's launcher plugins, in the process that launches.

The plugins report a user's mistake late and loudly: a Ray address with no cluster
behind it hangs for minutes, then dies with a traceback; a plugin that is not
installed shows up as an unknown config option. `prepare` runs after every job is
validated and before any is launched, so those become one line (`UserError`) while
nothing has trained yet. It also keeps submitit's polling of `sacct` from warning on
every poll where SLURM accounting is not set up.
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

from lrtransfer.errors import UserError

# The plugins' own launcher configs, and the extra that installs each.
PLUGIN_EXTRAS = {"joblib": "joblib", "submitit_local": "submitit", "submitit_slurm": "submitit",
                 "ray": "ray", "ray_aws": "ray"}
SUBMITIT_LOCAL = "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher"
SCRATCH = "lrtransfer-submitit"


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

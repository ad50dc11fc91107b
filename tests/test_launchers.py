"""Jobs run under Hydra's launcher plugins give the same records as in-process jobs."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from tests.conftest import TINY, lrtransfer_cmd


def records(folder: Path) -> dict[str, list]:
    """job id -> each run's (lr, final loss, eval loss, diverged)."""
    out = {}
    for p in folder.glob("*/record.json"):
        rec = json.loads(p.read_text())
        assert rec["status"] == "complete"
        out[p.parent.name] = [(r["lr"], r["final_loss"], r["eval_loss"], r["diverged"]) for r in rec["runs"]]
    return out


def needs(module: str):
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=f"{module} not installed")


@pytest.fixture(scope="module")
def in_process(two_widths):
    """The reference: the same sweep with Hydra's basic (in-process) launcher (the session's)."""
    found = records(two_widths / "s")
    assert len(found) == 2
    return found


@needs("hydra_plugins.hydra_joblib_launcher")
def test_joblib_records_equal_in_process(cli, tmp_path, in_process):
    code, out, err = cli("sweep", *TINY, "width=16,32", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2",
                         f"results_dir={tmp_path}", "name=s")
    assert code == 0, err
    assert records(tmp_path / "s") == in_process
    threads = {json.loads(p.read_text())["threads"] for p in (tmp_path / "s").glob("*/record.json")}
    assert threads == {1}  # the launcher config's one thread per job reached the job


@needs("hydra_plugins.hydra_submitit_launcher")
def test_submitit_local_records_equal_in_process(cli, tmp_path, in_process):
    code, out, err = cli("sweep", *TINY, "width=16,32", "hydra/launcher=processes", f"results_dir={tmp_path}", "name=s")
    assert code == 0, err
    assert records(tmp_path / "s") == in_process


@needs("hydra_plugins.hydra_submitit_launcher")
def test_slurm_submission_script(tmp_path):
    """Without a cluster: the sbatch script submitit would submit for `hydra/launcher=slurm`."""
    from hydra import compose, initialize_config_module
    from omegaconf import OmegaConf
    from submitit.slurm.slurm import _make_sbatch_string

    import lrtransfer.config  # noqa: F401
    import lrtransfer.store  # noqa: F401

    with initialize_config_module("lrtransfer.conf", version_base="1.3"):
        cfg = compose("config", overrides=["hydra/launcher=slurm", "hydra.launcher.partition=gpu",
                                           "hydra.launcher.gpus_per_node=1", "hydra.launcher.timeout_min=90"],
                      return_hydra_config=True)
    launcher = OmegaConf.to_container(cfg.hydra.launcher, resolve=False)
    assert launcher["_target_"].endswith("SlurmLauncher") and launcher["max_num_timeout"] >= 1
    assert cfg.hydra.job.env_set.OMP_NUM_THREADS == "4"
    script = _make_sbatch_string(
        command="python -m submitit.core._submit /tmp/x",
        folder=str(tmp_path),
        job_name=launcher["name"],
        partition=launcher["partition"],
        time=launcher["timeout_min"],
        cpus_per_task=launcher["cpus_per_task"],
        gpus_per_node=launcher["gpus_per_node"],
        mem=f"{launcher['mem_gb']}GB",
        signal_delay_s=launcher["signal_delay_s"],
        setup=launcher["setup"],
    )
    for line in ["#SBATCH --partition=gpu", "#SBATCH --time=90", "#SBATCH --cpus-per-task=4",
                 "#SBATCH --gpus-per-node=1", "#SBATCH --mem=16GB", "#SBATCH --signal=USR2@120",
                 "#SBATCH --job-name=lrtransfer"]:
        assert line in script, line


@pytest.mark.slow
@needs("hydra_plugins.hydra_ray_launcher")
def test_ray_records_equal_in_process(tmp_path, in_process):
    # Ray's socket paths must stay under 108 bytes: a short temp dir of its own.
    ray_tmp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "RAY_TMPDIR": ray_tmp}
    try:
        subprocess.run(lrtransfer_cmd() + ["sweep", *TINY, "width=16,32", "hydra/launcher=ray_local",
                       f"results_dir={tmp_path}", "name=s"], check=True, env=env, timeout=600)
    finally:
        shutil.rmtree(ray_tmp, ignore_errors=True)
    assert records(tmp_path / "s") == in_process


RAY_TARGET = "hydra_plugins.hydra_ray_launcher.ray_launcher.RayLauncher"  # the plugin need not be installed


def shipped_launcher(name: str, *overrides: str):
    """conf/hydra/launcher/NAME.yaml's own keys under `hydra.launcher` (its plugin's defaults left out,
    so no plugin is needed), with OVERRIDES (dotted keys under hydra.launcher) merged in."""
    from omegaconf import OmegaConf

    import lrtransfer.sweeps.launchers  # noqa: F401  (the resolver of submitit's local folder)

    own = OmegaConf.load(Path(__file__).parents[1] / "lrtransfer" / "conf" / "hydra" / "launcher" / f"{name}.yaml")
    target = {"parallel": "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher",
              "processes": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
              "slurm": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher"}.get(name, RAY_TARGET)
    launcher = OmegaConf.merge({"_target_": target}, own.launcher, OmegaConf.from_dotlist(list(overrides)))
    return OmegaConf.create({"hydra": {"launcher": launcher}})


@pytest.mark.parametrize("name", ["parallel", "processes", "slurm", "ray_local", "ray_cluster"])
def test_every_shipped_launcher_config_passes_the_launcher_check(name):
    from lrtransfer.sweeps import launchers

    launchers.check(shipped_launcher(name))


@pytest.mark.parametrize("name", ["ray_local", "ray_cluster"])
@pytest.mark.parametrize("override, fragment", [
    ("ray.remote.num_cpus=-1", "hydra.launcher.ray.remote.num_cpus=-1 is out of range; valid: 0 .. 4,096 CPUs per job"),
    ("ray.remote.num_cpus=many", "hydra.launcher.ray.remote.num_cpus='many' is not a number; valid: 0 .. 4,096 CPUs per job"),
    ("ray.remote.num_gpus=-0.5", "hydra.launcher.ray.remote.num_gpus=-0.5 is out of range; valid: 0 .. "),
    ("ray.init.num_cpus=0", "hydra.launcher.ray.init.num_cpus=0 is out of range; valid: 1 .. 4,096 CPUs"),
])
def test_ray_launcher_values_are_checked_without_ray(name, override, fragment):
    """Ray met these only on the cluster, mid-launch (a negative count), or waited for ever (a cluster of no CPU)."""
    from lrtransfer.errors import UserError
    from lrtransfer.sweeps import launchers

    with pytest.raises(UserError) as e:
        launchers.check(shipped_launcher(name, override))
    assert fragment in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize("name, overrides, fragment", [
    ("ray_local", ["ray.init.num_cpus=2", "ray.remote.num_cpus=4"],
     "hydra.launcher.ray.remote.num_cpus=4 is more than the local Ray cluster's ray.init.num_cpus=2, so no job could "
     "start (they would wait for ever); valid: 0 .. 2"),
    ("slurm", ["timeout_min=2", "signal_delay_s=120"],
     "hydra.launcher.signal_delay_s=120 is not shorter than the time limit (timeout_min=2: 120 s), so every job "
     "would be told to stop as it starts; valid: 0 .. 119 seconds"),
])
def test_launcher_values_valid_alone_but_not_together_are_refused(name, overrides, fragment):
    """Each value passes alone; together, every job would wait for ever (Ray) or be signalled to stop as it starts."""
    from lrtransfer.errors import UserError
    from lrtransfer.sweeps import launchers

    launchers.check(shipped_launcher(name, *overrides[:1]))
    with pytest.raises(UserError) as e:
        launchers.check(shipped_launcher(name, *overrides))
    assert str(e.value) == fragment

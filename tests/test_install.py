"""However lrtransfer is installed, a sweep finds its Hydra sweeper plugin.

Hydra discovers plugins by listing the `hydra_plugins` namespace package on disk,
which a PEP 660 editable install (a plain `pip install -e .`, what the Makefile
does) does not show it; `lrtransfer.conf` registers the sweeper itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY, lrtransfer_cmd

ROOT = Path(__file__).resolve().parents[1]


def _clean_env() -> dict:
    """No PYTHONPATH: the package must come from the install, not from the source tree."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def test_the_installed_command_finds_the_sweeper_outside_the_source_tree(tmp_path):
    # cwd outside the repository: only the install can provide hydra_plugins.lrtransfer_sweeper
    out = subprocess.run([*lrtransfer_cmd(), "sweep", "--plan", *TINY, "width=16,32", f"results_dir={tmp_path}"],
                         cwd=tmp_path, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "2 job(s): 2 missing" in out.stdout


@pytest.mark.slow
def test_a_plain_editable_install_in_a_fresh_venv_runs_a_sweep(tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, "torch==2.13.0"], check=True, timeout=900)
    subprocess.run([*pip, "-e", str(ROOT)], check=True, timeout=900)  # PEP 660: no compat mode
    work = tmp_path / "work"
    work.mkdir()
    out = subprocess.run([str(venv / "bin" / "lrtransfer"), "sweep", "width=16,32", "train.steps=5", "engine.progress=false",
                          f"results_dir={work}"], cwd=work, env=_clean_env(), capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "2 job(s) ran" in out.stdout
    assert len(list(work.glob("default/*/record.json"))) == 2

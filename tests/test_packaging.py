"""An installed wheel carries the configs and the sweeper plugin, not only the source tree."""

from __future__ import annotations

import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_ships_configs_and_sweeper_plugin(tmp_path):
    # built from a clean copy: setuptools would reuse a stale build/ in the source tree
    source = tmp_path / "src"
    shutil.copytree(ROOT, source, symlinks=True, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "results", "*.egg-info", ".pytest_cache", "__pycache__"))
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(tmp_path), str(source)],
        check=True, capture_output=True, timeout=300,
    )
    (wheel,) = tmp_path.glob("lrtransfer-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped_yaml = {n for n in names if n.startswith("lrtransfer/conf/") and n.endswith(".yaml")}
    source_yaml = {str(p.relative_to(ROOT)) for p in (ROOT / "lrtransfer" / "conf").rglob("*.yaml")}
    assert source_yaml and shipped_yaml == source_yaml
    assert "lrtransfer/conf/__init__.py" in names
    # every module of every subpackage (a package left out of pyproject's list is missing
    # from an installed wheel, though an editable install finds it)
    source_py = {str(p.relative_to(ROOT)) for p in (ROOT / "lrtransfer").rglob("*.py")}
    assert sorted(source_py - names) == []
    assert "hydra_plugins/lrtransfer_sweeper/lrtransfer_sweeper.py" in names
    assert not any(n.startswith("hydra_plugins/__init__") for n in names)  # a namespace package

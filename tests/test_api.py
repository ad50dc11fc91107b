"""The Python API: the docs example runs, errors are UserError, the caller's process is left as found."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import TINY

ROOT = Path(__file__).resolve().parents[1]


def test_the_docs_example_runs(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "docs" / "api_example.py")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["missing width=16 100 run-steps", "missing width=32 100 run-steps"]
    assert "ran 2 skipped 0 failed 0" in lines
    assert any(line.startswith("best log2 LR per width: {16: ") for line in lines)
    assert "UserError: unknown option 'adamw' for optim (did you mean 'adam'?); valid: adam, muon, sgd" in lines


def test_import_stays_light():
    code = "import sys, lrtransfer; print(sorted(m for m in ('torch', 'hydra', 'pandas', 'matplotlib') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_sweep_leaves_the_callers_environment_and_logging_as_found(tmp_path, monkeypatch):
    import lrtransfer

    from lrtransfer.sweeps import job

    monkeypatch.delenv("HYDRA_FULL_ERROR", raising=False)
    monkeypatch.delenv("TORCHINDUCTOR_CACHE_DIR", raising=False)
    real = job.run_job

    def as_pytorch_does(cfg):  # PyTorch sets it as torch.func first loads torch._dynamo (issue 40, case 13)
        os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(tmp_path / "inductor"))
        return real(cfg)

    monkeypatch.setattr(job, "run_job", as_pytorch_does)
    before = dict(os.environ)
    root = logging.getLogger()
    handlers, level = list(root.handlers), root.level
    result = lrtransfer.sweep([*TINY, "width=16", f"results_dir={tmp_path}", "name=e"])
    assert result["ran"] == 1 and result["groups"][0]["scales"] == [16]
    assert dict(os.environ) == before
    assert root.handlers == handlers and root.level == level
    assert len(lrtransfer.load(tmp_path)) == 5  # 5 LRs
    assert lrtransfer.sweep([*TINY, "width=16", f"results_dir={tmp_path}", "name=e"])["skipped"] == 1

    monkeypatch.setenv("HYDRA_FULL_ERROR", "0")
    with pytest.raises(lrtransfer.UserError, match=r"^width must be positive, got 0"):
        lrtransfer.sweep([*TINY, "width=0", f"results_dir={tmp_path}"])
    assert os.environ["HYDRA_FULL_ERROR"] == "0"


def test_api_errors_are_one_line_user_errors(tmp_path):
    import lrtransfer

    with pytest.raises(lrtransfer.UserError, match="no finished records"):
        lrtransfer.load(tmp_path)
    with pytest.raises(lrtransfer.UserError, match=r"unknown metric 'acc'; valid: "):
        lrtransfer.summarize(tmp_path, metric="acc")
    with pytest.raises(lrtransfer.UserError, match=r"unknown key 'widht' \(did you mean 'width'\?\)"):
        lrtransfer.plan(["widht=3"])

"""The Python API: the docs example runs, errors are UserError, the caller's process is left as found."""

from __future__ import annotations

import logging
import os
import re
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


@pytest.fixture
def no_training(monkeypatch):
    """`launch` fails the test if reached: what is checked here is refused before any job is composed."""
    from lrtransfer.sweeps import launch

    def reached(*args, **kwargs):
        raise AssertionError(f"launch reached with {args} {kwargs}")

    monkeypatch.setattr(launch, "launch", reached)


@pytest.mark.parametrize("kwargs, message", [
    ({"metric": "bogus"}, r"^unknown metric 'bogus'; valid: train_loss"),  # was: after the whole sweep
    ({"metric": None}, r"^metric must be a str such as 'train_loss', got None \(NoneType\)$"),
    ({"rerun": "no"}, r"^rerun must be True or False, got 'no' \(str\)$"),
    ({"until_decided": 1}, r"^until_decided must be True or False, got 1 \(int\)$"),
    ({"until_decided": True, "budget": True}, r"^budget must be run-steps \(20000\) or a time \('90m'\), got True"),
])
def test_sweep_refuses_bad_arguments_before_training(no_training, kwargs, message):
    import lrtransfer

    with pytest.raises(lrtransfer.UserError, match=message):
        lrtransfer.sweep([*TINY, "width=16,32"], **kwargs)


OVERRIDES = r"^overrides must be a list of str such as \['width=64,256', 'optim=sgd'\] \(or one space-separated str\), got "


@pytest.mark.parametrize("overrides, message", [
    (None, OVERRIDES + r"None \(NoneType\)$"),
    (5, OVERRIDES + r"5 \(int\)$"),
    ({"width": "16,32"}, OVERRIDES + r"\{'width': '16,32'\} \(dict\)$"),  # was: its keys, as overrides
    (["width=16", 32], r"^overrides\[1\] must be a str such as 'width=64', got 32 \(int\)$"),
    (["-h"], r"^overrides\[0\] '-h' is a CLI flag, not an override; help\(lrtransfer.sweep\)"),  # was: SystemExit(0)
    (["--help"], r"^overrides\[0\] '--help' is a CLI flag"),
    (["--cfg", "job"], r"^overrides\[0\] '--cfg' is a CLI flag, not an override; lrtransfer.plan\(overrides\) lists"),
    ("width=16 --info", r"^overrides\[1\] '--info' is a CLI flag"),
    (["-m", "width=16"], r"^overrides\[0\] '-m' is a CLI flag, not an override; the API always runs a sweep"),
    (["--until-decided"], r"is a CLI flag, not an override; pass until_decided=True$"),
    (["--budget=90m"], r"is a CLI flag, not an override; pass budget=\.\.\.$"),
    (["--frobnicate"], r"is a CLI flag, not an override; the API takes key=value overrides only$"),
])
def test_plan_and_sweep_refuse_overrides_that_are_no_list_of_overrides(no_training, capsys, overrides, message):
    import lrtransfer

    for function in (lrtransfer.plan, lrtransfer.sweep):
        with pytest.raises(lrtransfer.UserError, match=message):
            function(overrides)
    assert capsys.readouterr().out == ""  # no Hydra help printed into the notebook


DIRECTORY = r"^directory must be a path \(a str or pathlib.Path\), got "


@pytest.mark.parametrize("call, message", [
    (lambda api, d: api.summarize(None), DIRECTORY + r"None \(NoneType\)$"),
    (lambda api, d: api.summarize({"a": 1}), DIRECTORY + r"\{'a': 1\} \(dict\)$"),
    (lambda api, d: api.summarize(123), DIRECTORY + r"123 \(int\)$"),
    (lambda api, d: api.summarize(d, metric=5), r"^metric must be a str such as 'train_loss', got 5 \(int\)$"),
    (lambda api, d: api.load(None), DIRECTORY + r"None \(NoneType\)$"),
    (lambda api, d: api.load([d]), DIRECTORY + r"\[PosixPath\('.* \(list\)$"),
    (lambda api, d: api.load(b"results"), DIRECTORY + r"b'results' \(bytes\)$"),
    (lambda api, d: api.load(""), DIRECTORY + r"'' \(give '.' for this folder\)$"),
    (lambda api, d: api.predict(None, 128), DIRECTORY + r"None \(NoneType\)$"),
    (lambda api, d: api.predict(d, "128"), r"^at must be a positive number \(the scale, e.g. 4096\), got '128' \(str\)$"),
    (lambda api, d: api.predict(d, None), r"^at must be a positive number .*, got None \(NoneType\)$"),
    (lambda api, d: api.predict(d, 1j), r"^at must be a positive number .*, got 1j \(complex\)$"),
    (lambda api, d: api.predict(d, True), r"^at must be a positive number .*, got True \(bool\)$"),  # was: taken as 1
    (lambda api, d: api.predict(d, 10**400), r"^at must be a finite positive number .*, got 1000000.*\.\.\. \(int\)$"),
    (lambda api, d: api.predict(d, float("nan")), r"^at must be a finite positive number .*, got nan \(float\)$"),
    (lambda api, d: api.predict(d, -4), r"^at must be a finite positive number .*, got -4 \(int\)$"),
    (lambda api, d: api.predict(d, 1e300), r"^at=1e\+300 is beyond the sane range of a scale, 1e-30 to 1e\+30$"),
    (lambda api, d: api.predict(d, 128, axis=5), r"^axis must be a str such as 'width', got 5 \(int\)$"),
])
def test_api_refuses_wrong_types_in_one_line(tmp_path, call, message):
    import lrtransfer

    with pytest.raises(lrtransfer.UserError, match=message) as e:  # before any record is read
        call(lrtransfer, tmp_path)
    assert "\n" not in str(e.value)


def test_the_memory_refusal_shows_a_tiny_budget_in_significant_digits(tmp_path):
    import lrtransfer

    with pytest.raises(lrtransfer.UserError) as e:
        lrtransfer.plan([*TINY, "width=16", "engine.max_memory_gb=0.0000001", f"results_dir={tmp_path}"])
    text = str(e.value)
    assert re.search(r"one run needs about [1-9][0-9.]*e-0\d GiB \(estimated\), more than "
                     r"engine.max_memory_gb=1e-07 \(1e-07 GiB; cpu has [1-9][0-9.,]* GiB\)", text), text
    assert "0.0 GiB" not in text  # was: needs about 0.0 GiB, more than ... (0.0 GiB; ...)

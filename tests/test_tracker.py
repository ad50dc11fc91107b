"""Experiment trackers (`tracker=tensorboard|wandb|mlflow`): each run's curve and final
numbers reach the tracker's own local files, read back here with the tracker's own
reader; a tracker changes no job's identity, a missing library is refused before
training, and a tracker failure costs one warning, never the record."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from tests.conftest import TINY, compose

TRACKERS = ("tensorboard", "wandb", "mlflow")
EXIT = sys.exit  # before any tracker ran here
PACKAGE = {"tensorboard": "tensorboard", "wandb": "wandb", "mlflow": "mlflow"}
# one job of two LR runs; the final numbers of both are finite
SWEEP = [*TINY, "width=16", "lr.log2_min=-10", "lr.log2_max=-9", "engine.threads=1"]


def _records(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.rglob("record.json"))]


def _curve(run: dict) -> list[tuple[int, float]]:
    return [(s, v) for s, v in zip(run["history_step"], run["history_loss"]) if v is not None]


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """tracker -> (results folder of a one-job study logged to it, its record)."""
    from lrtransfer.sweeps.launch import launch

    out = {}
    for name in TRACKERS:
        if importlib.util.find_spec(PACKAGE[name]) is None:
            continue  # its tests skip, naming the extra
        root = tmp_path_factory.mktemp(name)
        launch([*SWEEP, f"tracker={name}", f"results_dir={root}", "name=study"])
        (record,) = _records(root)
        assert record["status"] == "complete" and len(record["runs"]) == 2
        out[name] = (root / "study", record)
    return out


def _swept(swept, name):
    if name not in swept:
        pytest.skip(f"{PACKAGE[name]} is not installed (pip install 'lrtransfer[{name}]')")
    return swept[name]


# ---------------------------------------------------------------- identity, options, errors
def test_every_tracker_is_an_option_of_the_group():
    from lrtransfer import options

    assert set(options.of("tracker")) == {"none", *TRACKERS}


@pytest.mark.parametrize("name", TRACKERS)
def test_a_tracker_changes_no_job_id(name):
    from lrtransfer.config import semantic
    from lrtransfer.store import job_id

    for over in ([], ["param=mup", "width=64"], ["model=resnet", "optim=sgd"]):
        assert job_id(compose(*over, f"tracker={name}")) == job_id(compose(*over))
        assert "tracker" not in semantic(compose(*over, f"tracker={name}"))


def test_the_analysis_never_groups_by_tracker():
    from lrtransfer.analysis import config_columns

    df = pd.DataFrame({"width": [16], "param.name": ["sp"], "tracker.name": ["wandb"], "tracker.dir": ["x"]})
    assert config_columns(df) == ["width", "param.name"]


@pytest.mark.parametrize("name", TRACKERS)
def test_a_missing_library_is_refused_before_training(cli, tmp_path, monkeypatch, name):
    monkeypatch.setitem(sys.modules, PACKAGE[name], None)  # find_spec then finds nothing
    code, out, err = cli("sweep", *SWEEP, f"tracker={name}", f"results_dir={tmp_path}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1, err
    assert f"tracker={name} needs the {PACKAGE[name]} package" in lines[0]
    assert f"pip install 'lrtransfer[{name}]'" in lines[0]
    assert not list(tmp_path.rglob("record.json"))


def test_composing_and_validating_imports_no_tracker_library():
    code = (
        "import sys\n"
        "from lrtransfer.config import ConfigError\n"
        "from tests.conftest import typed\n"
        "for t in ('none', 'tensorboard', 'wandb', 'mlflow'):\n"
        "    try:\n"
        "        assert typed(f'tracker={t}').tracker.name == t\n"
        "    except ConfigError as e:  # not installed here\n"
        "        assert 'needs the' in str(e), e\n"
        "bad = sorted(m for m in ('wandb', 'mlflow', 'tensorboard', 'torch.utils.tensorboard') if m in sys.modules)\n"
        "assert not bad, bad\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=Path(__file__).parents[1])
    assert result.returncode == 0, result.stderr


def test_a_tracker_failure_is_one_warning_and_the_record_stays(cli, tmp_path, monkeypatch):
    from lrtransfer.options.tracker import none

    def broken(options, job):
        raise RuntimeError("the tracker's disk is full\nsecond line")

    monkeypatch.setattr(none, "log", broken)
    code, out, err = cli("sweep", *SWEEP, f"results_dir={tmp_path}")
    assert code == 0, err
    (record,) = _records(tmp_path)
    assert record["status"] == "complete"
    warnings = [line for line in (out + err).splitlines() if "was not logged" in line]
    assert len(warnings) == 1, out + err
    assert f"tracker=none: job {record['job_id']} was not logged (RuntimeError: the tracker's disk is full)" in warnings[0]


def test_the_job_tags_name_what_made_it(monkeypatch, tmp_path):
    """The overrides a tracker tags a job with are the ones that tell jobs apart."""
    from lrtransfer.sweeps.launch import launch
    from lrtransfer.options.tracker import none

    seen = []
    monkeypatch.setattr(none, "log", lambda options, job: seen.append(job))
    launch([*SWEEP, "param=mup", f"results_dir={tmp_path}", "name=tagged"])
    (job,) = seen
    (record,) = _records(tmp_path)
    assert job.job_id == record["job_id"] and job.study == "tagged"
    assert job.study_dir == tmp_path / "tagged"
    assert "param=mup" in job.overrides.split() and "width=16" in job.overrides.split()
    assert not any(o.startswith(("engine.", "results_dir", "name=")) for o in job.overrides.split())
    assert job.title.startswith("mlp mup adam w=16")
    assert job.config["param.name"] == "mup" and "engine.threads" not in job.config
    assert job.runs == record["runs"]


# ---------------------------------------------------------------- TensorBoard
def _tb(folder: Path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(folder))
    acc.Reload()
    return acc


def test_tensorboard_event_files_hold_each_runs_curve_and_final_numbers(swept):
    study, record = _swept(swept, "tensorboard")
    from tensorboard.plugins.hparams import plugin_data_pb2

    for run in record["runs"]:
        folder = study / "tensorboard" / record["job_id"] / f"log2_lr={run['log2_lr']:g},seed={run['seed']}"
        assert len(list(folder.glob("events.out.tfevents.*"))) == 1
        acc = _tb(folder)
        logged = [(e.step, e.value) for e in acc.Scalars("train_loss")]
        assert [s for s, _ in logged] == [s for s, _ in _curve(run)]
        assert [v for _, v in logged] == pytest.approx([v for _, v in _curve(run)], rel=1e-6)
        for key in ("final_loss", "eval_loss", "eval_acc"):
            (event,) = acc.Scalars(f"final/{key}")
            assert event.value == pytest.approx(run[key], rel=1e-6) and event.step == run["history_step"][-1]
        assert acc.Scalars("final/diverged")[0].value == 0.0
        content = acc.PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hp = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
        assert hp["log2_lr"].number_value == run["log2_lr"] and hp["seed"].number_value == run["seed"]
        assert hp["job_id"].string_value == record["job_id"] and hp["study"].string_value == "study"
        assert hp["width"].number_value == 16


def test_tensorboard_a_skipped_job_is_not_relogged_and_a_rerun_replaces_its_files(swept):
    from lrtransfer.sweeps.launch import launch

    study, record = _swept(swept, "tensorboard")
    files = lambda: sorted(p for p in (study / "tensorboard").rglob("events.out.tfevents.*"))  # noqa: E731
    before = {p: p.stat().st_mtime_ns for p in files()}
    launch([*SWEEP, "tracker=tensorboard", f"results_dir={study.parent}", "name=study"])
    assert {p: p.stat().st_mtime_ns for p in files()} == before  # done: skipped, not logged again
    launch([*SWEEP, "tracker=tensorboard", f"results_dir={study.parent}", "name=study", "hydra.sweeper.rerun=true"])
    after = files()
    assert len(after) == len(before) == 2 and set(after) != set(before)  # one fresh file per run


def test_a_tracker_that_cannot_write_warns_and_keeps_the_record(cli, tmp_path):
    pytest.importorskip("tensorboard", reason="pip install 'lrtransfer[tensorboard]'")
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    code, out, err = cli("sweep", *SWEEP, "tracker=tensorboard", f"tracker.dir={blocker}/tb", f"results_dir={tmp_path}")
    assert code == 0, err
    (record,) = _records(tmp_path)
    assert record["status"] == "complete"
    assert sum("tracker=tensorboard: job" in line and "was not logged" in line for line in (out + err).splitlines()) == 1


# ---------------------------------------------------------------- Weights & Biases (offline)
def _wandb_records(path: Path) -> list:
    """The records of a W&B run file: a LevelDB-style log (32 KiB blocks of
    crc32/length/type-framed chunks after a 7-byte `:W&B` header) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2 as pb

    data = path.read_bytes()
    assert data[:4] == b":W&B"
    pos, block, part, out = 7, 32768, b"", []
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _, length, kind = struct.unpack("<IHB", data[pos:pos + 7])
        part += data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind in (1, 4):  # FULL or LAST: a whole record
            record = pb.Record()
            record.ParseFromString(part)
            out.append(record)
            part = b""
    return out


def _wandb_run(path: Path) -> dict:
    run, curve, summary = None, [], {}
    for r in _wandb_records(path):
        kind = r.WhichOneof("record_type")
        if kind == "run":
            run = r.run
        elif kind == "history":
            items = {i.key or "/".join(i.nested_key): json.loads(i.value_json) for i in r.history.item}
            if "train_loss" in items:
                curve.append((items["_step"], items["train_loss"]))
        elif kind == "summary":
            summary.update({i.key: json.loads(i.value_json) for i in r.summary.update if i.key})
    config = {i.key: json.loads(i.value_json) for i in run.config.update}
    return {"run": run, "config": config, "curve": curve, "summary": summary}


def test_wandb_offline_runs_hold_each_runs_curve_and_final_numbers(swept):
    study, record = _swept(swept, "wandb")
    found = [_wandb_run(p) for p in sorted((study / "wandb").glob("offline-run-*/run-*.wandb"))]
    assert len(found) == 2
    by_lr = {f["config"]["log2_lr"]: f for f in found}
    for run in record["runs"]:
        logged = by_lr[run["log2_lr"]]
        assert logged["run"].project == "study" and logged["run"].run_group == record["job_id"]
        assert record["job_id"] in logged["run"].tags
        assert logged["config"]["seed"] == run["seed"] and logged["config"]["job_id"] == record["job_id"]
        assert logged["config"]["width"] == 16 and logged["config"]["param.name"] == "standard"
        assert [s for s, _ in logged["curve"]] == [s for s, _ in _curve(run)]
        assert [v for _, v in logged["curve"]] == pytest.approx([v for _, v in _curve(run)], rel=1e-6)
        for key in ("final_loss", "eval_loss", "eval_acc", "diverged"):
            assert logged["summary"][key] == pytest.approx(run[key], rel=1e-6)


def test_wandb_leaves_the_callers_process_as_it_found_it(swept):
    _swept(swept, "wandb")
    assert not [k for k in os.environ if k.startswith("WANDB_")]  # its service was stopped
    assert sys.exit is EXIT  # wandb.init wraps sys.exit and sys.excepthook (Typer sets its own excepthook)
    assert "wandb" not in repr(sys.excepthook)


# ---------------------------------------------------------------- MLflow (file store)
def _mlflow_client(study: Path):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=(study / "mlruns").resolve().as_uri())


def test_mlflow_file_store_holds_a_run_per_job_and_a_nested_run_per_lr(swept, monkeypatch):
    study, record = _swept(swept, "mlflow")
    assert "MLFLOW_ALLOW_FILE_STORE" not in os.environ  # logging set it for its own calls only
    monkeypatch.setenv("MLFLOW_ALLOW_FILE_STORE", "true")  # MLflow's own opt-in to reading a file store
    client = _mlflow_client(study)
    experiment = client.get_experiment_by_name("study")
    runs = client.search_runs([experiment.experiment_id])
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    (parent,) = parents
    assert parent.data.tags["job_id"] == record["job_id"] and parent.info.run_name.startswith("mlp standard adam w=16")
    assert parent.data.params["width"] == "16" and parent.info.status == "FINISHED"
    children = {float(r.data.params["log2_lr"]): r for r in runs if r.data.tags.get("mlflow.parentRunId") == parent.info.run_id}
    assert sorted(children) == sorted(r["log2_lr"] for r in record["runs"])
    for run in record["runs"]:
        child = children[run["log2_lr"]]
        assert child.data.tags["job_id"] == record["job_id"] and child.data.params["seed"] == str(run["seed"])
        history = client.get_metric_history(child.info.run_id, "train_loss")
        logged = sorted((m.step, m.value) for m in history)
        assert [s for s, _ in logged] == [s for s, _ in _curve(run)]
        assert [v for _, v in logged] == pytest.approx([v for _, v in _curve(run)], rel=1e-6)
        for key in ("final_loss", "eval_loss", "eval_acc"):
            assert child.data.metrics[key] == pytest.approx(run[key], rel=1e-6)
        assert child.data.metrics["diverged"] == 0.0
        assert all(math.isfinite(m.value) for m in history)


def test_the_cli_imports_no_tracker():
    """`lrtransfer --help` stays instant: no tracker module or library on the CLI's import path."""
    names = ("lrtransfer.options.tracker", "wandb", "mlflow", "tensorboard")
    code = f"import sys, lrtransfer.cli.app; print([m for m in {names!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ---------------------------------------------------------------- a diverged run, every tracker
DIVERGED = {"log2_lr": 2.0, "lr": 4.0, "seed": 3, "initial_loss": 2.3, "final_loss": None, "diverged": True,
            "diverged_step": 20, "eval_loss": None, "eval_acc": None,
            "history_step": [0, 10, 20, 30], "history_loss": [2.3, 9.5, None, None]}


def _diverged_job(study_dir: Path):
    from lrtransfer.options.tracker import Job

    return Job(study="study", job_id="abc123", title="mlp standard adam w=16 d=3 s=3", overrides="width=16",
               study_dir=study_dir, config={"width": 16, "param.name": "standard"}, runs=[DIVERGED])


@pytest.mark.parametrize("name", TRACKERS)
def test_a_diverged_run_logs_its_curve_up_to_divergence_and_no_final_loss(name, tmp_path):
    pytest.importorskip(PACKAGE[name], reason=f"pip install 'lrtransfer[{name}]'")
    from lrtransfer import options

    module = options.module("tracker", name)
    module.log(module.OPTIONS(), _diverged_job(tmp_path))
    if name == "tensorboard":
        acc = _tb(tmp_path / "tensorboard" / "abc123" / "log2_lr=2,seed=3")
        curve = [(e.step, e.value) for e in acc.Scalars("train_loss")]
        finals = {t.removeprefix("final/"): acc.Scalars(t)[-1].value for t in acc.Tags()["scalars"] if t.startswith("final/")}
    elif name == "wandb":
        (path,) = (tmp_path / "wandb").glob("offline-run-*/run-*.wandb")
        logged = _wandb_run(path)
        curve, finals = logged["curve"], logged["summary"]
    else:
        with pytest.MonkeyPatch.context() as mp:
            mp.setenv("MLFLOW_ALLOW_FILE_STORE", "true")
            client = _mlflow_client(tmp_path)
            runs = client.search_runs([client.get_experiment_by_name("study").experiment_id])
            (child,) = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
            curve = [(m.step, m.value) for m in client.get_metric_history(child.info.run_id, "train_loss")]
            finals = child.data.metrics
    assert [s for s, _ in sorted(curve)] == [0, 10]
    assert [v for _, v in sorted(curve)] == pytest.approx([2.3, 9.5])
    assert "final_loss" not in finals and "eval_loss" not in finals
    assert finals["diverged"] == 1 and finals["diverged_step"] == 20 and finals["initial_loss"] == pytest.approx(2.3)


def test_runs_of_a_grid_job_are_logged_apart_with_their_value(tmp_path):
    """A job with a second inner axis (`grid.<key>`) has runs that share LR and seed: each
    gets its own TensorBoard folder and carries its value as a tag."""
    if importlib.util.find_spec("tensorboard") is None:
        pytest.skip("tensorboard is not installed (pip install 'lrtransfer[tensorboard]')")
    from tensorboard.plugins.hparams import plugin_data_pb2

    from lrtransfer.sweeps.launch import launch

    launch([*SWEEP, "lr.log2_max=-10", "grid.optim.weight_decay=[0,0.01]", "tracker=tensorboard",
            f"results_dir={tmp_path}", "name=study"])
    (record,) = _records(tmp_path)
    folders = sorted((tmp_path / "study" / "tensorboard" / record["job_id"]).iterdir())
    assert [f.name for f in folders] == ["log2_lr=-10,seed=0,optim.weight_decay=0",
                                         "log2_lr=-10,seed=0,optim.weight_decay=0.01"]
    for folder, run in zip(folders, sorted(record["runs"], key=lambda r: r["grid"]["optim.weight_decay"])):
        content = _tb(folder).PluginTagToContent("hparams")["_hparams_/session_start_info"]
        hp = plugin_data_pb2.HParamsPluginData.FromString(content).session_start_info.hparams
        assert hp["optim.weight_decay"].number_value == run["grid"]["optim.weight_decay"]

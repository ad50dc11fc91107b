"""Records: stable job identity, atomic writes, corrupt files named and skipped."""

from __future__ import annotations

import json
import re

import pytest

from lrtransfer.store import RecordError, is_complete, iter_records, job_id, read_record, record_problem, write_record
from tests.conftest import compose

RUN = {"seed": 0, "lr": 2.0**-8, "log2_lr": -8.0, "final_loss": 1.0, "diverged": False}


def test_job_id_ignores_where_and_how_but_not_what():
    base = job_id(compose())
    assert job_id(compose("results_dir=/elsewhere", "name=other", "engine.batched=false", "engine.device=cpu")) == base
    assert job_id(compose("width=64")) != base
    assert job_id(compose("optim=sgd")) != base
    assert job_id(compose("lr.log2_min=-13")) != base


def test_a_custom_models_job_id_is_the_one_it_had_before_imports_counted(monkeypatch):
    """Ids computed by lrtransfer at b592ecf (before a job's identity followed the files a model file
    imports, issue 40) for a one-file model: where nothing changed, the records made then are found.
    Those jobs drew PyTorch's default init (model.init=torch); the own init (the default since issue
    35) trains other numbers, so its jobs have ids of their own."""
    from pathlib import Path

    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    factory = ["model=custom", "model.target=tests/identity_net.py:build", "model.init=torch"]
    configured = ["model=custom", "model.target=tests/identity_net.py:Net", "model.config=tests/identity_net.py:NetConfig",
                  "model.width_key=hidden", "model.config_kwargs={inputs: 32, classes: 10}", "model.init=torch"]
    assert (job_id(compose(*factory)), job_id(compose(*configured))) == ("545adb86e51f", "10f98ab597f3")
    assert job_id(compose(*factory[:-1])) not in ("545adb86e51f", job_id(compose(*configured[:-1])))

    from omegaconf import OmegaConf

    cfg = compose()
    assert job_id(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)) == job_id(cfg)


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    write_record(tmp_path, {"status": "complete", "config": {}, "runs": [RUN]})
    assert [p.name for p in tmp_path.iterdir()] == ["record.json"]
    assert read_record(tmp_path / "record.json")["format"] == 1
    assert is_complete(tmp_path)


def test_failed_or_missing_record_is_not_complete(tmp_path):
    assert not is_complete(tmp_path)
    write_record(tmp_path, {"status": "failed", "config": {}, "error": "boom"})
    assert not is_complete(tmp_path)


@pytest.mark.parametrize("content", ["{not json", json.dumps([1, 2]), json.dumps({"status": "complete", "config": {}})])
def test_corrupt_records_are_named_and_skipped(tmp_path, content):
    bad = tmp_path / "a" / "record.json"
    bad.parent.mkdir()
    bad.write_text(content)
    write_record(tmp_path / "b", {"status": "complete", "config": {}, "runs": [RUN]})
    with pytest.raises(RecordError, match=str(bad)):
        read_record(bad)
    with pytest.warns(UserWarning, match="a/record.json"):
        found = list(iter_records(tmp_path))
    assert [p.parent.name for p, _ in found] == ["b"]


def _nested(depth: int):
    node: dict = {}
    for _ in range(depth):
        node = {"a": node}
    return node


@pytest.mark.parametrize("change, why", [
    ({"runs": [{**RUN, "final_loss": "x"}]}, "run 0: final_loss='x' is not a finite number"),
    ({"runs": [RUN, {**RUN, "log2_lr": float("nan"), "final_loss": float("inf")}]}, "run 1: log2_lr=nan is not a finite number"),
    ({"runs": [{**RUN, "final_loss": float("inf")}]}, "run 0: final_loss=inf is not a finite number"),
    ({"runs": [{**RUN, "seed": "0"}]}, "run 0: seed='0' is not a whole number"),
    ({"runs": [{**RUN, "lr": -1.0}]}, "run 0: lr=-1.0 is not a finite positive number"),
    ({"runs": [{**RUN, "diverged": "no"}]}, "run 0: diverged='no' is not true or false"),
    ({"runs": [{k: v for k, v in RUN.items() if k != "final_loss"}]}, "run 0: no final_loss"),
    ({"runs": [{**RUN, "history_loss": ["x"]}]}, "run 0: history_loss=['x'] is not a list of numbers"),
    ({"runs": [7]}, "run 0: a int, not a mapping"),
    ({"runs": []}, "complete record with no runs"),
    ({"config": {"grid": {"optim": {"weight_decay": [0.0, 0.1]}}}}, "run 0: grid.optim.weight_decay=None is not a finite number"),
    ({"config": [1]}, "config is a list, not a mapping"),
    ({"job_id": ["a"]}, "job_id=['a'] is not a string"),
    ({"config": {"model": {"kwargs": _nested(40)}}}, "nested deeper than 32 levels"),
])
def test_a_record_with_a_bad_value_is_refused_naming_it(tmp_path, change, why):
    """A complete record is read whole or not at all: a value the analysis would coerce or drop
    (a loss of 'x', a NaN learning rate) names the run and the key (issue 40, case 3)."""
    path = write_record(tmp_path, {"status": "complete", "config": {}, "runs": [RUN], **change})
    with pytest.raises(RecordError, match=re.escape(why)):
        read_record(path)
    assert not is_complete(tmp_path)  # so a sweep recomputes the job


def test_what_a_job_writes_is_read():
    """The values the engine writes for a diverged run (no final loss) and a held-out loss that
    overflowed are numbers where numbers belong."""
    diverged = {**RUN, "lr": 2.0**-7, "log2_lr": -7.0, "final_loss": None, "diverged": True, "diverged_step": 3, "initial_loss": 2.3,
                "eval_loss": float("nan"), "eval_acc": None, "history_step": [0, 3], "history_loss": [2.3, None]}
    assert record_problem({"status": "complete", "config": {}, "runs": [RUN, diverged]}) is None


def test_a_record_nested_100000_deep_is_one_line_not_a_recursion_error(tmp_path):
    path = tmp_path / "record.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(RecordError, match="unreadable record \\(nested deeper than 32 levels\\)"):
        read_record(path)


def test_rounds_file_keeps_other_sweeps_groups_and_skips_what_it_cannot_read(tmp_path):
    from lrtransfer.store import ROUNDS_NAME, read_rounds, write_rounds

    def group(jobs, ended="decided"):
        return {"jobs": jobs, "run_steps": 10, "ended": ended, "rounds": [
            {"round": 1, "added": "width 8: log2 LR -8", "run_steps": 10, "drift": None, "drift_ci": None,
             "verdict": "undetermined", "state": "refining"}]}

    write_rounds(tmp_path, [group(["a", "b"]), group(["c"])])
    write_rounds(tmp_path, [group(["b", "d"], ended="budget")])  # the same group again (a job in common): replaced
    assert [g["jobs"] for g in read_rounds(tmp_path / ROUNDS_NAME)] == [["c"], ["b", "d"]]
    bad = {"groups": [group(["e"]), {**group(["f"]), "rounds": [{"round": "one"}]}]}
    (tmp_path / ROUNDS_NAME).write_text(json.dumps(bad))
    assert [g["jobs"] for g in read_rounds(tmp_path / ROUNDS_NAME)] == [["e"]]  # the malformed group left out
    (tmp_path / ROUNDS_NAME).write_text("{not json")
    with pytest.warns(UserWarning, match="not an adaptive sweep's rounds"):
        assert read_rounds(tmp_path / ROUNDS_NAME) == []
    (tmp_path / ROUNDS_NAME).write_text('{"groups": ' + "[" * 100_000 + "]" * 100_000 + "}")  # a RecursionError to parse
    with pytest.warns(UserWarning, match="not an adaptive sweep's rounds \\(nested deeper than Python can parse\\)"):
        assert read_rounds(tmp_path / ROUNDS_NAME) == []
    with pytest.warns(UserWarning, match="nested deeper"):  # an adaptive sweep writing its rounds there: replaced
        write_rounds(tmp_path, [group(["g"])])
    assert [g["jobs"] for g in read_rounds(tmp_path / ROUNDS_NAME)] == [["g"]]

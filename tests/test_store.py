"""Records: stable job identity, atomic writes, corrupt files named and skipped."""

from __future__ import annotations

import json

import pytest

from lrtransfer.store import RecordError, is_complete, iter_records, job_id, read_record, write_record
from tests.conftest import compose


def test_job_id_ignores_where_and_how_but_not_what():
    base = job_id(compose())
    assert job_id(compose("results_dir=/elsewhere", "name=other", "engine.batched=false", "engine.device=cpu")) == base
    assert job_id(compose("width=64")) != base
    assert job_id(compose("optim=sgd")) != base
    assert job_id(compose("lr.log2_min=-13")) != base


def test_job_id_is_the_same_from_a_dict():
    from omegaconf import OmegaConf

    cfg = compose()
    assert job_id(OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)) == job_id(cfg)


def test_write_is_atomic_and_leaves_no_temp_files(tmp_path):
    write_record(tmp_path, {"status": "complete", "config": {}, "runs": []})
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
    write_record(tmp_path / "b", {"status": "complete", "config": {}, "runs": []})
    with pytest.raises(RecordError, match=str(bad)):
        read_record(bad)
    with pytest.warns(UserWarning, match="a/record.json"):
        found = list(iter_records(tmp_path))
    assert [p.parent.name for p, _ in found] == ["b"]


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

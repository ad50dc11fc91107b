"""Two versions of a study's inputs in one folder: the readers tell jobs apart by what they were
built from (a record's `inputs`), analyse the newest version, and name the others' jobs."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from lrtransfer import analysis
from lrtransfer.store import write_record
from tests.datafiles import write_nanogpt
from tests.test_analysis import fake_record, study
from tests.test_published import NANOGPT

SMALL = ["data.seq_len=8", "data.eval_size=4", "depth=1", "train.steps=3", "train.batch_size=4", "lr.log2_min=-8",
         "lr.log2_max=-6", "engine.device=cpu", "engine.progress=false", "model.config_kwargs={n_head: 2}"]


@pytest.fixture(scope="module")
def changed(tmp_path_factory):
    """nanoGPT (a model file of the user's) on nanoGPT's token files: widths 16 and 32, then the token
    file scrambled in part and the model file edited, then width 16 again, into the same study."""
    from lrtransfer.sweeps.launch import launch

    tmp = tmp_path_factory.mktemp("versions")
    data, model = tmp / "shakespeare_char", tmp / "model.py"
    write_nanogpt(data)
    shutil.copy(NANOGPT, model)
    over = ["model=custom", f"model.target={model}:GPT", f"model.config={model}:GPTConfig", "model.width_key=n_embd",
            "model.depth_key=n_layer", "data=tokens", f"data.train_path={data / 'train.bin'}", *SMALL,
            f"results_dir={tmp / 'results'}", "name=nano"]
    launch([*over, "width=16,32"])
    first = {p.parent.name for p in (tmp / "results" / "nano").glob("*/record.json")}
    ids = np.fromfile(data / "train.bin", dtype="<u2")
    ids[: len(ids) // 2] = np.random.default_rng(1).integers(0, 40, len(ids) // 2)  # half the file re-made
    ids.tofile(data / "train.bin")
    model.write_text(model.read_text() + "\n# edited\n")
    launch([*over, "width=16"])
    return tmp / "results", sorted(first)


def test_records_keep_what_their_files_held(changed):
    root, old = changed
    records = [json.loads(p.read_text()) for p in root.rglob("record.json")]
    assert len(records) == 3  # the changed files trained width 16 again, as a new job
    assert all(set(r["inputs"]) == {"data.train_path", "model.source"} for r in records)
    assert all("meta.pkl" in r["inputs"]["data.train_path"] for r in records)  # nanoGPT's vocabulary travels with it
    new = [r for r in records if r["job_id"] not in old]
    # the newest version is the newest job's: the three jobs may start within one second
    assert all(len(r["created"]) == len("2026-01-01T00:00:00.000000+00:00") for r in records)
    assert new[0]["created"] > max(r["created"] for r in records if r["job_id"] in old)
    assert {r["inputs"]["data.train_path"] for r in new}.isdisjoint(r["inputs"]["data.train_path"] for r in records
                                                                    if r["job_id"] in old)
    assert {r["inputs"]["model.source"] for r in new}.isdisjoint(r["inputs"]["model.source"] for r in records
                                                                 if r["job_id"] in old)


def test_summary_reads_the_newest_version_and_names_the_older_jobs(changed, cli):
    root, old = changed
    code, out, err = cli("summary", str(root), "--json")
    assert code == 0, err
    (g,) = json.loads(out)["groups"]
    assert g["scales"] == [16] and g["n_runs"] == [3]  # the new data's width 16 alone: never beside the old width 32
    assert sorted(g["superseded_jobs"]) == old
    said = g["warnings"][0]
    assert said.startswith("older inputs: 2 job(s)") and "data.train_path and model.source" in said
    assert all(j in said for j in old) and "--all-versions" in said
    assert "held by two jobs" not in err  # the cause is a changed input, not the seeds
    code, out, err = cli("summary", str(root))
    assert code == 0 and "warning: older inputs: 2 job(s)" in out and "held by two jobs" not in err, out + err


def test_all_versions_shows_each_version_as_a_group(changed, cli):
    root, old = changed
    code, out, err = cli("summary", str(root), "--json", "--all-versions")
    assert code == 0, err
    first, second = json.loads(out)["groups"]  # the older version first: the order they were run in
    assert first["scales"] == [16, 32] and second["scales"] == [16]
    assert first["fixed"]["inputs"] != second["fixed"]["inputs"]
    assert all(g["superseded_jobs"] == [] for g in (first, second)) and "held by two jobs" not in err
    import lrtransfer

    assert [g["scales"] for g in lrtransfer.summarize(root, all_versions=True)] == [[16, 32], [16]]  # the Python API
    assert [g["scales"] for g in lrtransfer.summarize(root)] == [[16]]
    code, out, _ = cli("list", str(root), "--all-versions")
    assert code == 0 and out.count("inputs=") == 2, out
    code, out, _ = cli("list", str(root))
    assert "2 job(s) built from an older version" in out, out


def test_report_and_export_leave_the_older_jobs_out_alike(changed, cli, tmp_path):
    import pandas as pd

    root, old = changed
    code, _, err = cli("report", str(root), "--out", str(tmp_path / "r.html"))
    assert code == 0, err
    text = (tmp_path / "r.html").read_text()
    assert "older inputs: 2 job(s)" in text
    assert "inputs.data.train_path" in text and "sweep_index" not in text and ">created<" not in text  # no config
    code, _, err = cli("export", str(root), "--out", str(tmp_path / "runs.csv"))
    assert code == 0 and "older inputs: 2 job(s)" in err, err
    runs = pd.read_csv(tmp_path / "runs.csv")
    assert len(runs) == 3 and not set(runs["job_id"]) & set(old)
    code, _, err = cli("export", str(root), "--all-versions", "--out", str(tmp_path / "all.csv"))
    runs = pd.read_csv(tmp_path / "all.csv")
    assert code == 0 and len(runs) == 9 and runs["inputs"].nunique() == 2, err


# ---------------------------------------------------------------- fabricated records


def with_inputs(root, name, inputs: dict | None, created: str | None = None, **kw):
    """`fake_record`'s record given `inputs` (None: none, as records before them) and a start time, in a
    folder of its own (a job of other inputs has another id)."""
    scratch = root.parent / f"{root.name}-scratch"
    fake_record(scratch, name=name, **kw)
    (path,) = scratch.rglob("record.json")
    rec = json.loads(path.read_text())
    shutil.rmtree(scratch)
    rec.pop("format")
    rec["job_id"] = f"{rec['job_id']}-{len(list(root.rglob('record.json')))}"
    if inputs is not None:
        rec["inputs"] = inputs
    if created is not None:
        rec["created"] = created
    write_record(root / name / rec["job_id"], rec)


def test_a_record_without_inputs_joins_the_version_it_agrees_with(tmp_path):
    """Records written before records kept their inputs: one of the newest version's data beside them
    is no second version (each agrees with it on what it does say)."""
    with_inputs(tmp_path, "s", None, "2025-01-01T10:00:00+00:00", width=64, optimum=-6)
    with_inputs(tmp_path, "s", None, "2025-01-01T10:00:01+00:00", width=128, optimum=-6.5)
    with_inputs(tmp_path, "s", {"data.train_path": "100:aaaa"}, "2025-01-02T10:00:00+00:00", width=256, optimum=-7)
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.scales == [64, 128, 256] and g.superseded_jobs == []


def test_model_source_of_older_records_is_an_input_beside_newer_ones(tmp_path):
    """model.source is in every model=custom record's config; a record that also keeps `inputs` makes
    it an input for the older ones too, so an edited model file is two versions, not two groups."""
    model = {"name": "custom", "target": "m.py:Net", "source": "1111"}
    with_inputs(tmp_path, "s", None, "2025-01-01T10:00:00+00:00", width=64, model=model, optimum=-6)
    with_inputs(tmp_path, "s", None, "2025-01-01T10:00:01+00:00", width=128, model=model, optimum=-7)
    with_inputs(tmp_path, "s", {"model.source": "2222"}, "2025-01-02T10:00:00+00:00", width=64,
                model={**model, "source": "2222"}, optimum=-5)
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.scales == [64] and len(g.superseded_jobs) == 2 and "model.source" in g.warnings[0]
    assert "model.source" not in g.fixed  # no longer a key that names a group
    old, new = analysis.groups(analysis.load_runs(tmp_path), all_versions=True)
    assert old.scales == [64, 128] and new.scales == [64]
    assert old.fixed["inputs"].endswith("(2025-01-01 10:00)") and new.fixed["inputs"].endswith("(2025-01-02 10:00)")


def test_without_inputs_nothing_changes(tmp_path):
    """Records of one version (or none that keep inputs) group as they always did."""
    study(tmp_path, seeds=1)
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.scales == [64, 128, 256, 512] and g.superseded_jobs == [] and "inputs" not in g.fixed


def test_a_record_whose_inputs_are_not_fingerprints_is_skipped(tmp_path):
    with_inputs(tmp_path, "s", {"data.train_path": ["not", "a", "fingerprint"]}, width=64)
    with_inputs(tmp_path, "s", {"data.train_path": "100:aaaa"}, width=128)
    with pytest.warns(analysis.SkippedRecordWarning, match=r"malformed record \(inputs=.* is not a mapping of file "
                                                             "fingerprints\\)"):
        found = analysis.scan(tmp_path)
    assert len(found.skipped) == 1 and found.runs["width"].unique().tolist() == [128]

"""What `summary` prints around its numbers: the groups in the order the sweep gave them, a cost
column only where there is a cost (explained where first shown), each study-wide note once."""

from __future__ import annotations

import json

from lrtransfer import analysis
from lrtransfer.store import write_record
from tests.test_analysis import fake_record

TINY = ["width=16,32", "depth=2", "train.steps=3", "train.batch_size=8", "data.eval_size=16", "lr.log2_min=-8",
        "lr.log2_max=-6", "engine.device=cpu", "engine.progress=false"]


def test_groups_in_the_order_the_sweep_gave_them(cli, tmp_path):
    """`param=standard,mup optim=sgd,adam` lists standard before mup, sgd before adam (their names'
    order would put them the other way round), in summary, its JSON and list."""
    code, _, err = cli("sweep", *TINY, "param=standard,mup", "optim=sgd,adam", f"results_dir={tmp_path}", "name=o")
    assert code == 0, err
    code, out, err = cli("summary", str(tmp_path), "--json")
    order = [(g["fixed"]["param.name"], g["fixed"]["optim.name"]) for g in json.loads(out)["groups"]]
    assert order == [("standard", "sgd"), ("standard", "adam"), ("mup", "sgd"), ("mup", "adam")], order
    code, out, _ = cli("summary", str(tmp_path))
    titles = [line for line in out.splitlines() if line.startswith("study=o")]
    assert [("param.name=standard" in t, "optim.name=sgd" in t) for t in titles] == [
        (True, True), (True, False), (False, True), (False, False)], titles
    code, out, _ = cli("list", str(tmp_path))
    rows = [line for line in out.splitlines() if "param.name=" in line]
    assert ["standard" in r for r in rows] == [True, True, False, False] and "sgd" in rows[0], out


def test_records_that_do_not_say_when_they_ran_keep_their_keys_order(tmp_path):
    """Fabricated or older records (no `created`) are listed by their keys, as before; a record's start
    time and its place in its sweep order the groups where they say."""
    for w in (64, 128):
        fake_record(tmp_path, width=w, param="standard")
        fake_record(tmp_path, width=w, param="mup")
    assert [g.fixed["param.name"] for g in analysis.groups(analysis.load_runs(tmp_path))] == ["mup", "standard"]
    for i, path in enumerate(sorted(tmp_path.rglob("record.json"), key=lambda p: "mup" in p.parent.name)):
        rec = json.loads(path.read_text())
        rec.pop("format")
        write_record(path.parent, {**rec, "created": "2025-01-01T10:00:00+00:00", "sweep_index": i})  # one second
    assert [g.fixed["param.name"] for g in analysis.groups(analysis.load_runs(tmp_path))] == ["standard", "mup"]


def test_no_cost_column_without_a_cost_and_the_cost_explained_once(tmp_path, cli):
    for w in (64, 128):
        fake_record(tmp_path / "two", width=w, param="standard")
        fake_record(tmp_path / "two", width=w, param="mup")
    fake_record(tmp_path / "one", width=64)
    code, out, err = cli("summary", str(tmp_path / "one"))
    assert code == 0 and "cost at" not in out and "only one width" in out, out  # no LR to carry over: no column
    code, out, err = cli("summary", str(tmp_path / "two"))
    assert code == 0 and out.count("cost at -8 ") == 2, out  # a column of each table
    (said,) = [line for line in out.splitlines() if line.strip().startswith("cost at -8:")]
    assert "smallest width's best grid LR (log2 -8), less its own best" in said  # under the first table only

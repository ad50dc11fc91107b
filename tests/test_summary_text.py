"""What `summary` prints around its numbers: a cost column only where there is a cost (explained
where first shown)."""

from __future__ import annotations

from tests.test_analysis import fake_record

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

"""`lrtransfer inspect` over lists of scales (width, depth, any key of numbers): a table per config,
the JSON list of them, the ratios to the first by the keys that differ; and each tensor's initial mean
beside its std (a unit gain and a zero bias both have std 0)."""

from __future__ import annotations

import json

import pytest

COMPLETEP = ["model=transformer", "data=text", "data.seq_len=8", "param=completep"]


def test_inspect_takes_lists_of_width_and_depth(cli):
    """Every combination, width outermost, as JSON: CompleteP's depth rule read off the configs
    (Adam's epsilon / 2 inside the blocks from depth 2 to 4, unchanged outside them)."""
    code, out, err = cli("inspect", *COMPLETEP, "width=32,64", "depth=4,2", "--json")
    assert code == 0, err
    docs = json.loads(out)
    assert [(d["config"]["width"], d["config"]["depth"]) for d in docs] == [(32, 2), (32, 4), (64, 2), (64, 4)]
    eps = [{r["name"]: r["eps_mult"] for r in d["tensors"]} for d in docs]
    inside = "layers.1.layers.0.block.layers.1.q.weight"
    assert eps[1][inside] / eps[0][inside] == pytest.approx(0.5)  # depth 2 -> 4 at width 32
    assert eps[1]["layers.0.parts_list.0.weight"] == eps[0]["layers.0.parts_list.0.weight"]  # the table: outside


def test_inspect_shows_the_ratios_by_the_keys_that_vary(cli):
    code, out, err = cli("inspect", *COMPLETEP, "width=32", "depth=2,4")
    assert code == 0, err
    lines = out.splitlines()
    assert [line for line in lines if line.startswith("== model=")] == [
        "== model=transformer param=completep optim=adam width=32 depth=2",
        "== model=transformer param=completep optim=adam width=32 depth=4"]
    start = lines.index("== ratios to the first config (depth=2; each column names its config by depth)")
    columns = [h for h in lines[start + 1].split() if h != "4/2"]  # each column is "NAME 4/2"
    assert lines[start + 1].count(" 4/2") == len(columns) - 1 and columns[:2] == ["tensor", "init_std"]
    row = next(line.split() for line in lines[start:] if line.startswith("layers.1.layers.0.block.layers.1.q.weight"))
    assert row[columns.index("eps_mult")] == "0.5"


def test_inspect_takes_any_key_of_numbers(cli):
    code, out, err = cli("inspect", "train.batch_size=8,16", "--json")
    assert code == 0, err
    assert [d["config"]["train"]["batch_size"] for d in json.loads(out)] == [8, 16]
    code, out, err = cli("inspect", "train.batch_size=8,16")
    assert "== model=mlp param=standard optim=adam width=128 depth=3 train.batch_size=16" in out
    # a key of other values (param=mup,standard) is refused: tests/test_reference.py


def test_inspect_shows_the_mean_beside_the_std(cli):
    """A layer norm's unit gain and its zero bias: both std 0, means 1 and 0."""
    code, out, err = cli("inspect", *COMPLETEP[:3], "depth=1", "width=32", "--json")
    assert code == 0, err
    rows = {r["name"]: r for r in json.loads(out)["tensors"]}
    gain, bias = rows["layers.1.layers.0.block.layers.0.layers.1.gain"], rows["layers.1.layers.0.block.layers.0.layers.1.bias"]
    assert (gain["init_mean"], gain["init_std"], bias["init_mean"], bias["init_std"]) == (1.0, 0.0, 0.0, 0.0)
    table = rows["layers.0.parts_list.0.weight"]  # N(0, 1): a mean near 0 of 103 x 32 draws
    assert abs(table["init_mean"]) < 4 / (103 * 32) ** 0.5 and table["init_std"] == pytest.approx(1, rel=0.05)
    code, out, err = cli("inspect", *COMPLETEP[:3], "depth=1", "width=32")
    head = next(line for line in out.splitlines() if line.startswith("tensor"))
    assert head.split()[3:7] == ["init", "mean", "init", "std"]
    gain_row = next(line for line in out.splitlines() if line.startswith("layers.1.layers.0.block.layers.0.layers.1.gain"))
    assert gain_row.split()[3:5] == ["1", "0"]

"""Results folders no job writes but a probe can: every run diverged, numbers that are finite but
absurd, a FIFO where a record should be. Each is read without a traceback: a bad record is skipped
with a one-line warning naming it, and a re-run of the sweep recomputes its job.
"""

from __future__ import annotations

import json
import os
import shutil

import pytest

from tests.conftest import TINY
from tests.conftest import copy_study as _copy

READERS = ["summary", "list", "plot", "report", "export", "predict"]


def _args(command: str, folder) -> list[str]:
    return [command, str(folder), *(["--width", "64"] if command == "predict" else [])]


def _width_of(path) -> int:
    return json.loads(path.read_text())["config"]["width"]


# ---------------------------------------------------------------- every run diverged
def test_a_sweep_where_every_run_diverges_says_no_scale_has_an_optimum(cli, tmp_path):
    code, out, err = cli("sweep", *TINY, "width=16,32", "lr.log2_min=20", "lr.log2_max=22", f"results_dir={tmp_path}",
                         "name=div")
    assert code == 0 and "Traceback" not in err, err
    assert "width 16: every LR diverged; no optimum" in out and "width 32: every LR diverged; no optimum" in out, out
    assert "-> undetermined" in out, out
    for command in READERS:
        code, out, err = cli(*_args(command, tmp_path))
        assert "Traceback" not in err, (command, err)
        assert code == (2 if command == "predict" else 0), (command, out, err)
    assert "undetermined" in err  # predict: no optimum to extrapolate from
    code, out, _ = cli("summary", str(tmp_path), "--json")
    (g,) = json.loads(out)["groups"]
    assert g["optimum"] == ["all diverged", "all diverged"] and g["verdict"] == "undetermined" and g["n_diverged"] == [3, 3], g


def test_one_width_all_diverged_beside_one_that_trained(cli, two_widths, tmp_path):
    paths = _copy(two_widths, tmp_path / "r")
    path = next(p for p in paths if _width_of(p) == 16)
    rec = json.loads(path.read_text())
    for run in rec["runs"]:
        run.update(diverged=True, diverged_step=1, final_loss=None, eval_loss=None, eval_acc=None)
    path.write_text(json.dumps(rec))
    code, out, err = cli("summary", str(tmp_path / "r"))
    assert code == 0 and "width 16: every LR diverged; no optimum" in out and "-> undetermined" in out, (out, err)
    for command in READERS:
        code, out, err = cli(*_args(command, tmp_path / "r"))
        assert "Traceback" not in err and code in (0, 2), (command, out, err)


# ---------------------------------------------------------------- values no job writes
def _set_config(key, value):
    def damage(rec):
        node = rec["config"]
        *parents, leaf = key.split(".")
        for p in parents:
            node = node[p]
        node[leaf] = value
    return damage


def _set_run(i, **values):
    return lambda rec: rec["runs"][i].update(values)


DAMAGE = [
    ("log2_lr 1e308", _set_run(0, log2_lr=1e308), "log2_lr=1e+308 is not"),
    ("width 1e30", _set_config("width", 1e30), "width=1e+30"),
    ("width 10**30", _set_config("width", 10**30), "width=1000000000000000000000000000000"),
    ("width Infinity", _set_config("width", float("inf")), "width=inf"),
    ("depth Infinity", _set_config("depth", float("inf")), "depth=inf"),
    ("steps 10**30", _set_config("train.steps", 10**30), "train.steps="),
    ("seed 10**30", _set_run(1, seed=10**30), "seed="),
    ("eval_acc 5", _set_run(2, eval_acc=5.0), "eval_acc=5.0 is not"),
    ("history of two lengths", lambda rec: rec["runs"][0]["history_loss"].pop(), "history_loss"),
    ("lr not 2**log2_lr", _set_run(0, lr=1.0), "lr=1.0 is not 2**log2_lr="),
    ("a run twice", lambda rec: rec["runs"].append(dict(rec["runs"][3])), "runs 3 and "),
]


@pytest.mark.parametrize("damage, why", [pytest.param(d, w, id=i) for i, d, w in DAMAGE])
def test_an_absurd_value_skips_the_record_and_a_sweep_recomputes_it(cli, two_widths, tmp_path, damage, why):
    path = next(p for p in _copy(two_widths, tmp_path / "r") if _width_of(p) == 16)
    rec = json.loads(path.read_text())
    damage(rec)
    path.write_text(json.dumps(rec))  # allow_nan: an infinite value is the JSON token Infinity
    for command in ("summary", "report"):  # report draws the figures too
        code, out, err = cli(*_args(command, tmp_path / "r"))
        assert "Traceback" not in err, (command, err)
        assert f"skipped {path}: malformed record" in err and why in err, (command, err)
    code, out, err = cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path / 'r'}", "name=s")
    assert code == 0 and "1 job(s) ran, 1 already done" in out, (out, err)
    assert _width_of(path) == 16 and "skipped" not in err


# ---------------------------------------------------------------- files that are no regular file
def test_a_fifo_named_record_json_is_skipped_not_waited_on(cli, two_widths, tmp_path, deadline):
    paths = _copy(two_widths, tmp_path / "r")
    fifo, linked = paths
    fifo.unlink()
    os.mkfifo(fifo)
    # a symlink to a regular record is read through, as before
    target = tmp_path / "elsewhere.json"
    shutil.move(linked, target)
    linked.symlink_to(target)
    for command in READERS:
        code, out, err = cli(*_args(command, tmp_path / "r"))
        assert "Traceback" not in err, (command, err)
        assert f"skipped {fifo}: unreadable record (not a regular file" in err, (command, err)
    code, out, err = cli("summary", str(tmp_path / "r"), "--json")
    assert json.loads(out)["groups"][0]["n_runs"] == [5]  # the symlinked record's runs
    code, out, err = cli("sweep", *TINY, "width=16,32", f"results_dir={tmp_path / 'r'}", "name=s")
    assert code == 0 and "1 job(s) ran, 1 already done" in out, (out, err)
    assert fifo.is_file() and not fifo.is_symlink()


def test_a_rounds_file_too_deep_to_parse_is_one_warning(cli, two_widths, tmp_path):
    _copy(two_widths, tmp_path / "r")
    deep = tmp_path / "r" / "s" / "adaptive.json"
    deep.write_text('{"groups": [' + '{"a": ' * 100_000 + "1" + "}" * 100_000 + "]}")
    code, out, err = cli("report", str(tmp_path / "r"))
    assert code == 0 and "Traceback" not in err, err
    assert err == f"warning: skipped {deep}: not an adaptive sweep's rounds (nested deeper than Python can parse)\n", err


def test_a_fifo_named_like_an_adaptive_sweeps_rounds_is_skipped(cli, two_widths, tmp_path, deadline):
    _copy(two_widths, tmp_path / "r")
    fifo = tmp_path / "r" / "s" / "adaptive.json"
    os.mkfifo(fifo)
    code, out, err = cli("report", str(tmp_path / "r"))
    assert code == 0 and "Traceback" not in err, err
    assert err == f"warning: skipped {fifo}: unreadable record (not a regular file: a FIFO)\n", err


@pytest.mark.parametrize("command", READERS)
def test_a_results_path_that_is_a_file_is_named_as_one(cli, tmp_path, command):
    (tmp_path / "afile").write_text("not a folder")
    code, out, err = cli(*_args(command, tmp_path / "afile"))
    assert code == 2 and f"'{tmp_path / 'afile'}' is a file, not a folder" in err and "Traceback" not in err, err

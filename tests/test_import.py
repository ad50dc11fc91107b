"""`lrtransfer import`: runs you already have (a shell loop's CSV, a W&B or MLflow export, JSON
lines, Parquet) as a study that summary, plot, report, predict, export and list read unchanged.

The synthetic table has a known optimum per width (a quadratic basin in log2 LR, moved by
-0.5 octave per doubling, plus seed noise): the summary's optima and drift must equal the same
numbers computed here by hand from the table (parabola through the grid minimum of the mean
curve and its neighbours; least-squares slope). Bad input cases are in tests/test_bad_input.py.
"""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.conftest import copy_study

WIDTHS = (64, 128, 256, 512)
LOG2_LRS = tuple(range(-13, -3))  # -13 .. -4
SEEDS = (0, 1, 2)


def optimum(width: int) -> float:
    return -8.3 - 0.5 * math.log2(width / 64)


def loss(width: int, log2_lr: int, seed: int) -> float:
    """A quadratic basin round `optimum(width)`, plus noise that differs by seed and LR."""
    if width == 512 and log2_lr == -4:
        return math.nan  # one diverged run, at the top of the grid
    return 2.0 + 0.05 * (log2_lr - optimum(width)) ** 2 + 0.02 * math.sin(7 * log2_lr + 3 * seed + width)


def synthetic() -> list[dict]:
    return [{"width": w, "lr": 2.0**x, "seed": s, "loss": loss(w, x, s)} for w in WIDTHS for x in LOG2_LRS for s in SEEDS]


def by_hand() -> tuple[list[float], float]:
    """Each width's optimum (parabola through the mean curve's grid minimum and its two
    neighbours; a point where a seed diverged is no point) and their least-squares drift."""
    optima = []
    for w in WIDTHS:
        x = np.array(LOG2_LRS, dtype=float)
        y = np.array([np.mean([loss(w, v, s) for s in SEEDS]) for v in LOG2_LRS])
        i = int(np.nanargmin(y))
        a, b, _ = np.polyfit(x[i - 1 : i + 2], y[i - 1 : i + 2], 2)
        optima.append(-b / (2 * a))
    return optima, float(np.polyfit(np.log2(WIDTHS), optima, 1)[0])


def write_csv(path, rows: list[dict]) -> None:
    """As a shell loop writes it: `echo "$width,$lr,$seed,$loss" >> runs.csv`."""
    lines = [",".join(rows[0])] + [",".join("nan" if isinstance(v, float) and math.isnan(v) else str(v)
                                            for v in r.values()) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def write_jsonl(path, rows: list[dict]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def write_tsv(path, rows: list[dict]) -> None:
    path.write_text("".join("\t".join(map(str, r)) + "\n" for r in [rows[0], *[r.values() for r in rows]]))


def write_json_array(path, rows: list[dict]) -> None:
    """pandas' `to_json(orient="records")`: one array of objects."""
    path.write_text(json.dumps(rows))


def write_parquet(path, rows: list[dict]) -> None:
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(rows), path)


SHELL = ["--scale", "width", "--lr", "lr", "--loss", "loss", "--seed", "seed"]


def summary(cli, folder, *extra) -> dict:
    code, out, err = cli("summary", str(folder), "--json", *extra)
    assert code == 0, err
    return json.loads(out)


def test_a_shell_loops_csv_gives_the_optima_and_drift_computed_by_hand(cli, tmp_path):
    table = tmp_path / "runs.csv"
    write_csv(table, synthetic())
    code, out, err = cli("import", str(table), "--name", "loop", *SHELL, "--results-dir", str(tmp_path / "r"))
    assert code == 0 and err == "", err
    assert f"imported {len(synthetic())} run(s) of {table} into {tmp_path / 'r' / 'loop'}: 4 job(s) written; 3 diverged" in out
    doc = summary(cli, tmp_path / "r")
    (g,) = doc["groups"]
    optima, drift = by_hand()
    assert g["axis"] == "width" and g["scales"] == list(WIDTHS) and g["n_seeds"] == [3, 3, 3, 3]
    assert g["best_log2_lr"] == pytest.approx(optima, abs=1e-9)
    assert g["drift"] == pytest.approx(drift, abs=1e-9)
    assert abs(drift + 0.5) < 0.05 and g["verdict"] == "drifts down"  # the table's known drift, found
    assert g["n_diverged"] == [0, 0, 0, 3]


@pytest.mark.parametrize("fmt, write", [("jsonl", write_jsonl), ("parquet", write_parquet), ("tsv", write_tsv),
                                        ("json", write_json_array)])
def test_json_lines_parquet_tsv_and_a_json_array_read_as_the_csv(cli, tmp_path, fmt, write):
    write_csv(tmp_path / "runs.csv", synthetic())
    write(tmp_path / f"runs.{fmt}", synthetic())
    for name in ("runs.csv", f"runs.{fmt}"):
        code, _, err = cli("import", str(tmp_path / name), "--name", "s", *SHELL, "--results-dir", str(tmp_path / name[5:]))
        assert code == 0, err
    assert summary(cli, tmp_path / fmt) == summary(cli, tmp_path / "csv")


def test_nested_json_is_read_by_dotted_columns(cli, tmp_path):
    """W&B's API gives a run's config and summary as objects: {"config": {"n_embd": 64}, ...}."""
    rows = [{"config": {"n_embd": r["width"], "lr": r["lr"], "seed": r["seed"]}, "summary": {"loss": r["loss"]}}
            for r in synthetic()]
    write_jsonl(tmp_path / "runs.jsonl", rows)
    code, _, err = cli("import", str(tmp_path / "runs.jsonl"), "--name", "s", "--scale", "width=config.n_embd",
                       "--lr", "config.lr", "--loss", "summary.loss", "--seed", "config.seed",
                       "--results-dir", str(tmp_path / "r"))
    assert code == 0, err
    assert summary(cli, tmp_path / "r")["groups"][0]["best_log2_lr"] == pytest.approx(by_hand()[0], abs=1e-9)


def test_a_wandb_export_with_its_column_names(cli, tmp_path):
    """W&B's runs table (Export CSV): its names (`train/loss`), a held-out loss, columns not used."""
    lines = ["Name,n_embd,learning_rate,seed,train/loss,val/loss,_step"]
    for i, r in enumerate(synthetic()):
        val = r["loss"] + 0.1
        lines.append(f"run-{i},{r['width']},{r['lr']},{r['seed']},{r['loss']},{val},1000".replace(",nan,", ",NaN,"))
    (tmp_path / "wandb_export.csv").write_text("\n".join(lines) + "\n")
    code, out, err = cli("import", str(tmp_path / "wandb_export.csv"), "--name", "wandb", "--scale", "width=n_embd",
                         "--lr", "learning_rate", "--loss", "train/loss", "--seed", "seed", "--eval-loss", "val/loss",
                         "--results-dir", str(tmp_path / "r"))
    assert code == 0 and "3 diverged" in out, err
    train = summary(cli, tmp_path / "r")["groups"][0]
    held = summary(cli, tmp_path / "r", "--metric", "eval_loss")["groups"][0]
    assert train["best_log2_lr"] == pytest.approx(by_hand()[0], abs=1e-9)
    assert held["best_log2_lr"] == pytest.approx(train["best_log2_lr"], abs=1e-9)  # the same curves, 0.1 higher
    assert held["best_loss"] == pytest.approx([v + 0.1 for v in train["best_loss"]], abs=1e-9)
    record = json.loads(next((tmp_path / "r" / "wandb").glob("*/record.json")).read_text())
    assert record["source"]["kind"] == "import" and record["source"]["table"] == str(tmp_path / "wandb_export.csv")
    assert record["source"]["columns"] == {"width": "n_embd", "lr": "learning_rate", "loss": "train/loss", "seed": "seed",
                                           "eval_loss": "val/loss"}
    assert len(record["source"]["sha256"]) == 64 and record["runs"][0]["row"].startswith("line ")


def test_an_mlflow_frame_with_two_parameterizations(cli, tmp_path):
    """mlflow.search_runs(...).to_csv(): params as text (`params.n_embd`), metrics as numbers
    (`metrics.loss`), a diverged run's NaN written as an empty cell unless na_rep says otherwise;
    two parameterizations told apart by a column, read as lrtransfer's own `param.name`."""
    lines = ["run_id,status,params.n_embd,params.learning_rate,params.seed,params.param,metrics.loss"]
    for param, shift in (("standard", 0.0), ("mup", 1.0)):
        for i, r in enumerate(synthetic()):
            cell = "nan" if math.isnan(r["loss"]) else r["loss"]
            lines.append(f"{param}{i},FINISHED,{r['width']},{r['lr'] * 2**shift},{r['seed']},{param},{cell}")
    (tmp_path / "mlflow.csv").write_text("\n".join(lines) + "\n")
    code, _, err = cli("import", str(tmp_path / "mlflow.csv"), "--name", "ml", "--scale", "width=params.n_embd",
                       "--lr", "params.learning_rate", "--loss", "metrics.loss", "--seed", "params.seed",
                       "--group", "param.name=params.param", "--results-dir", str(tmp_path / "r"))
    assert code == 0, err
    groups = {g["fixed"]["param.name"]: g for g in summary(cli, tmp_path / "r")["groups"]}
    assert groups["standard"]["best_log2_lr"] == pytest.approx(by_hand()[0], abs=1e-9)
    assert groups["mup"]["best_log2_lr"] == pytest.approx([v + 1 for v in by_hand()[0]], abs=1e-9)
    code, out, _ = cli("list", str(tmp_path / "r"))
    assert code == 0 and "param.name=mup" in out and "param.name=standard" in out


def test_bad_rows_are_named_and_counted_and_the_rest_imported(cli, tmp_path):
    table = tmp_path / "runs.csv"
    table.write_text("width,lr,seed,loss\n"
                     "64,0.001,0,2.5\n"
                     "64,0.002,0,2.3\n"
                     "64,0.004,0,2.4\n"
                     "64,abc,0,2.3\n"      # line 5: LR not a number
                     "64,-0.1,0,2.3\n"     # line 6: LR not positive
                     "64,0.008,0,\n"       # line 7: no loss
                     "64,0.016,0,inf\n"    # line 8: diverged, kept
                     "64,0.002,0,2.31\n"   # line 9: the same run as line 3
                     "0,0.001,0,2.5\n"     # line 10: width 0
                     "64,0.001,1.5,2.5\n"  # line 11: a seed that is not whole
                     "64,0.001,1\n"        # line 12: a cell short
                     "64,0.001,1,two\n")   # line 13: a loss that is no number
    code, out, err = cli("import", str(table), "--name", "s", *SHELL, "--results-dir", str(tmp_path / "r"))
    assert code == 0, err
    warned = [line for line in err.splitlines() if line.startswith("warning: skipped")]
    assert [w.split(f" of {table}: ")[0] for w in warned] == [f"warning: skipped line {n}" for n in (5, 6, 7, 9, 10, 11, 12, 13)]
    assert f"warning: skipped line 9 of {table}: the same run as line 3 (seed 0 at lr 0.002, width=64)" in err
    assert f"warning: skipped line 7 of {table}: loss is empty (no loss: " in err
    assert ("skipped 8 of 12 row(s): 2 bad learning rate, 1 no loss, 1 duplicate run, 1 bad width, 1 bad seed, "
            "1 wrong number of cells, 1 bad loss") in out
    (record,) = [json.loads(p.read_text()) for p in (tmp_path / "r" / "s").glob("*/record.json")]
    assert [(r["lr"], r["final_loss"], r["diverged"]) for r in record["runs"]] == [
        (0.001, 2.5, False), (0.002, 2.3, False), (0.004, 2.4, False), (0.016, None, True)]
    assert record["source"]["rows"] == 12 and record["source"]["skipped"] == 8


def test_every_reading_command_reads_an_imported_study(cli, tmp_path):
    """plot and report say there are no training curves (a table holds none) instead of drawing
    empty ones; predict, export and list read it as a sweep's."""
    write_csv(tmp_path / "runs.csv", synthetic())
    results = tmp_path / "r"
    assert cli("import", str(tmp_path / "runs.csv"), "--name", "s", *SHELL, "--results-dir", str(results))[0] == 0
    code, out, err = cli("plot", str(results))
    assert code == 0 and "study s: no training curves: its runs hold only their final losses" in out, err
    assert sorted(p.name for p in (results / "figures").glob("*.png")) == ["s-width-lr-train_loss.png",
                                                                           "s-width-transfer-train_loss.png"]
    code, out, err = cli("report", str(results))
    html = (results / "report.html").read_text()
    assert code == 0 and "No training curves: its runs hold only their final losses" in html, err
    assert f"Runs imported from {tmp_path / 'runs.csv'} (sha256 " in html
    code, out, err = cli("predict", str(results), "--width", "1024", "--json")
    (p,) = json.loads(out)["predictions"]
    line = np.polyfit(np.log2(WIDTHS), by_hand()[0], 1)  # four scales: the drift's line (a parabola from five)
    assert code == 0 and p["model"] == "line" and p["log2_lr"] == pytest.approx(np.polyval(line, 10), abs=1e-9), err
    code, out, err = cli("export", str(results), "--out", str(tmp_path / "runs_out.csv"))
    assert code == 0 and f"({len(synthetic())} runs," in out, err
    code, out, err = cli("list", str(results))
    assert code == 0 and "64,128,256,512" in out, err


def test_export_then_import_gives_the_same_summary(cli, two_widths, tmp_path):
    """A sweep's own study, exported and imported again (its diverged runs by the `diverged`
    column, their loss an empty cell), reads as the same numbers."""
    copy_study(two_widths, tmp_path / "sweep")
    assert cli("export", str(tmp_path / "sweep"), "--out", str(tmp_path / "runs.csv"))[0] == 0
    code, _, err = cli("import", str(tmp_path / "runs.csv"), "--name", "s", "--scale", "width", "--lr", "lr",
                       "--loss", "train_loss", "--seed", "run_seed", "--eval-loss", "eval_loss", "--diverged", "diverged",
                       "--results-dir", str(tmp_path / "imported"))
    assert code == 0 and err == "", err
    for metric in ("train_loss", "eval_loss"):
        (a,) = summary(cli, tmp_path / "sweep", "--metric", metric)["groups"]
        (b,) = summary(cli, tmp_path / "imported", "--metric", metric)["groups"]
        same = ("scales", "best_log2_lr", "best_loss", "drift", "drift_ci", "verdict", "grid_best_log2_lr", "n_diverged",
                "n_runs", "n_seeds", "best_log2_lr_ci", "transfer_cost")
        assert {k: b[k] for k in same} == {k: a[k] for k in same}


def test_append_adds_a_second_table_and_the_same_table_again_adds_nothing(cli, tmp_path):
    rows = synthetic()
    write_csv(tmp_path / "a.csv", [r for r in rows if r["seed"] < 2])
    write_csv(tmp_path / "b.csv", [r for r in rows if r["seed"] == 2])
    base = ["--name", "s", *SHELL, "--results-dir", str(tmp_path / "r")]
    assert cli("import", str(tmp_path / "a.csv"), *base)[0] == 0
    before = {p: p.read_bytes() for p in (tmp_path / "r").rglob("record.json")}
    code, out, _ = cli("import", str(tmp_path / "a.csv"), *base, "--append")
    assert code == 0 and "0 job(s) written; 4 already there (the same table imported before)" in out
    assert {p: p.read_bytes() for p in (tmp_path / "r").rglob("record.json")} == before
    code, out, _ = cli("import", str(tmp_path / "b.csv"), *base, "--append")
    assert code == 0 and "4 job(s) written" in out
    (g,) = summary(cli, tmp_path / "r")["groups"]  # one group: the table a run came from tells no groups apart
    assert g["n_seeds"] == [3, 3, 3, 3] and g["best_log2_lr"] == pytest.approx(by_hand()[0], abs=1e-9)
    write_csv(tmp_path / "c.csv", [r for r in rows if r["seed"] == 2 and r["width"] == 64])  # runs b.csv holds
    assert cli("import", str(tmp_path / "c.csv"), *base, "--append")[0] == 0
    code, out, err = cli("summary", str(tmp_path / "r"), "--json")
    assert code == 0 and json.loads(out)["groups"][0]["n_runs"] == [30, 30, 30, 30]
    assert "study s: 10 run(s) are held by two jobs" in err, err


def test_a_table_without_width_reads_along_its_own_key(cli, tmp_path):
    """A horizon study's table: `--scale max_iters` (no width, no depth) is the axis, by its name."""
    write_csv(tmp_path / "runs.csv", [{"max_iters": r["width"] * 10, "lr": r["lr"], "seed": r["seed"], "loss": r["loss"]}
                                      for r in synthetic()])
    code, _, err = cli("import", str(tmp_path / "runs.csv"), "--name", "h", "--scale", "max_iters", "--lr", "lr",
                       "--loss", "loss", "--seed", "seed", "--results-dir", str(tmp_path / "r"))
    assert code == 0, err
    (g,) = summary(cli, tmp_path / "r")["groups"]
    assert g["axis"] == "max_iters" and g["scales"] == [640, 1280, 2560, 5120] and g["fixed"] == {"study": "h"}
    assert g["best_log2_lr"] == pytest.approx(by_hand()[0], abs=1e-9)
    code, out, err = cli("predict", str(tmp_path / "r"), "--at", "10240")
    assert code == 0, err
    # one value of its key: still its axis (a sweep's single scale reads as width, which this table has not)
    write_csv(tmp_path / "one.csv", [{"max_iters": 640, "lr": r["lr"], "seed": r["seed"], "loss": r["loss"]}
                                     for r in synthetic() if r["width"] == 64])
    code, _, err = cli("import", str(tmp_path / "one.csv"), "--name", "one", "--scale", "max_iters", "--lr", "lr",
                       "--loss", "loss", "--seed", "seed", "--results-dir", str(tmp_path / "r1"))
    (g,) = summary(cli, tmp_path / "r1")["groups"]
    assert code == 0 and g["axis"] == "max_iters" and g["scales"] == [640] and g["verdict"] == "undetermined", err


def test_import_loads_neither_torch_nor_pandas(tmp_path):
    """`lrtransfer import` of a CSV is plain parsing: it answers as fast as --help."""
    import subprocess
    import sys

    write_csv(tmp_path / "runs.csv", synthetic()[:6])
    code = ("import sys; from lrtransfer.cli.app import main; sys.argv = ['lrtransfer', 'import', sys.argv[1], '--name', "
            "'s', '--scale', 'width', '--lr', 'lr', '--loss', 'loss', '--results-dir', sys.argv[2]]\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            "print('torch' in sys.modules, 'pandas' in sys.modules, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "runs.csv"), str(tmp_path / "r")],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip().splitlines()[-1] == "False False False", out


def test_a_table_appended_to_a_sweeps_study_keeps_its_depth_an_integer(cli, two_widths, tmp_path):
    """The imported runs have no depth: beside them the sweep's depth column holds floats, and its
    groups must still read depth=3, not depth=3.0 (which names a key no config has)."""
    copy_study(two_widths, tmp_path / "r")
    write_csv(tmp_path / "a.csv", [r for r in synthetic() if r["seed"] == 0])
    assert cli("import", str(tmp_path / "a.csv"), "--name", "s", *SHELL, "--results-dir", str(tmp_path / "r"),
               "--append")[0] == 0
    found = summary(cli, tmp_path / "r")["groups"]
    depths = [g["fixed"]["depth"] for g in found if "depth" in g["fixed"]]
    assert depths and all(type(d) is int for d in depths), found
    code, out, err = cli("summary", str(tmp_path / "r"))
    assert code == 0 and f"depth={depths[0]}" in out and f"depth={depths[0]}.0" not in out, out

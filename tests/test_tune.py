"""`lrtransfer tune` and `sweep --transfer-from`: the rounds, their replay, the confirmed best and its
gain computed by hand from the records, and the transfer check's reading of scans whose optima move
by known amounts."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from tests.conftest import TINY

BASE = [*TINY, "width=16", "depth=3", "train.steps=6"]
SEARCH = ["search.hp.hidden.lr_mult=[0.25,4]", "search.optim.weight_decay=[0,0.1]", "search.round_size=4",
          "search.seeds=2"]


def records(folder) -> dict[str, dict]:
    return {p.parent.name: json.loads(p.read_text()) for p in sorted(folder.glob("*/record.json"))}


def by_kind(recs: dict, kind: str) -> list[dict]:
    return [r for r in recs.values() if r["config"]["points"]["kind"] == kind]


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """A finished search: 2 rounds of 4 points, its LR-only twin, the confirming job."""
    from lrtransfer.cli.app import main  # noqa: F401  (the cli fixture is function-scoped: call it the same way)
    from lrtransfer.sweeps.launch import launch

    root = tmp_path_factory.mktemp("tune")
    launch([*BASE, *SEARCH, f"results_dir={root}", "name=t", "search.enabled=true", "search.budget=48"])
    return root / "t"


def test_the_search_trains_its_rounds_and_confirms_its_best(tuned, cli):
    recs = records(tuned)
    assert [len(by_kind(recs, k)) for k in ("search", "baseline", "confirm")] == [2, 2, 1]
    saved = json.loads((tuned / "tune.json").read_text())
    assert [r["round"] for r in saved["rounds"]] == [1, 2] and saved["confirm"] in recs
    code, out, err = cli("summary", str(tuned), "--json")
    assert code == 0, err
    (s,) = json.loads(out)["searches"]
    # the best point by hand: the lowest final loss among the search's runs
    runs = [r for rec in by_kind(recs, "search") for r in rec["runs"] if not r["diverged"]]
    best = min(runs, key=lambda r: r["final_loss"])
    assert s["best"] == {"log2_lr": best["log2_lr"], **best["grid"]}
    base = min((r for rec in by_kind(recs, "baseline") for r in rec["runs"] if not r["diverged"]),
               key=lambda r: r["final_loss"])
    assert s["baseline_log2_lr"] == base["log2_lr"]
    # the gain by hand: the LR-only point's loss minus the best point's, seed by seed, at the fresh seeds
    (conf,) = by_kind(recs, "confirm")
    assert sorted({r["seed"] for r in conf["runs"]}) == [1, 2]
    mine = {r["seed"]: r["final_loss"] for r in conf["runs"] if r["log2_lr"] == best["log2_lr"]}
    other = {r["seed"]: r["final_loss"] for r in conf["runs"] if r["log2_lr"] != best["log2_lr"]}
    diffs = [other[k] - mine[k] for k in mine]
    assert s["gain"]["mean"] == pytest.approx(np.mean(diffs), rel=1e-12) and s["gain"]["n"] == 2
    half = 12.706204736 * np.std(diffs, ddof=1) / math.sqrt(2)  # t(0.975, 1)
    assert s["gain"]["ci"] == pytest.approx([np.mean(diffs) - half, np.mean(diffs) + half], rel=1e-6)
    assert s["run_steps"] == {"search": 2 * 4 * 6, "baseline": 2 * 4 * 6, "confirm": 2 * 2 * 6}
    # the LR-only point trains with the job's own values: no decay, the hidden LR multiplier 1
    assert all(r["grid"] == {"optim.weight_decay": 0.0, "hp.hidden.lr_mult": 1.0} for r in conf["runs"]
               if r["log2_lr"] != best["log2_lr"])


def test_a_rerun_replays_every_round_from_its_records(tuned, cli, tmp_path):
    import shutil

    copy = tmp_path / "t"
    shutil.copytree(tuned, copy)
    before = records(copy)
    args = ["tune", *BASE, *SEARCH, f"results_dir={tmp_path}", "name=t", "--budget", "48"]
    code, out, err = cli(*args)
    assert code == 0, err
    assert records(copy) == before  # nothing trained again
    # an interrupted search (its last round and the confirming job lost) trains those again, the same
    last = json.loads((copy / "tune.json").read_text())["rounds"][-1]["jobs"]
    for job in [*last, json.loads((copy / "tune.json").read_text())["confirm"]]:
        shutil.rmtree(copy / job)
    code, out, err = cli(*args)
    assert code == 0, err
    again = records(copy)
    assert set(again) == set(before)
    for job in again:
        assert [r["final_loss"] for r in again[job]["runs"]] == [r["final_loss"] for r in before[job]["runs"]]


def test_the_transfer_check_scans_each_key_at_each_scale(tuned, cli, tmp_path):
    code, out, err = cli("sweep", "--transfer-from", str(tuned), "width=32", f"results_dir={tmp_path}", "name=c",
                         "search.seeds=2")
    assert code == 0, err
    assert "each tuned key scanned by 2^f" in out
    recs = records(tmp_path / "c")
    assert sorted(r["config"]["width"] for r in recs.values()) == [16, 32]  # the tuned scale and the larger one
    code, out, err = cli("summary", str(tmp_path / "c"), "--json")
    (c,) = json.loads(out)["transfer_checks"]
    assert c["axis"] == "width" and c["scales"] == [16, 32]
    assert list(c["keys"]) == ["lr", "optim.weight_decay", "hp.hidden.lr_mult"][: len(c["keys"])]
    assert "lr" in c["keys"] and "hp.hidden.lr_mult" in c["keys"]
    assert c["headline"]["scale"] == 32 and c["headline"]["tuned"]["n"] == 2


# ---------------------------------------------------------------------------- the check's reading


KEYS = ["hp.hidden.lr_mult", "optim.weight_decay", "hp.readout.lr_mult"]
CENTRE = [-7.0, 1.0, 0.01, 2.0]
REFERENCE = [-6.5, 1.0, 0.0, 1.0]
DRIFT = {"lr": -0.5, "hp.hidden.lr_mult": 0.5, "optim.weight_decay": 0.0, "hp.readout.lr_mult": 0.0}
CURVATURE = {"lr": 0.05, "hp.hidden.lr_mult": 0.04, "optim.weight_decay": 0.03, "hp.readout.lr_mult": 0.02}


def scan_records(root, widths=(64, 128, 256), seeds=(1, 2, 3)):
    """Scan records whose loss is a bowl in each key's log2 factor f, its bottom at DRIFT[key] x log2(w/64)."""
    from lrtransfer.store import write_record
    from lrtransfer.sweeps.transfer import factor_of

    factors = [-2.0, -1.0, 0.0, 1.0, 2.0]
    rows = [(CENTRE[0] + f, CENTRE[1:]) for f in factors]
    for j, k in enumerate(KEYS):
        rows += [(CENTRE[0], [*CENTRE[1:][:j], CENTRE[1 + j] * 2.0**f, *CENTRE[1:][j + 1:]]) for f in factors if f]
    rows += [(REFERENCE[0] + f, REFERENCE[1:]) for f in factors]
    rng = np.random.default_rng(0)
    for w in widths:
        i = math.log2(w / 64)
        runs = []
        for s in seeds:
            offset = 0.01 * s  # a seed's own level: cancels in paired differences
            for log2, values in rows:
                if values == REFERENCE[1:]:
                    f = log2 - REFERENCE[0]
                    loss = 1.1 + CURVATURE["lr"] * (f - DRIFT["lr"] * i) ** 2
                else:
                    loss = 1.0 + CURVATURE["lr"] * (log2 - CENTRE[0] - DRIFT["lr"] * i) ** 2
                    for k, v, c in zip(KEYS, values, CENTRE[1:]):
                        loss += CURVATURE[k] * (factor_of(k, v, c) - DRIFT[k] * i) ** 2 - CURVATURE[k] * (DRIFT[k] * i) ** 2
                loss += offset + 1e-4 * rng.standard_normal()
                runs.append({"seed": s, "lr": 2.0**log2, "log2_lr": log2, "final_loss": loss, "diverged": False,
                             "diverged_step": None, "initial_loss": 2.3, "history_step": [0, 5], "history_loss": [2.3, loss],
                             "grid": dict(zip(KEYS, values))})
        config = {"name": "chk", "results_dir": str(root), "width": w, "depth": 3, "seed": 1, "n_seeds": 3,
                  "model": {"name": "mlp"}, "param": {"name": "standard"}, "optim": {"name": "adam"},
                  "data": {"name": "teacher"}, "lr": {"log2_min": -14, "log2_max": -4, "log2_step": 1},
                  "train": {"steps": 10}, "search": {"transfer_from": "/x/t", "seeds": 3},
                  "points": {"keys": KEYS, "log2_lr": [r[0] for r in rows], "values": [r[1] for r in rows],
                             "kind": "scan", "round": 0, "centre": CENTRE, "reference": REFERENCE}}
        write_record(root / "chk" / f"j{w}", {"job_id": f"j{w}", "status": "complete", "config": config, "runs": runs})


def test_the_check_reads_each_keys_drift_and_the_cost_of_not_retuning(tmp_path):
    from lrtransfer import analysis
    from lrtransfer.analysis.transfer import checks

    scan_records(tmp_path)
    (c,) = checks(analysis.scan(tmp_path).points)
    assert c.axis == "width" and c.scales == [64, 128, 256] and c.keys == ["lr", *KEYS]
    for k, g in c.per_key.items():
        assert g.best_log2_lr == pytest.approx([DRIFT[k] * i for i in range(3)], abs=0.02), k
        assert g.drift == pytest.approx(DRIFT[k], abs=0.02), k
        # not retuning costs the bowl's height at f = 0 over its lowest measured factor
        bowl = [[CURVATURE[k] * (f - DRIFT[k] * i) ** 2 for f in (-2, -1, 0, 1, 2)] for i in range(3)]
        assert g.transfer_cost == pytest.approx([b[2] - min(b) for b in bowl], abs=2e-3), k
    assert c.per_key["optim.weight_decay"].verdict == "transfers"
    assert c.per_key["hp.hidden.lr_mult"].verdict == "drifts up" and c.per_key["lr"].verdict == "drifts down"
    h = c.headline
    assert h["scale"] == 256
    # transferred: the LR-only setting at its tuned LR, 1.1 + 0.05 x 1^2, against the tuned point, 1.0 + 0.05 x 1^2
    assert h["transferred"]["gain"]["mean"] == pytest.approx(0.1, abs=1e-3)
    assert h["retuned"]["log2_lr"] == pytest.approx(REFERENCE[0] - 1.0) and h["retuned"]["gain"]["mean"] == pytest.approx(0.05, abs=1e-3)


def test_summary_plot_report_and_export_read_a_check(tmp_path, cli):
    scan_records(tmp_path)
    code, out, err = cli("summary", str(tmp_path))
    assert code == 0, err
    assert "hp.hidden.lr_mult" in out and "drifts" in out and "transfers" in out
    code, out, err = cli("plot", str(tmp_path), "--out", str(tmp_path / "fig"))
    assert code == 0, err
    figures = sorted(p.name for p in (tmp_path / "fig").glob("*.png"))
    assert any("transfer" in f for f in figures), figures
    from lrtransfer.analysis.transfer import checks
    from lrtransfer.analysis import scan
    from lrtransfer.reporting.tuning import drift_figure

    (check,) = checks(scan(tmp_path).points)
    fig = drift_figure(check.per_key, check.metric)  # a panel per key, its drift and verdict its title
    titles = [ax.get_title() for ax in fig.axes if ax.get_visible()]
    assert len(titles) == len(check.per_key) and all(t.split("\n")[0] in check.per_key for t in titles), titles
    assert any("drifts" in t for t in titles) and any("transfers" in t for t in titles), titles
    code, out, err = cli("report", str(tmp_path))
    assert code == 0, err
    html = (tmp_path / "report.html").read_text()
    assert "hp.hidden.lr_mult" in html and "cost of not retuning" in html
    code, out, err = cli("export", str(tmp_path))
    assert code == 0, err
    import pandas as pd

    table = pd.read_csv(tmp_path / "runs.csv")
    assert {"hp.hidden.lr_mult", "optim.weight_decay", "points.kind"} <= set(table.columns) and len(table) == 3 * 3 * 22


# ---------------------------------------------------------------------------- bad input


@pytest.mark.parametrize("args, fragment", [
    (["--budget", "10", *SEARCH], "--budget 10 run-steps is below one round's 24"),
    (["width=16,32", *SEARCH], "tune searches at one scale, the base: the sweep gives 2 jobs"),
    ([], "nothing to search beside the LR"),
    (["search.hp.attention.lr_mult=[0.5,2]"], "search.hp.attention.lr_mult: model=mlp has no role attention"),
    (["search.hp.hidden.lr_mult=[2,2]"], "search.hp.hidden.lr_mult=[2.0, 2.0] is an empty range"),
    (["optim=sgd", "search.hp.hidden.eps_mult=[0.5,2]"], "search.hp.hidden.eps_mult: optim=sgd has no eps"),
    (["--budget", "1O0", *SEARCH], "--budget '1O0': give run-steps (20000) or a time"),
])
def test_bad_tune_input_is_one_line_before_training(cli, tmp_path, args, fragment):
    code, out, err = cli("tune", *BASE, f"results_dir={tmp_path}", *args)
    assert code == 2 and fragment in err and len(err.strip().splitlines()) == 1, err
    assert not list(tmp_path.rglob("record.json"))


def test_a_transfer_check_from_a_folder_without_a_search(cli, tmp_path):
    code, out, err = cli("sweep", "--transfer-from", str(tmp_path), "width=32", f"results_dir={tmp_path}")
    assert code == 2 and "no tune.json there" in err, err


def test_a_search_block_in_a_study_yaml():
    from lrtransfer.sweeps.multirun import shown
    from lrtransfer.sweeps.tuning import points_override, space_of
    from tests.conftest import typed

    cfg = typed("study=tune")
    space, lr_space = space_of(cfg)
    assert space.keys[0] == "lr" and set(space.keys[1:]) == {"hp.embedding.lr_mult", "hp.hidden.lr_mult",
                                                            "hp.hidden.init_mult", "hp.vector.lr_mult",
                                                            "optim.weight_decay", "param.output_mult"}
    assert cfg.search.policy == "trust_region" and cfg.model.name == "transformer" and lr_space.keys == ["lr"]
    assert {d.key: d.log for d in space.dims}["optim.weight_decay"]  # both ends positive: log-uniform
    line = points_override(["hp.hidden.lr_mult"], [-7.0, -6.0], [[1.0], [2.0]], "search", 3)
    assert shown(line) == "points: search round 3, 2 rows"
    assert typed(line).points.values == [[1.0], [2.0]]

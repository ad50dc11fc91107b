"""The reader's commands on fabricated records: figures, report, export, list, and bad files."""

from __future__ import annotations

import base64
import json
import re

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest

from lrtransfer import analysis
from lrtransfer.reporting import panels, plots
from tests.test_analysis import WIDTHS, fake_record, study


@pytest.fixture
def two_params(tmp_path):
    """SP drifts by -1 octave per doubling (its widest model diverges above 2^-7); 'mup' stays put."""
    root = tmp_path / "results"
    study(root, slope=-1.0, seeds=2, noise=0.002, params=("standard",))
    study(root, slope=0.0, seeds=2, noise=0.002, params=("mup",))
    fake_record(root, width=512, param="standard", seed=2, optimum=-9, diverge_above=-7)
    return root


def test_one_family_one_panel_per_param_shared_y(two_params):
    gs = analysis.groups(analysis.load_runs(two_params))
    (family,) = panels.families(gs)
    assert panels.panel_labels(family) == ["param=standard", "param=mup"]  # SP, the baseline, first
    fig = plots.lr_figure(family)
    axes = [ax for ax in fig.axes if ax.get_visible()]
    assert len(axes) == 2 and axes[0].get_ylim() == axes[1].get_ylim()
    assert "mlp" in fig._suptitle.get_text() and "adam" in fig._suptitle.get_text() and "10 steps" in fig._suptitle.get_text()
    # SP's widest model diverged above 2^-7 on one seed: crosses at those LRs, above the plotted data
    sp = axes[0]
    (crosses,) = [c for c in sp.collections if c.get_gid() == "diverged"]
    assert sorted(crosses.get_offsets()[:, 0]) == [-6, -5, -4]
    assert (crosses.get_offsets()[:, 1] > 0.85).all()  # axes coordinates: at the top edge
    optima = [c for c in sp.collections if c.get_gid() == "optimum"]
    assert len(optima) == 4
    plt.close(fig)


def test_a_blow_up_does_not_flatten_the_basin(tmp_path):
    for w in (64, 128):
        fake_record(tmp_path, width=w, optimum=-8, spike=-4)  # a finite loss of 1e6 at 2^-4
    gs = analysis.groups(analysis.load_runs(tmp_path))
    fig = plots.lr_figure(panels.families(gs)[0])
    lo, hi = fig.axes[0].get_ylim()
    assert hi < 10 and lo < 1.0  # the basin (1.0 .. ~1.8) fills the view
    plt.close(fig)


def test_transfer_figure_draws_the_fit_and_its_band(two_params):
    gs = analysis.groups(analysis.load_runs(two_params))
    fig = plots.transfer_figure(panels.families(gs)[0])
    ax = fig.axes[0]
    texts = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("param=standard: drift \u22121.0") and "drifts down" in t for t in texts)
    assert any(t.startswith("param=mup") and "transfers" in t for t in texts)
    assert [t.get_text() for t in ax.get_xticklabels()] == [str(w) for w in WIDTHS]
    bands = [c for c in ax.collections if type(c).__name__ in ("PolyCollection", "FillBetweenPolyCollection")]
    assert len(bands) == 2
    for g in gs:  # the band holds the fitted line
        line = g.fit.intercept + g.fit.slope * g.fit.band_x
        assert (g.fit.band_lo <= line + 1e-9).all() and (line <= g.fit.band_hi + 1e-9).all()
    plt.close(fig)


def test_plot_command_writes_every_figure_as_png_and_pdf(cli, two_params, tmp_path):
    code, out, err = cli("plot", str(two_params), "--out", str(tmp_path / "fig"), "--metric", "eval_loss")
    assert code == 0, err
    names = sorted(p.name for p in (tmp_path / "fig").glob("*.png"))
    assert [n.split("width-")[1] for n in names] == ["curves.png", "lr-eval_loss.png", "transfer-eval_loss.png"]
    assert all(p.with_suffix(".pdf").stat().st_size > 1000 for p in (tmp_path / "fig").glob("*.png"))


def test_summary_json_has_the_spine_keys_and_the_new_ones(cli, two_params):
    code, out, _ = cli("summary", str(two_params), "--json")
    doc = json.loads(out)
    g = next(g for g in doc["groups"] if g["fixed"]["param.name"] == "standard")
    assert {"fixed", "axis", "scales", "best_log2_lr", "best_loss", "drift"} <= set(g)
    assert {"drift_ci", "verdict", "best_log2_lr_ci", "transfer_cost", "optimum", "warnings"} <= set(g)
    assert g["verdict"] == "drifts down" and g["drift_ci"][0] <= -1 <= g["drift_ci"][1]
    code, out, _ = cli("summary", str(two_params))
    assert code == 0 and "drifts down" in out and "transfers" in out and "95% interval" in out


def test_report_is_one_self_contained_html_file(cli, two_params, tmp_path):
    out = tmp_path / "r.html"
    code, _, err = cli("report", str(two_params), "--out", str(out))
    assert code == 0, err
    text = out.read_text()
    assert text.startswith("<!DOCTYPE html>") and text.rstrip().endswith("</html>")
    assert not re.search(r"(?:src|href)\s*=\s*['\"](?!data:)", text)  # nothing fetched from elsewhere
    assert "http://" not in text and "https://" not in text and "<script" not in text and "<link" not in text
    images = re.findall(r"src='data:image/png;base64,([^']+)'", text)
    assert len(images) == 3 and all(base64.b64decode(i)[:8] == b"\x89PNG\r\n\x1a\n" for i in images)
    assert "drifts down" in text and "transfers" in text and "lr.log2_min" in text  # verdicts, configs


@pytest.mark.parametrize("fmt, read", [("csv", pd.read_csv), ("parquet", pd.read_parquet)])
def test_export_round_trips_through_pandas(cli, two_params, tmp_path, fmt, read):
    if fmt == "parquet":
        pytest.importorskip("pyarrow")
    path = tmp_path / f"runs.{fmt}"
    code, out, err = cli("export", str(two_params), "--format", fmt, "--out", str(path))
    assert code == 0, err
    back = read(path)
    expected = analysis.export_frame(analysis.load_runs(two_params))
    assert list(back.columns) == list(expected.columns)
    assert len(back) == 2 * 4 * 2 * 9 + 9
    pd.testing.assert_frame_equal(back, expected, check_dtype=False)
    assert {"study", "job_id", "width", "param.name", "train.steps", "lr.log2_min", "run_seed", "log2_lr",
            "train_loss", "diverged"} <= set(back.columns)


def test_export_columns_are_documented():
    page = open("docs/studies.md").read()  # its "Report, export, list" section
    for col in ("study", "job_id", *analysis.RUN_COLUMNS):
        assert f"`{col}`" in page, col


def test_parquet_without_pyarrow_is_one_clear_line(cli, two_params, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "pyarrow" else real(name, *a))
    code, _, err = cli("export", str(two_params), "--format", "parquet")
    assert code == 2 and err.strip().count("\n") == 0 and "pip install 'lrtransfer[parquet]'" in err
    code, _, err = cli("export", str(two_params), "--format", "xlsx")
    assert code == 2 and "unknown export format 'xlsx'; valid: csv, parquet" in err


def test_list_shows_studies_groups_runs_and_divergences(cli, two_params):
    fake_record(two_params, width=64, name="other")
    failed = two_params / "other" / "failedjob" / "record.json"
    failed.parent.mkdir()
    failed.write_text(json.dumps({"status": "failed", "config": {"name": "other"}, "error": "RuntimeError: boom"}))
    code, out, err = cli("list", str(two_params))
    assert code == 0, err
    rows = [[c.strip() for c in line.split("│")[1:-1]] for line in out.splitlines() if line.startswith("│")]
    assert ["study", "param.name=standard", "width", "64,128,256,512", "9", "81", "3"] in rows  # jobs, runs, diverged
    assert ["study", "param.name=mup", "width", "64,128,256,512", "8", "72", "0"] in rows
    assert ["other", "param.name=standard", "width", "64", "1", "9", "0"] in rows
    assert "1 failed job(s)" in out and "RuntimeError: boom" in out


def test_a_corrupt_record_is_a_one_line_warning_in_the_cli(cli, two_params):
    bad = two_params / "study" / "zz" / "record.json"
    bad.parent.mkdir()
    bad.write_text("{not json")
    code, out, err = cli("summary", str(two_params))
    assert code == 0
    (line,) = [x for x in err.splitlines() if x.strip()]
    assert line.startswith("warning: skipped ") and str(bad) in line


def test_training_curves_at_a_diverging_lr(two_params):
    gs = analysis.groups(analysis.load_runs(two_params))
    fig = plots.curves_figure(panels.families(gs)[0], log2_lr=-5)
    sp = fig.axes[0]  # param=standard, where one seed of width 512 blew up to a loss of 50
    (crosses,) = [c for c in sp.collections if c.get_gid() == "diverged"]
    assert len(crosses.get_offsets()) == 1
    assert sp.get_ylim()[1] < 3  # the blow-up leaves the top; the curves that trained fill the view
    assert "log$_2$ LR \u22125" in sp.get_title()
    plt.close(fig)


def test_a_studys_figures_are_the_same_alone_and_beside_other_studies(cli, tmp_path):
    """`plot DIR` on a folder of studies with other optimizers and parameterizations draws each study as alone."""
    def sgd_study(root):
        for w in (64, 128):
            fake_record(root, width=w, optim="sgd", optim_keys={"momentum": 0.9, "nesterov": False}, name="a")

    sgd_study(tmp_path / "alone")
    sgd_study(tmp_path / "all")
    for w in (64, 128):
        fake_record(tmp_path / "all", width=w, param="mup", param_keys={"base_width": 128}, name="b")
        fake_record(tmp_path / "all", width=w, param="equalized", param_keys={"gain": 2.0}, name="b")
    for root in ("alone", "all"):
        code, _, err = cli("plot", str(tmp_path / root), "--out", str(tmp_path / f"fig-{root}"))
        assert code == 0, err
    alone = sorted((tmp_path / "fig-alone").glob("*.png"))
    assert len(alone) == 3 and len(list((tmp_path / "fig-all").glob("*.png"))) == 6
    for p in alone:  # same size, same title, same everything
        assert (tmp_path / "fig-all" / p.name).read_bytes() == p.read_bytes(), p.name


def test_for_accuracy_diverged_crosses_sit_at_the_bottom_and_text_says_accuracy(cli, two_params):
    gs = analysis.groups(analysis.load_runs(two_params), metric="eval_acc")
    fig = plots.lr_figure(panels.families(gs)[0], metric="eval_acc")
    (crosses,) = [c for c in fig.axes[0].collections if c.get_gid() == "diverged"]
    assert (crosses.get_offsets()[:, 1] < 0.15).all()  # axes coordinates: the worst edge of an accuracy axis
    plt.close(fig)
    code, out, err = cli("summary", str(two_params), "--metric", "eval_acc")
    assert code == 0, err
    assert "best accuracy" in out and "best loss" not in out
    code, out, err = cli("summary", str(two_params))
    assert "best loss" in out and "accuracy" not in out


def test_report_names_each_study_shows_figures_at_one_type_size_and_leaves_out_the_engine(cli, two_params, tmp_path):
    for w in (64, 128):
        fake_record(two_params, width=w, name="other")
    out = tmp_path / "r.html"
    code, _, err = cli("report", str(two_params), "--out", str(out))
    assert code == 0, err
    text = out.read_text()
    headings = re.findall(r"<h2>(.*?)</h2>", text)
    studies = [h for h in headings if h.startswith("study ")]
    assert len(studies) == 2 and len(set(studies)) == 2
    assert studies[0].startswith("study other: ") and studies[1].startswith("study study: ")
    # shown width / pixel width is one number for every figure: text shows at one size
    images = re.findall(r"style='width:([0-9.]+)%' src='data:image/png;base64,([^']+)'", text)
    assert len(images) == 6
    ratios = {round(float(w) / int.from_bytes(base64.b64decode(b)[16:20], "big"), 5) for w, b in images}
    assert len(ratios) == 1
    widths = {int.from_bytes(base64.b64decode(b)[16:20], "big") for _, b in images}
    assert len(widths) > 1  # one- and two-panel figures alike
    assert "engine." not in text and "lr.log2_min" in text


def test_panels_put_sp_first_and_their_titles_fit(tmp_path):
    study(tmp_path, slope=-1.0, seeds=2, noise=0.002, params=("mup", "standard", "equalized"))
    gs = analysis.groups(analysis.load_runs(tmp_path))
    (family,) = panels.families(gs)
    assert panels.panel_labels(family) == ["param=standard", "param=equalized", "param=mup"]
    for fig in (plots.lr_figure(family), plots.curves_figure(family)):
        renderer = fig.canvas.get_renderer()
        fig.draw_without_rendering()
        for ax in fig.axes:  # a title no wider than its panel never runs into the next one
            assert ax.title.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width + 1
        plt.close(fig)


def test_training_curves_show_every_recorded_point_and_say_how_many_seeds(tmp_path):
    study(tmp_path, slope=0.0, seeds=1, noise=0.05)  # noisy single-batch losses
    gs = analysis.groups(analysis.load_runs(tmp_path))
    fig = plots.curves_figure(panels.families(gs)[0])
    ax = fig.axes[0]
    lo, hi = ax.get_ylim()
    recorded = [line for line in ax.get_lines() if line.get_gid() == "recorded"]
    assert recorded and all(lo <= y <= hi for line in recorded for y in line.get_ydata() if np.isfinite(y))
    title = fig._suptitle.get_text()
    assert "1 seed" in title and "mean over" not in title
    handles = fig.axes[0].get_legend().legend_handles
    assert all(h.get_marker() in ("None", "", None) for h in handles)  # the lines have no dots
    plt.close(fig)


def test_optima_on_the_grid_edge_are_in_the_transfer_legend(tmp_path):
    for w, opt in zip(WIDTHS, [-6, -7, -8, -13]):  # the widest's optimum lies below the grid
        fake_record(tmp_path, width=w, optimum=opt)
    fig = plots.transfer_figure(panels.families(analysis.groups(analysis.load_runs(tmp_path)))[0])
    (legend,) = fig.legends
    edge = [h for h, t in zip(legend.legend_handles, legend.get_texts()) if "lowest LR" in t.get_text()]
    assert len(edge) == 1 and edge[0].get_marker() == "v" and edge[0].get_markerfacecolor() == "white"
    assert not any("highest LR" in t.get_text() for t in legend.get_texts())
    plt.close(fig)


def test_a_published_model_is_named_by_its_class(cli, tmp_path):
    """model=custom's records name the model by the class model.target ends in: in the groups, the
    figure titles, summary, list, report and export (read off the config: job ids stay as they are)."""
    gpt2 = {"name": "custom", "target": "transformers:GPT2LMHeadModel", "width_key": "n_embd"}
    study(tmp_path, seeds=1, widths=[64, 128], model=gpt2)
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    assert g.fixed["model.name"] == "custom" and g.fixed["model.class"] == "GPT2LMHeadModel"
    (family,) = panels.families([g])
    assert panels.description(family).startswith("GPT2LMHeadModel (depth 3) · teacher")
    fig = plots.lr_figure(family)
    assert fig._suptitle.get_text().startswith("GPT2LMHeadModel")
    plt.close(fig)
    for command in ("summary", "list"):
        code, out, err = cli(command, str(tmp_path))
        assert code == 0 and "model.class=GPT2LMHeadModel" in out, (command, out, err)
    assert cli("export", str(tmp_path))[0] == 0
    assert set(pd.read_csv(tmp_path / "runs.csv")["model.class"]) == {"GPT2LMHeadModel"}
    assert cli("report", str(tmp_path))[0] == 0
    assert "<h2>study study: GPT2LMHeadModel (depth 3) · teacher" in (tmp_path / "report.html").read_text()


def test_one_seed_says_what_the_interval_leaves_out_and_how_to_add_seeds(cli, tmp_path):
    """Two widths x one seed: a verdict whose interval holds the LR curves' noise only. summary and
    report say so and name the re-run that measures the seeds' spread; two seeds say nothing."""
    study(tmp_path / "one", seeds=1, widths=[64, 128], noise=0.01, name="one")
    study(tmp_path / "two", seeds=2, widths=[64, 128], noise=0.01, name="two")
    code, out, err = cli("summary", str(tmp_path / "one"))
    text = " ".join(out.split())
    assert code == 0 and "one seed per width: the interval holds no seed-to-seed variation" in text, out
    assert "re-run the sweep with seed=0,1,2 added" in text and "--until-decided" in text
    assert cli("report", str(tmp_path / "one"))[0] == 0
    assert "the interval holds no seed-to-seed variation" in (tmp_path / "one" / "report.html").read_text()
    code, out, err = cli("summary", str(tmp_path / "two"))
    assert code == 0 and "seed-to-seed" not in out
    study(tmp_path / "four", seeds=1, noise=0.01, name="four")  # four widths: the scatter about the line
    (g,) = analysis.groups(analysis.load_runs(tmp_path / "four"))
    assert any("through the scatter of the 4 optima about the line (2 degrees of freedom)" in w for w in g.warnings)


def test_a_study_name_too_long_for_a_file_name_still_gets_its_figures(cli, tmp_path):
    """A figure's name joins the study's name, the model's, the data's and the axis: past 255 bytes
    (a 240-character name that `sweep` accepts) it is cut and made unique by a hash."""
    study(tmp_path / "r", seeds=1, widths=[64, 128], name="s")
    for path in (tmp_path / "r").glob("*/*/record.json"):
        rec = json.loads(path.read_text())
        rec["config"]["name"] = "s" * 240
        path.write_text(json.dumps(rec))
    code, out, err = cli("plot", str(tmp_path / "r"), "--out", str(tmp_path / "fig"))
    assert code == 0, err
    names = [p.name for p in (tmp_path / "fig").glob("*.png")]
    assert names and all(len(n.encode()) <= 255 and n.startswith("s" * 100) for n in names), names


@pytest.mark.parametrize("fmt, name, named", [("parquet", "runs.csv", "csv"), ("csv", "runs.parquet", "parquet"),
                                              ("csv", "RUNS.PARQUET", "parquet")])
def test_export_refuses_a_format_its_out_extension_contradicts(cli, two_params, tmp_path, fmt, name, named):
    pytest.importorskip("pyarrow")
    out = tmp_path / name
    code, _, err = cli("export", str(two_params), "--format", fmt, "--out", str(out))  # was: exit 0, Parquet in x.csv
    assert code == 2 and err.strip().count("\n") == 0, err
    assert f"--out {out} names the {named} format but the export format is {fmt}; give --format {named}, " \
           f"or an --out ending in .{fmt}" in err
    assert not out.exists()


def test_export_format_follows_the_out_extension_when_not_given(tmp_path):
    pytest.importorskip("pyarrow")
    from lrtransfer.errors import UserError
    from lrtransfer.reporting.export import resolve_format, write_table

    assert resolve_format(None, tmp_path / "x.parquet") == "parquet"
    assert resolve_format(None, tmp_path / "x.CSV") == "csv"
    assert resolve_format(None, tmp_path / "x.tsv") == "csv"  # no format named: csv, as before
    assert resolve_format(None, None) == "csv"
    assert resolve_format("parquet", tmp_path / "x.pq") == "parquet"  # another extension takes any format
    with pytest.raises(UserError, match=r"unknown export format 'xlsx'; valid: csv, parquet"):
        resolve_format("xlsx", tmp_path / "x.csv")
    table = pd.DataFrame({"width": [16, 32], "train_loss": [0.5, 0.25]})
    pd.testing.assert_frame_equal(pd.read_parquet(write_table(table, tmp_path / "x.parquet")), table)
    pd.testing.assert_frame_equal(pd.read_csv(write_table(table, tmp_path / "x.csv")), table)


def test_export_to_a_parquet_path_writes_parquet(cli, two_params, tmp_path):
    pytest.importorskip("pyarrow")
    code, out, err = cli("export", str(two_params), "--out", str(tmp_path / "x.parquet"))
    assert code == 0, err
    assert len(pd.read_parquet(tmp_path / "x.parquet")) > 0


def test_the_running_mean_starts_where_it_has_its_window(tmp_path):
    """A short run's loss falls fast at first: a window cut short there averaged only later, lower
    losses and drew the mean below the first ones (4.29 where the first loss was 4.60). The solid
    line is the centred mean of 9 recorded points wherever drawn, from the 5th point on."""
    from lrtransfer.store import write_record

    steps = list(range(30))
    loss = [2.0 + 2.6 * np.exp(-s / 5) for s in steps]
    for w in (64, 128):
        runs = [{"lr": 2.0**x, "log2_lr": float(x), "seed": 0, "final_loss": loss[-1] + 0.01 * (x + 8) ** 2,
                 "diverged": False, "history_step": steps, "history_loss": loss} for x in range(-10, -5)]
        config = {"name": "s", "width": w, "depth": 2, "model": {"name": "mlp"}, "param": {"name": "standard"},
                  "optim": {"name": "adam"}, "data": {"name": "teacher"}, "train": {"steps": 30}}
        write_record(tmp_path / "s" / f"j{w}", {"job_id": f"j{w}", "status": "complete", "config": config, "runs": runs})
    (g,) = analysis.groups(analysis.load_runs(tmp_path))
    fig = plots.curves_figure([g])
    solid = [x for x in fig.axes[0].get_lines() if x.get_gid() != "recorded"]
    assert len(solid) == 2  # a line per width
    for line in solid:
        x, y = line.get_xdata(), line.get_ydata()
        drawn = np.isfinite(y)
        assert x[drawn][0] == 4 and x[drawn][-1] == 25  # the window's middle, at each end
        assert y[drawn] == pytest.approx([np.mean(loss[i - 4 : i + 5]) for i in range(4, 26)])
        assert y[drawn][0] > loss[4]  # above the curve it smooths (it bends up), never below the first losses
    plt.close(fig)

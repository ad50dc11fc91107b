"""The user's path end to end: sweep -> records -> summary/plot, resume, and bad input."""

from __future__ import annotations

import json
import re
import subprocess
import sys


from tests.conftest import TINY


def sweep(cli, tmp_path, *extra):
    return cli("sweep", *TINY, f"results_dir={tmp_path}", "name=t", *extra)


def test_sweep_writes_one_record_per_job_and_resumes(cli, tmp_path):
    code, out, err = sweep(cli, tmp_path, "width=16,32")
    assert code == 0, err
    records = sorted(tmp_path.glob("t/*/record.json"))
    assert len(records) == 2
    rec = json.loads(records[0].read_text())
    assert rec["status"] == "complete" and rec["config"]["width"] in (16, 32)
    assert {"versions", "device", "wall_time_s", "job_id"} <= set(rec)
    assert 50 < rec["peak_memory_mib"] < 8192  # this process's peak RSS, in MiB (torch alone is ~300)
    assert len(rec["runs"]) == 5  # log2 LR -10..-6
    run = rec["runs"][0]
    assert {"lr", "log2_lr", "final_loss", "eval_loss", "eval_acc", "diverged", "history_step", "history_loss"} <= set(run)
    assert "2 job(s) ran, 0 already done" in out and "drift" in out
    mtimes = [r.stat().st_mtime_ns for r in records]

    code, out, _ = sweep(cli, tmp_path, "width=16,32,48")
    assert code == 0 and "1 job(s) ran, 2 already done" in out
    assert [r.stat().st_mtime_ns for r in records] == mtimes

    code, out, _ = sweep(cli, tmp_path, "width=16", "--rerun")
    assert code == 0 and "1 job(s) ran, 0 already done" in out


def test_summary_json_and_plot(cli, tmp_path):
    assert sweep(cli, tmp_path, "width=16,32")[0] == 0
    code, out, _ = cli("summary", str(tmp_path), "--json")
    assert code == 0
    (g,) = json.loads(out)["groups"]
    assert g["axis"] == "width" and g["scales"] == [16, 32] and len(g["best_log2_lr"]) == 2
    code, out, _ = cli("plot", str(tmp_path))
    assert code == 0
    assert list((tmp_path / "figures").glob("*.png")) and list((tmp_path / "figures").glob("*.pdf"))


def test_a_diverging_lr_is_recorded_and_the_sweep_goes_on(cli, tmp_path):
    code, _, err = sweep(cli, tmp_path, "width=16", "lr.log2_min=-8", "lr.log2_max=12", "lr.log2_step=10")
    assert code == 0, err
    (rec,) = [json.loads(p.read_text()) for p in tmp_path.glob("t/*/record.json")]
    flags = [r["diverged"] for r in rec["runs"]]
    assert flags == [False, True, True]


def test_hydra_flags_pass_through(cli):
    code, out, _ = cli("sweep", "--cfg", "job", "width=77")
    assert code == 0 and "width: 77" in out
    code, out, _ = cli("sweep", "-h")
    assert code == 0, out
    # each group with its options, the default in brackets
    assert re.search(r"^\s*model\s+cnn .*\[mlp\]", out, re.M) and re.search(r"^\s*param\s+.*\[standard\]", out, re.M), out


def test_console_script_help_is_fast_and_imports_no_torch():
    code = "import sys, lrtransfer.cli.app; print('torch' in sys.modules, 'matplotlib' in sys.modules, 'hydra' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.split() == ["False", "False", "False"]


def test_every_command_answers_h_and_help(cli):
    """-h and --help on every command (sweep -h lists the config groups and keys instead of the options)."""
    from lrtransfer.cli.app import app

    names = [c.name or c.callback.__name__.replace("_", "-") for c in app.registered_commands]
    assert {"sweep", "summary", "inspect", "coord-check", "list"} <= set(names)
    for args in ([], *([name] for name in names)):
        for flag in ("-h", "--help"):
            code, out, err = cli(*args, flag)
            assert code == 0 and "Usage:" in out and not err, (args, flag, out, err)


def test_help_shows_each_options_default(cli):
    """A default stated in an option's help ("(default: DIRECTORY/report.html)") reaches the screen:
    rich's markup took "[default: ...]" for a tag and printed nothing of it."""
    import re

    from lrtransfer.cli.app import app

    checked = 0
    for command in app.registered_commands:
        name = command.name or command.callback.__name__.replace("_", "-")
        stated = [m.group(1).split()[0] for p in command.callback.__defaults__ or ()
                  for m in re.finditer(r"[\[(]default: ([^\])]*)[\])]", str(getattr(p, "help", "") or ""))]
        if not stated:
            continue
        code, out, _ = cli(name, "--help")
        screen = " ".join(re.sub(r"[│╭╮╰╯─]", " ", out).split())
        assert code == 0
        for first_word in stated:
            assert f"default: {first_word}" in screen, (name, first_word)
            checked += 1
    assert checked >= 5  # plot, report, export, coord-check state theirs


def test_version_names_what_a_bug_report_needs(cli):
    import platform

    import torch

    from lrtransfer import __version__

    code, out, err = cli("--version")
    assert code == 0 and out.startswith(f"lrtransfer {__version__} (torch {torch.__version__}, hydra-core ") and err == ""
    assert f"python {platform.python_version()})" in out
    code, _, err = cli("summary", "--version")  # the app's own option, not a command's
    assert code == 2 and "unknown option --version for lrtransfer summary; valid:" in err

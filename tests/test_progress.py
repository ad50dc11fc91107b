"""The sweep's progress counts run-steps that jobs report through their folders, wherever they run."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import pytest

from tests.conftest import TINY


def test_a_job_reports_its_run_steps_to_its_folder(tmp_path):
    from lrtransfer.sweeps import progress

    with progress.job_steps("job", 100, tmp_path) as advance:
        advance(30)  # the first report is written at once, later ones at most once a second
        assert (tmp_path / progress.PROGRESS_NAME).read_text() == "30"
    assert progress.done_in(tmp_path, 100) == 30
    (tmp_path / "record.json").write_text("{}")
    assert progress.done_in(tmp_path, 100) == 100


def test_the_sweep_bar_counts_work_written_by_other_processes(tmp_path):
    from lrtransfer.sweeps import progress

    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    with progress.sweep_display({a: 100, b: 50, c: 10}) as display:
        code = f"from lrtransfer.sweeps.progress import StepFile; s = StepFile({str(a)!r}); s.add(40)"
        subprocess.run([sys.executable, "-c", code], check=True)  # a worker, 40 of its 100 run-steps done
        (b / "record.json").write_text("{}")  # a finished job: all of its 50
        deadline = time.monotonic() + 30
        while display.tasks[0].completed != 90 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert display.tasks[0].completed == 90 and display.tasks[0].total == 160


def _swept(cli, tmp_path, launcher: str, progress: str) -> str:
    """The stderr of a sweep of two tiny widths under LAUNCHER with engine.progress=PROGRESS."""
    if launcher == "parallel":
        pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    extra = ["hydra.launcher.n_jobs=2"] if launcher == "parallel" else []
    code, _, err = cli("sweep", *TINY, f"engine.progress={progress}", "width=16,32", f"hydra/launcher={launcher}", *extra,
                       f"results_dir={tmp_path}", "name=p")
    assert code == 0, err
    assert len(list(tmp_path.rglob("record.json"))) == 2
    return err


@pytest.mark.parametrize("launcher", ["basic", "parallel"])
def test_the_sweep_bar_ends_at_the_sweeps_run_steps_under_each_launcher(cli, tmp_path, launcher):
    err = _swept(cli, tmp_path, launcher, "true")
    assert re.search(r"sweep \(2 jobs\).*120/120 run-steps", err)  # 2 jobs x 5 LRs x 12 steps
    assert not list(tmp_path.rglob(".progress"))  # removed once the records are written


@pytest.mark.parametrize("launcher", ["basic", "parallel"])
def test_no_job_writes_its_step_file_when_progress_is_off(cli, tmp_path, launcher):
    """engine.progress=false: no display polls the step files (nothing else reads them), so no job
    writes one; they were written and, with no display to remove them, left in every job's folder."""
    _swept(cli, tmp_path, launcher, "false")
    assert not list(tmp_path.rglob(".progress*"))

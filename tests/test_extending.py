"""An option is one module and one YAML file: copying an option's two files under a new
name (and renaming it inside them) adds an option that works with no other file touched.

Checked in a temporary copy of the package, as docs/extending.md describes it: a
parameterization (standard -> mystd), a model (mlp -> mymlp) and an optimizer
(adam -> myadam), the model and the optimizer under every parameterization. A copy
computes what its original computes, number for number, so a copy that loses a
declaration on the way (an optimizer's kind of update, an LR grid) fails here.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COPIES = {"param": ("standard", "mystd"), "model": ("mlp", "mymlp"), "optim": ("adam", "myadam")}
PARAMS = ("standard", "equalized", "mup", "modular")


def copy_option(pkg: Path, group: str, old: str, new: str) -> None:
    for src, dst in ((pkg / "options" / group / f"{old}.py", pkg / "options" / group / f"{new}.py"),
                     (pkg / "conf" / group / f"{old}.yaml", pkg / "conf" / group / f"{new}.yaml")):
        dst.write_text(re.sub(rf"\b{old}\b", new, src.read_text()))


@pytest.mark.slow  # a whole option copied and swept (20 s)
def test_an_option_copied_under_a_new_name_works_with_no_other_file_touched(tmp_path):
    shutil.copytree(ROOT / "lrtransfer", tmp_path / "lrtransfer", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "hydra_plugins", tmp_path / "hydra_plugins", ignore=shutil.ignore_patterns("__pycache__"))
    for group, (old, new) in COPIES.items():
        copy_option(tmp_path / "lrtransfer", group, old, new)
    results = tmp_path / "results"
    params = ",".join(PARAMS + ("mystd",))
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(
        [sys.executable, "-c", "from lrtransfer.cli.app import main; main()", "sweep", "model=mlp,mymlp", "optim=adam,myadam",
         f"param={params}", "width=16", "depth=3", "train.steps=8", "train.batch_size=8", "data.eval_size=16",
         "lr.log2_min=-8", "lr.log2_max=-6", "lr.log2_step=2", "engine.progress=false", "engine.threads=1",
         f"results_dir={results}", "name=copies"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in (results / "copies").glob("*/record.json")]
    assert all(r["status"] == "complete" for r in records) and len(records) == 2 * 2 * 5
    losses = {(r["config"]["model"]["name"], r["config"]["optim"]["name"], r["config"]["param"]["name"]):
              [run["final_loss"] for run in r["runs"]] for r in records}
    for (model, optim, param), got in losses.items():
        original = ({"mymlp": "mlp"}.get(model, model), {"myadam": "adam"}.get(optim, optim),
                    {"mystd": "standard"}.get(param, param))
        assert got == losses[original], (model, optim, param)
    assert len({tuple(v) for v in losses.values()}) > 1  # the parameterizations differ: the comparison can fail

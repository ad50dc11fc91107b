"""Shell completion of sweep overrides, in a real bash (driven through tmux)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
import uuid

import pytest

from tests.conftest import lrtransfer_cmd


def test_completion_candidates_leave_out_internal_groups():
    from lrtransfer.cli.catalog import complete

    assert {"model=", "model."} <= set(complete([], "mo"))
    assert complete([], "model=re") == ["model=resnet", "model=resnet_cnn"]
    assert "model.residual=" in complete(["model=resnet"], "model.r")
    assert "train.steps=" in complete([], "train.")
    assert not any(c.startswith(("schema", "grid")) for c in complete([], ""))
    assert complete([], "hyd") == ["hydra/launcher="]


@pytest.mark.skipif(not shutil.which("tmux"), reason="needs tmux")
def test_tab_completes_groups_options_and_keys_in_bash(tmp_path):
    exe = lrtransfer_cmd()[0]
    shown = subprocess.run([exe, "--show-completion", "bash"], capture_output=True, text=True, cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    script = shown.stdout
    assert "COMP_WORDBREAKS" in script
    (tmp_path / "rc").write_text(f"PS1='ready$ '\nexport PATH={os.path.dirname(exe)}:$PATH\n{script}\n")
    session = f"lrt-{uuid.uuid4().hex[:8]}"
    tmux = ["tmux", "-L", session]
    subprocess.run([*tmux, "new-session", "-d", "-s", session, "-x", "200", "-y", "50",
                    f"bash --noprofile --rcfile {tmp_path / 'rc'} -i"], check=True, cwd=tmp_path)

    def typed(keys: list[str], expect: str, timeout: float = 120) -> str:
        """Send KEYS, then wait until the line being edited (the pane's last non-empty line) shows EXPECT."""
        subprocess.run([*tmux, "send-keys", "-t", session, *keys], check=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            pane = subprocess.run([*tmux, "capture-pane", "-p", "-t", session], capture_output=True, text=True).stdout
            if expect in pane:
                return pane
            time.sleep(0.3)
        raise AssertionError(f"never saw {expect!r} after typing {keys}:\n{pane}")

    try:
        typed([], "ready$")  # the prompt: bash has read the completion script
        typed(["lrtransfer sweep mo", "Tab"], "$ lrtransfer sweep model")  # model. and model=: their common prefix
        pane = typed(["M-?"], "model=")  # readline's possible-completions (as a second Tab) lists both
        assert "model." in pane
        typed(["=re", "Tab"], "$ lrtransfer sweep model=resnet")  # resnet, resnet_cnn
        typed(["C-u", "lrtransfer sweep train.ste", "Tab"], "$ lrtransfer sweep train.steps=")
        typed(["7"], "$ lrtransfer sweep train.steps=7")  # no space after a key's `=`
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True)

"""Shared helpers: run the CLI in-process, and compose small configs."""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import sys
import tempfile

# As the CLI does (see lrtransfer.cli.app.main): idle OpenMP threads sleep instead of
# spinning, so a busy machine does not slow every small op by 10-100x.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# One torch thread per test process, as a job gets by default (engine.threads=0): pytest-xdist
# runs a process per core, and two threads each on a shared machine wait on each other.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# What lrtransfer keeps in the user's cache folder (MNIST-1D's generated set) is kept for this
# session in a folder of its own; sweeps the tests start as processes read it there too.
os.environ["XDG_CACHE_HOME"] = tempfile.mkdtemp(prefix="lrtransfer-test-cache-")
atexit.register(shutil.rmtree, os.environ["XDG_CACHE_HOME"], True)

import pytest  # noqa: E402

TINY = ["train.steps=12", "train.batch_size=16", "data.eval_size=64", "lr.log2_min=-10", "lr.log2_max=-6", "engine.progress=false"]


@pytest.fixture
def cli(monkeypatch, capsys):
    """Run `lrtransfer ARGS...` in this process; return (exit code, stdout, stderr)."""
    from lrtransfer.cli.app import main

    def run(*args: str) -> tuple[int, str, str]:
        monkeypatch.setattr(sys, "argv", ["lrtransfer", *args])
        code = 0
        try:
            main()
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        out, err = capsys.readouterr()
        return code, out, err

    return run


def run_cli(*args: str) -> int:
    """`lrtransfer ARGS...` in this process, as the `cli` fixture runs it, for a module's fixture
    (`cli` is per test); its exit code."""
    from lrtransfer.cli.app import main

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", ["lrtransfer", *args])
        try:
            main()
        except SystemExit as e:
            return e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
    return 0


_PACKAGED = ("lrtransfer.conf", "hydra.conf")  # installed YAML files: no test writes to them


def _compose_without_rereading() -> None:
    """Each Hydra composition (a sweep composes twice, an adaptive one per job and round) parses
    every YAML file of the config tree again, and deep-copies the ConfigStore with every schema
    lrtransfer registers. Neither can change during a test session: each packaged file is parsed
    once and every read gets a fresh copy of it, and the store (a singleton) is its own copy: what
    Hydra composes is the same. A user's config folder (file://) is read
    as ever, and so is everything in the sweeps the tests start as processes."""
    import copy
    import dataclasses

    from hydra._internal.sources_registry import SourcesRegistry
    from hydra.core.config_store import ConfigStore
    from hydra.core.plugins import Plugins

    Plugins.instance()  # its scan of Hydra's own plugins loads their modules afresh: patch the class it registers
    source = SourcesRegistry.instance().resolve("pkg")
    read, parsed = source.load_config, {}

    def load_config(self, config_path: str):
        if self.path not in _PACKAGED:
            return read(self, config_path)
        key = (self.path, config_path)
        if key not in parsed:
            parsed[key] = read(self, config_path)  # a missing file raises each time, as before
        r = parsed[key]
        return dataclasses.replace(r, config=copy.deepcopy(r.config), header=dict(r.header))

    source.load_config = load_config
    ConfigStore.__deepcopy__ = lambda self, memo: self


_compose_without_rereading()


_COMPOSED: dict = {}


def compose(*overrides: str):
    """The composed job config for `overrides` (no sweep values), as a DictConfig.

    Hundreds of tests compose the same overrides again (a sixth of the calls of a run): each set
    is composed once a session, from the packaged files and schemas, which cannot change in it (see
    `_compose_without_rereading`), and every call gets its own deep copy, as Hydra's own readers
    do. A composition that fails is not kept: it fails again, the same way, each time."""
    import copy

    key = tuple(overrides)
    if key not in _COMPOSED:
        from hydra import compose as hydra_compose
        from hydra import initialize_config_module

        import lrtransfer.config  # noqa: F401  (registers the schemas)
        import lrtransfer.store  # noqa: F401  (registers the job-id resolver)

        with initialize_config_module("lrtransfer.conf", version_base="1.3"):
            _COMPOSED[key] = hydra_compose("config", overrides=list(overrides))
    return copy.deepcopy(_COMPOSED[key])


def typed(*overrides: str):
    from lrtransfer.config import validate

    return validate(compose(*overrides))


def lrtransfer_cmd() -> list[str]:
    """The installed console script of this interpreter's environment, for real subprocesses."""
    exe = shutil.which("lrtransfer", path=os.path.dirname(sys.executable)) or shutil.which("lrtransfer")
    return [exe] if exe else [sys.executable, "-c", "from lrtransfer.cli.app import main; main()"]


@pytest.fixture(scope="session")
def two_widths(tmp_path_factory):
    """A finished study of two widths (`name=s`), to be copied and damaged (never changed in place:
    one per test session, which several test files read)."""
    from lrtransfer.sweeps.launch import launch

    root = tmp_path_factory.mktemp("two")
    launch([*TINY, "width=16,32", f"results_dir={root}", "name=s"])
    return root


def copy_study(src, dst):
    """A copy of `two_widths`' folder at `dst`, and its records, sorted."""
    shutil.copytree(src, dst)
    return sorted((dst / "s").glob("*/record.json"))


class Hung(Exception):
    """Not an OSError: a reader that catches those must not turn a hang into a skipped record."""


@pytest.fixture
def deadline():
    """A command that blocks (opening a FIFO waits for a writer) fails the test instead of hanging it."""
    def expire(*_):
        raise Hung("the command hung")

    old = signal.signal(signal.SIGALRM, expire)
    signal.alarm(60)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)

"""Beyond one machine: a Ray cluster and SLURM, checked against the real engines.

Tests marked `cluster` start a one-node SLURM cluster or a Ray head on localhost
through `scripts/cluster_check.sh` (root; it installs what is missing) and stop
them afterwards; they are skipped, with the script's reason, where that cannot be
done. `scripts/cluster_check.sh` runs this file; `make test` deselects them.
The unmarked tests here need no engine.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import TINY, lrtransfer_cmd
from tests.test_adaptive import SHORT, short_reference, short_run  # noqa: F401  (fixtures)
from tests.test_adaptive import records as adaptive_records
from tests.test_launchers import in_process, needs, records  # noqa: F401  (in_process: a fixture)

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "cluster_check.sh"
SKIPPED = 77  # the script's "cannot set up here"


def start(kind: str) -> dict:
    """Start an engine through the script; return the environment it says to use, or skip with its reason."""
    proc = subprocess.run([str(SCRIPT), "start", kind], capture_output=True, text=True, timeout=900,
                          env={**os.environ, "PYTHON": sys.executable})
    if proc.returncode == SKIPPED:
        pytest.skip(proc.stderr.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr
    env = dict(os.environ)
    for line in proc.stdout.splitlines():
        if line.startswith("export "):
            env.update(kv.split("=", 1) for kv in line[len("export "):].split())
    return env


def stop(kind: str) -> None:
    subprocess.run([str(SCRIPT), "stop", kind], check=True, timeout=120)


@pytest.fixture(scope="module")
def slurm():
    env = start("slurm")
    yield env
    stop("slurm")


@pytest.fixture(scope="module")
def ray_head():
    env = start("ray")
    yield env
    stop("ray")


def sweep(env: dict, *overrides: str, timeout: int = 900) -> subprocess.CompletedProcess:
    return subprocess.run(lrtransfer_cmd() + ["sweep", *overrides], capture_output=True, text=True,
                          env=env, timeout=timeout)


SLURM = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.cpus_per_task=1",
         "hydra.launcher.mem_gb=1"]


# --- no engine needed -------------------------------------------------------


def test_missing_launcher_plugin_names_the_extra():
    from hydra.errors import MissingConfigException

    from lrtransfer.sweeps.messages import describe

    for option, extra in [("ray", "ray"), ("submitit_slurm", "submitit"), ("joblib", "joblib")]:
        exc = MissingConfigException(f"In 'hydra/launcher/x': Could not load 'hydra/launcher/{option}'.",
                                     missing_cfg_file=f"hydra/launcher/{option}")
        assert describe(exc) == (f"the launcher needs Hydra's {option} launcher plugin, which is not installed "
                                 f"here: pip install 'lrtransfer[{extra}]'")


def test_bad_launcher_key_in_a_sweep_is_named(cli, tmp_path):
    """Not "Ambiguous value for argument 'width=16,32'", which named the wrong argument."""
    code, out, err = cli("sweep", *TINY, "width=16,32", "hydra/launcher=parallel", "hydra.launcher.n_jobz=2",
                         f"results_dir={tmp_path}")
    assert code == 2
    assert err.startswith("error: unknown key 'hydra.launcher.n_jobz'") and "did you mean 'n_jobs'" in err


@needs("hydra_plugins.hydra_ray_launcher")
def test_ray_launcher_configs():
    from omegaconf import OmegaConf

    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("lrtransfer.conf", version_base="1.3"):
        init = {name: OmegaConf.to_container(
            hydra_compose("config", overrides=[f"hydra/launcher={name}"], return_hydra_config=True).hydra.launcher.ray.init)
            for name in ("ray_cluster", "ray_local")}
    # Present and null: the plugin's object-store default (refused when connecting) is not added.
    assert init["ray_cluster"]["address"] == "auto" and init["ray_cluster"]["object_store_memory"] is None
    assert init["ray_local"]["address"] == "local"  # never joins a cluster that happens to run here


@needs("hydra_plugins.hydra_ray_launcher")
def test_ray_address_without_a_cluster_is_one_line(cli, tmp_path):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.monotonic()
    code, out, err = cli("sweep", *TINY, "width=16,32", "hydra/launcher=ray_cluster",
                         f"hydra.launcher.ray.init.address=127.0.0.1:{port}", f"results_dir={tmp_path}", "name=s")
    assert code == 2 and err.startswith(f"error: hydra.launcher.ray.init.address=127.0.0.1:{port}: no Ray cluster")
    assert len(err.strip().splitlines()) == 1 and time.monotonic() - t0 < 60
    assert not list(tmp_path.rglob("record.json"))


@needs("submitit")
def test_requeue_signal_saves_a_checkpoint_first(tmp_path, monkeypatch):
    """submitit's real handler, driven by the signal mid-training: the engine saves its state at the
    next check, then submitit requeues and exits; resuming gives the uninterrupted result exactly."""
    from submitit.core.job_environment import JobEnvironment, SignalHandler
    from submitit.core.utils import DelayedSubmission, JobPaths

    from lrtransfer.training import build, engine, stop
    from lrtransfer.sweeps import requeue
    from lrtransfer.sweeps.checkpoint import FileCheckpoint
    from lrtransfer.sweeps.job import runs_of
    from tests.conftest import typed

    cfg = typed(*TINY, "train.steps=40", "width=16")
    runs = runs_of(cfg)
    reference = engine.train(build.job(cfg), runs)

    class Launcher:  # what submitit asks of the task: a checkpoint method
        def __call__(self):
            pass

        def checkpoint(self):
            return DelayedSubmission(self)

    requeued = []

    class Env(JobEnvironment):
        def __init__(self):
            pass

        global_rank = 0

        def _requeue(self, countdown):
            requeued.append(countdown)

    delayed = DelayedSubmission(Launcher())
    delayed._timeout_min, delayed._timeout_countdown = 60, 3
    paths = JobPaths(tmp_path / "submitit", job_id="1")
    paths.folder.mkdir(parents=True)
    handler = SignalHandler(Env(), paths, delayed)
    monkeypatch.setattr(stop, "_requested", False)
    previous = signal.signal(signal.SIGUSR2, handler.checkpoint_and_try_requeue)
    checkpoint = FileCheckpoint(tmp_path / "checkpoint.pt", 3600)  # only a requested save happens
    sent = []

    def progress(n):
        if not sent:
            sent.append(n)
            os.kill(os.getpid(), signal.SIGUSR2)

    try:
        with pytest.raises(SystemExit), requeue.checkpoint_first():
            engine.train(build.job(cfg), runs, progress=progress, checkpoint=checkpoint)
    finally:
        signal.signal(signal.SIGUSR2, previous)
    assert requeued == [3]  # preempted, not timed out: no timeout used up
    assert checkpoint.path.exists() and checkpoint.load()["ensemble"]
    monkeypatch.setattr(stop, "_requested", False)  # a new process, in real life
    assert engine.train(build.job(cfg), runs, checkpoint=checkpoint) == reference


def test_requeue_is_inert_without_submitit():
    from lrtransfer.sweeps import requeue

    before = signal.getsignal(signal.SIGUSR2)
    with requeue.checkpoint_first():
        assert signal.getsignal(signal.SIGUSR2) is before


def test_gated_model_waits_for_its_gate_or_the_signal(tmp_path, monkeypatch):
    """The requeue tests' model (tests/gated_net.py): without its gate it never waits; with one it
    waits until the gate opens or a stop is requested, never on the meta device, and not forever."""
    import threading

    import torch

    from lrtransfer.training import stop
    from tests import gated_net

    def took(net, x) -> float:
        t0 = time.monotonic()
        net(x)
        return time.monotonic() - t0

    net, x = gated_net.build(8, 2, (4,), 3), torch.zeros(2, 4)
    with torch.device("meta"):
        sizing, x_meta = gated_net.build(8, 2, (4,), 3), torch.zeros(2, 4)
    monkeypatch.setattr(stop, "_requested", False)
    monkeypatch.delenv("SLURM_JOB_ID", raising=False)
    monkeypatch.setenv("LRT_TEST_GATE_S", "0")  # a wait fails at once
    monkeypatch.delenv("LRT_TEST_GATE", raising=False)
    net(x)  # no gate: no wait
    gate = tmp_path / "gate"
    monkeypatch.setenv("LRT_TEST_GATE", str(gate))
    sizing(x_meta)  # never on the meta device
    with pytest.raises(RuntimeError, match="never opened the gate"):
        net(x)
    assert (tmp_path / "gate.waiting").read_text().split()[:2] == ["-", str(os.getpid())]
    monkeypatch.setenv("LRT_TEST_GATE_S", "30")
    threading.Timer(0.5, gate.touch).start()
    assert 0.4 <= took(net, x) < 10  # until the gate opens
    net(x)  # open
    gate.unlink()
    threading.Timer(0.5, stop.request).start()  # what the requeue signal does (lrtransfer.sweeps.requeue)
    assert 0.4 <= took(net, x) < 10  # until a stop is requested


# --- the real engines -------------------------------------------------------


@pytest.mark.cluster
def test_slurm_sweep_equals_in_process(slurm, tmp_path, in_process):
    proc = sweep(slurm, *TINY, "width=16,32", *SLURM, f"results_dir={tmp_path}", "name=s")
    assert proc.returncode == 0, proc.stderr
    assert records(tmp_path / "s") == in_process
    out = proc.stdout + proc.stderr
    assert "Bypassing sacct error" not in out and out.count("sacct does not answer") <= 1


@pytest.mark.cluster
@needs("hydra_plugins.hydra_ray_launcher")
def test_ray_cluster_sweep_equals_in_process(ray_head, tmp_path, in_process):
    proc = sweep(ray_head, *TINY, "width=16,32", "hydra/launcher=ray_cluster",
                 f"hydra.launcher.ray.init.address={ray_head['LRT_RAY_ADDRESS']}", f"results_dir={tmp_path}", "name=s")
    assert proc.returncode == 0, proc.stderr
    assert records(tmp_path / "s") == in_process


@pytest.mark.cluster
def test_slurm_runs_each_round_of_an_adaptive_sweep(slurm, tmp_path, short_reference):
    """Each round is one multirun through the scheduler; every job of every round equals the
    in-process adaptive sweep's, bit for bit."""
    proc = sweep(slurm, *SHORT, *SLURM, f"results_dir={tmp_path}", "name=s")
    assert proc.returncode == 0, proc.stderr
    assert "round 2" in proc.stdout and adaptive_records(tmp_path / "s") == short_reference


@pytest.mark.cluster
@needs("hydra_plugins.hydra_ray_launcher")
def test_ray_cluster_runs_each_round_of_an_adaptive_sweep(ray_head, tmp_path, short_reference):
    proc = sweep(ray_head, *SHORT, "hydra/launcher=ray_cluster",
                 f"hydra.launcher.ray.init.address={ray_head['LRT_RAY_ADDRESS']}", f"results_dir={tmp_path}", "name=s")
    assert proc.returncode == 0, proc.stderr
    assert "round 2" in proc.stdout and adaptive_records(tmp_path / "s") == short_reference


# --- preemption and time limits on the real scheduler ------------------------
#
# The job's model waits at a gate (tests/gated_net.py) until the test opens it, and
# stops waiting when the requeue signal arrives: whatever the machine's speed, the job
# is still training when SLURM (or the test) signals it, saves its checkpoint and is
# requeued; the test opens the gate once it has seen the requeue, and the requeued job
# resumes from the checkpoint and finishes. The in-process reference run of the same
# config never waits (no LRT_TEST_GATE in its environment).

GATED = Path(__file__).resolve().parent / "gated_net.py"
# A few seconds of training on one thread here; a checkpoint only when asked (the signal).
JOB = ["model=custom", f"model.target={GATED}:build", "width=64", "train.steps=400", "train.batch_size=64",
       "lr.log2_min=-10", "lr.log2_max=-6", "engine.progress=false", "engine.threads=1", "engine.checkpoint_s=3600"]


def submitit_log(folder: Path) -> str:
    return "\n".join(p.read_text(errors="replace") for p in sorted(folder.rglob(".submitit/**/*_log.*")))


def stamps(log: str, pattern: str) -> list[float]:
    """Times (s) of submitit's log lines matching pattern."""
    from datetime import datetime

    out = []
    for m in re.finditer(r"[(\[](\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+)[)\]].*? - " + pattern, log):
        out.append(datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S,%f").timestamp())
    return out


def wait_for(what: str, found, timeout: float, every: float = 0.5):
    """found()'s first true value, polled until `timeout` seconds have passed; AssertionError naming `what` then."""
    deadline = time.monotonic() + timeout
    while True:
        value = found()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} within {timeout:.0f} s")
        time.sleep(every)


def requeued(tmp_path: Path) -> bool:
    """Whether the job saved its checkpoint on a signal and submitit requeued it (the
    engine's log line comes first, then submitit's requeue, in the same handler)."""
    jobs = "".join(p.read_text() for p in (tmp_path / "slurm" / "s").glob("*/job.log"))
    return "s after SIGUSR2" in jobs and "Requeued job" in submitit_log(tmp_path / "slurm")


def check_requeued_equals_reference(tmp_path, proc, reference, case: str):
    assert proc.returncode == 0, proc.stderr[-3000:]
    log = submitit_log(tmp_path / "slurm")
    jobs = "\n".join(p.read_text() for p in (tmp_path / "slurm" / "s").glob("*/job.log"))
    waiting = tmp_path / "gate.waiting"
    assert waiting.exists(), jobs  # the job did wait at the gate
    assert f"this job is {case}" in log and "Requeued job" in log, log[-3000:]
    to_checkpoint = re.findall(r"checkpointed ([\d.]+) s after SIGUSR2", jobs)
    assert to_checkpoint, jobs  # the engine saved its state on the signal, before the requeue
    resumed = stamps(jobs, "resuming from")
    assert resumed, jobs  # the requeued job started from that checkpoint
    got, want = records(tmp_path / "slurm" / "s"), records(tmp_path / "ref" / "s")
    assert got == want
    # the evidence, in order: submitit's lines (also copied to job.log) from its log, lrtransfer's from job.log
    lines = [line.strip() for line in log.splitlines() if re.search(r"Starting with|Caught signal|Requeued job", line)]
    lines += [line.strip() for line in jobs.splitlines() if re.search(r"\]\[lrtransfer\..*(checkpointed|resuming)", line)]
    when = lambda line: (re.findall(r"\d\d:\d\d:\d\d,\d+", line) or [""])[0]  # noqa: E731
    print("\n" + "\n".join(sorted(set(lines), key=when)))
    print(f"records equal the uninterrupted run's, bit for bit: {sum(map(len, got.values()))} runs, "
          f"final and eval losses of {', '.join(got)}")
    exited, started = stamps(log, "Exiting gracefully"), stamps(log, "Starting with JobEnvironment")
    print(f"requeues: {len(exited)}; signal -> checkpoint saved: {to_checkpoint} s; exit -> next start "
          f"(SLURM): {[round(s - e, 1) for e, s in zip(exited, started[1:])]} s; start -> resumed (imports, data, "
          f"checkpoint): {[round(r - s, 1) for s, r in zip(started[1:], resumed)]} s; sweep wall {proc.wall:.0f} s, "
          f"uninterrupted job {reference:.1f} s")


def run_beside_reference(env, tmp_path, overrides, during):
    """The SLURM sweep in the background, with its model's gate closed; `during(gate)` in a thread,
    which opens the gate when it returns (or fails: the job then finishes and the test fails with
    the thread's error); the uninterrupted in-process reference meanwhile, with the same job config."""
    import threading

    gate = tmp_path / "gate"
    t0 = time.monotonic()
    job = subprocess.Popen(lrtransfer_cmd() + ["sweep", *overrides, f"results_dir={tmp_path / 'slurm'}", "name=s"],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                           env={**env, "LRT_TEST_GATE": str(gate)})
    errors = []

    def guarded():
        try:
            during(gate)
        except BaseException as e:
            errors.append(e)
        finally:
            gate.touch()

    thread = threading.Thread(target=guarded, daemon=True)
    thread.start()
    semantic = [o for o in overrides if not o.startswith("hydra")]
    try:
        ref = sweep({k: v for k, v in env.items() if k != "LRT_TEST_GATE"}, *semantic,
                    f"results_dir={tmp_path / 'ref'}", "name=s")
        out, err = job.communicate(timeout=1200)
    finally:  # whatever failed, no job is left waiting
        gate.touch()
        job.kill()
    thread.join(timeout=60)
    if errors:
        raise errors[0]
    assert ref.returncode == 0, ref.stderr
    proc = subprocess.CompletedProcess(job.args, job.returncode, out, err)
    proc.wall = time.monotonic() - t0
    (rec,) = (json.loads(p.read_text()) for p in (tmp_path / "ref" / "s").glob("*/record.json"))
    return proc, rec["wall_time_s"]


@pytest.mark.cluster
@pytest.mark.slow
def test_slurm_time_limit_requeues_and_resumes_bit_for_bit(slurm, tmp_path):
    # A 2-minute limit, signalled 60 s before it (SLURM's timer may send it up to 30 s
    # earlier still): the job waits at the gate until then, however fast it trains. A job
    # so slow to start that the signal comes before it trains is requeued without a
    # checkpoint and waits at the gate again (max_num_timeout: room for that); the gate
    # opens once a signal has found it training, saving its checkpoint, and requeued it.
    overrides = [*JOB, *SLURM, "hydra.launcher.timeout_min=2", "hydra.launcher.signal_delay_s=60",
                 "hydra.launcher.max_num_timeout=6"]

    def requeue_then_open(gate):
        wait_for("checkpoint and requeue on the time limit's signal", lambda: requeued(tmp_path), 900)

    proc, reference = run_beside_reference(slurm, tmp_path, overrides, requeue_then_open)
    check_requeued_equals_reference(tmp_path, proc, reference, "timed-out")


@pytest.mark.cluster
@pytest.mark.slow
def test_slurm_preemption_requeues_and_resumes_bit_for_bit(slurm, tmp_path):
    # A limit far away (a signal before 80% of it is a preemption): only the test's signal requeues.
    overrides = [*JOB, *SLURM, "hydra.launcher.timeout_min=30", "hydra.launcher.max_num_timeout=0"]

    def preempt(gate):  # as an admin would: the signal submitit listens for, once the job is training
        waiting = Path(f"{gate}.waiting")
        job_id = wait_for("job waiting at the gate", lambda: waiting.exists() and waiting.read_text().split()[0], 300)
        assert job_id != "-", "the job that waits at the gate has no SLURM_JOB_ID"
        subprocess.run(["scancel", "--signal=USR2", job_id], check=True, env=slurm, timeout=60)
        wait_for("requeue after the preemption signal", lambda: requeued(tmp_path), 300)

    # max_num_timeout=0: a preemption must not count as a timeout.
    proc, reference = run_beside_reference(slurm, tmp_path, overrides, preempt)
    check_requeued_equals_reference(tmp_path, proc, reference, "preempted")

"""How much does trainer=command add to each run, and to each round of an adaptive sweep?

The runner's own overhead, measured in this process with `lrtransfer sweep` as the CLI runs it
(in-process launcher, results in a temporary folder):

  1. per run: one job of K runs of a command that exits at once (`/bin/echo step 0 loss <x>`),
     against the same K processes started directly (`subprocess.run`): the difference over K is
     what the runner adds to a run (its folder, logs, pid file, reading the output, the result
     file, the record). The job's fixed cost (composing, checking, the record and summary) is
     the time of a job of 1 run, said apart.
  2. per adaptive round: `--until-decided` on a width study of a Python script that prints a
     parabola in log2 LR and exits; its wall time less its runs' own (each run timed as that
     script started directly) over its rounds.

    python scripts/bench_command.py [--runs 64] [--repeats 3]

Prints medians of --repeats; the machine's load is printed with them (a shared machine slows
every process start).
"""

from __future__ import annotations

import argparse
import io
import os
import statistics
import subprocess
import sys
import tempfile
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

ECHO = "/bin/echo"
PARABOLA = "import sys, math; x = math.log2(float(sys.argv[1])) + 6; print(f'step 0 loss {1 + 0.05 * x * x:.6f}')"


def sweep(argv: list[str]) -> float:
    """Seconds `lrtransfer sweep ARGV` takes in this process (its output swallowed)."""
    from lrtransfer.sweeps.launch import launch

    started = time.perf_counter()
    with redirect_stdout(io.StringIO()), redirect_stderr(io.StringIO()):
        report = launch(argv)
    seconds = time.perf_counter() - started
    assert report is not None and not report.failed, getattr(report, "failed", report)
    return seconds


def direct(argv: list[str], n: int) -> float:
    """Seconds per process, started n times directly."""
    started = time.perf_counter()
    for _ in range(n):
        subprocess.run(argv, stdout=subprocess.DEVNULL, check=True)
    return (time.perf_counter() - started) / n


def per_run(runs: int, root: Path, tag: str) -> tuple[float, float, float]:
    """(seconds per run through the runner, seconds per run started directly, the job's fixed cost)."""
    command = f"trainer.command='{ECHO} step 0 loss {{lr}}'"
    base = ["trainer=command", command, "engine.progress=false", "train.steps=1", f"results_dir={root}", "lr.log2_step=1"]
    one = sweep([*base, f"name=one{tag}", "lr.log2_min=-10", "lr.log2_max=-10"])
    many = sweep([*base, f"name=many{tag}", "lr.log2_min=-10", f"lr.log2_max={-10 + runs - 1}"])
    bare = direct([ECHO, "step", "0", "loss", "1"], runs)
    return (many - one) / (runs - 1), bare, one


def per_round(root: Path, tag: str) -> tuple[float, int, int, float]:
    """(seconds of overhead per adaptive round, rounds, runs, seconds per run started directly)."""
    from lrtransfer import store

    script = root / "parabola.py"
    script.write_text(PARABOLA)
    argv = ["trainer=command", f"trainer.command='{sys.executable} {script} {{lr}}'", "engine.progress=false",
            "train.steps=1", f"results_dir={root}", f"name=adaptive{tag}", "width=32,64,128", "lr.log2_min=-12",
            "lr.log2_max=0", "adaptive.enabled=true", "adaptive.max_seeds=2"]
    seconds = sweep(argv)
    records = [r for _, r in store.iter_records(root / f"adaptive{tag}")]
    runs = sum(len(r["runs"]) for r in records)
    rounds = max(len(g["rounds"]) for g in store.read_rounds(root / f"adaptive{tag}" / store.ROUNDS_NAME))
    bare = direct([sys.executable, str(script), "0.01"], 8)
    return (seconds - runs * bare) / rounds, rounds, runs, bare


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    if args.runs < 2 or args.repeats < 1:
        sys.exit("error: --runs must be at least 2 and --repeats at least 1")
    with tempfile.TemporaryDirectory(prefix="bench-command-") as tmp:
        root = Path(tmp)
        sweep(["trainer=command", f"trainer.command='{ECHO} step 0 loss 1'", "engine.progress=false",
               f"results_dir={root}", "name=warm", "lr.log2_min=-1", "lr.log2_max=-1"])  # imports, first composition
        runs = [per_run(args.runs, root, str(i)) for i in range(args.repeats)]
        rounds = [per_round(root, str(i)) for i in range(args.repeats)]
    med = statistics.median
    through, bare, fixed = (med(r[i] for r in runs) for i in range(3))
    print(f"machine: {os.cpu_count()} cores, load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(f"1. per run ({args.runs} runs of {ECHO} in one job, median of {args.repeats}): {through * 1e3:.1f} ms through "
          f"the runner, {bare * 1e3:.1f} ms started directly: the runner adds {(through - bare) * 1e3:.1f} ms a run; "
          f"a job's fixed cost {fixed:.2f} s")
    over, n_rounds, n_runs, py = (med(r[i] for r in rounds) for i in range(4))
    print(f"2. per adaptive round (width 32,64,128; {n_rounds:g} rounds, {n_runs:g} runs of a Python script taking "
          f"{py * 1e3:.0f} ms each, median of {args.repeats}): {over:.2f} s of overhead a round")


if __name__ == "__main__":
    main()

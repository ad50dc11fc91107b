"""A job under trainer=command: its runs as processes of the user's command, and what its record says.

Each run (an LR, a seed, a value of `grid.<key>`) has a folder of its own,
`<job folder>/runs/log2_lr_-8.0_seed_1/` ({run_dir}), holding what the script writes there,
its `stdout.log` and `stderr.log`, and, once the run has ended, `result.json`: what the
record says of it (`curve.run_result`) or why it failed. A run is never run twice: a re-run
of the job (after a kill -9, a preemption, Ctrl-C) keeps every result it finds and runs
only the others, each whole, in a folder emptied first. The job's record lists the runs in
the job's own order, so it equals a record made in one go.

A run that ended with no loss to read (a non-zero exit with none, a script that never
printed one, a metrics file that is not there) is `failed`: the record lists it under
`failed_runs`, with the last line of its standard error, and the job goes on; a job whose
every run failed is a failed job. A run whose process exited non-zero after reporting losses
that did not diverge failed too: its curve stops short, and a final loss read from it would
be wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from lrtransfer.options.trainer import curve, readers
from lrtransfer.options.trainer.command import CommandOptions, flat, metrics_path, render, run_values
from lrtransfer.store import RECORD_NAME, is_complete, run_problem, write_json_atomic
from lrtransfer.sweeps import runner
from lrtransfer.sweeps.job_runs import runs_of

RUNS = "runs"
RESULT = "result.json"
READ_EVERY_S = 1.0  # how often a growing metrics file is read


class AllRunsFailed(Exception):
    """Every run of the job failed: the job is failed, its message the first run's reason."""


@dataclass(frozen=True)
class Planned:
    """One run of the job, where it runs and what it runs."""

    log2_lr: float
    seed: int
    grid: tuple  # (("optim.weight_decay", 0.01),) or ()
    folder: Path
    values: dict  # what its placeholders read


def runs(typed, folder: Path) -> list[Planned]:
    """The job's runs in its own order (`runs_of`: LRs within grid values within seeds)."""
    base = flat(typed)
    out = []
    for run in runs_of(typed):
        where = folder / RUNS / run_name(run.log2_lr, run.seed, run.grid)
        values = run_values(base, log2_lr=run.log2_lr, seed=run.seed, grid=dict(run.grid), run_dir=where.resolve())
        out.append(Planned(run.log2_lr, run.seed, tuple(run.grid), where, values))
    return out


def run_name(log2_lr: float, seed: int, grid) -> str:
    """`log2_lr_-8.0_seed_1`: no '=' or ',' in a path a script may take as `--out_dir={run_dir}` (nanoGPT's
    configurator splits its arguments at every '=')."""
    return "_".join([f"log2_lr_{round(log2_lr, 10)!r}", f"seed_{seed}", *(f"{k}_{v!r}" for k, v in grid)])


# ---------------------------------------------------------------- results kept
def replaces(folder: Path) -> str | None:
    """The sha256 of the complete record a --rerun replaces (None: there is none), as in
    `job.origin`: a --rerun keeps only results that a --rerun of that same record made."""
    return hashlib.sha256((folder / RECORD_NAME).read_bytes()).hexdigest() if is_complete(folder) else None


def kept_result(run: Planned, origin: str | None, rerun: bool) -> dict | None:
    """The run's result.json where a re-run keeps it: a run that finished or diverged (a failed one
    runs again), readable, of a run of this job, and under --rerun made by this --rerun."""
    try:
        with open(run.folder / RESULT) as f:
            doc = json.load(f)
        record = doc["run"]
        if doc.get("outcome") not in ("finished", "diverged") or run_problem(record) is not None:
            return None
        same = (record["seed"], record["log2_lr"], record.get("grid", {})) == (run.seed, round(run.log2_lr, 10), dict(run.grid))
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None
    if not same or (rerun and doc.get("replaces") != origin):
        return None
    return doc


def steps_done(typed, folder: Path, rerun: bool) -> int | None:
    """Run-steps of the runs a re-run keeps (`--plan`), None where it keeps none."""
    origin = replaces(folder)
    n = sum(kept_result(r, origin, rerun) is not None for r in runs(typed, folder))
    return n * typed.train.steps if n else None


def commands(typed, folder: Path, rerun: bool) -> list[str]:
    """The command line of each run still to run, as a shell would take it (`--plan`)."""
    origin = replaces(folder)
    return [shlex.join(render(typed.trainer, r.values).argv) for r in runs(typed, folder)
            if kept_result(r, origin, rerun) is None]


def own_rate(typed, folder: Path) -> float | None:
    """Seconds per run-step of the runs of this job that finished (a job cut off part way)."""
    seconds = n = 0
    origin = replaces(folder)
    for r in runs(typed, folder):
        doc = kept_result(r, origin, False)
        if doc is not None and doc.get("wall_time_s"):
            seconds, n = seconds + doc["wall_time_s"], n + 1
    return seconds / (n * typed.train.steps) if n else None


# ---------------------------------------------------------------- the job
class Watch:
    """A running run's losses as they arrive (its output, or its metrics file), whether it has
    diverged, and the last line of its standard error."""

    def __init__(self, options: CommandOptions, metrics: Path | None, diverge_factor: float) -> None:
        self.lines = None if metrics else readers.Lines(readers.compile_pattern(options.loss_pattern, "trainer.loss_pattern"))
        self.table = readers.metrics_reader(metrics, options.metrics_format, options.loss_column, options.step_column,
                                            options.eval_column) if metrics else None
        self.marker = readers.compile_pattern(options.diverged_pattern, "trainer.diverged_pattern", required=()) \
            if options.diverged_pattern else None
        self.factor, self.marked, self.checked, self.read_at = diverge_factor, False, 0, 0.0
        self.stderr, self.error = "", None

    @property
    def curve(self) -> readers.Curve:
        return self.lines.curve if self.lines else self.table.curve

    def line(self, text: str, stream: str) -> None:
        if stream == "stderr" and text.strip():
            self.stderr = text.strip()
        if self.marker is not None and self.marker.search(text):
            self.marked = True
        if stream == "stdout" and self.lines is not None:
            self.lines.line(text)

    def poll(self) -> None:
        if self.table is None or self.error or time.monotonic() - self.read_at < READ_EVERY_S:
            return
        self.read_at = time.monotonic()
        try:
            self.table.poll()
        except readers.ReadError as e:
            self.error = str(e)

    def should_stop(self) -> bool:
        """Diverged already: nothing it trains from here on is read."""
        points = self.curve.points
        if self.marked:
            return True
        if len(points) > self.checked:
            losses = [v for _, v in points]
            self.checked = len(points)
            return curve.first_bad(losses, self.factor) is not None
        return False

    def finish(self) -> readers.Curve:
        if self.error:
            raise readers.ReadError(self.error)
        return self.table.finish() if self.table is not None else self.lines.curve


def train(typed, folder: Path, *, rerun: bool, progress=None, should_stop=lambda: False) -> dict:
    """Run the job's runs (those a re-run keeps are not run again); return the record's fields:
    its runs, the runs that failed, where they ran. Raises `stop.Interrupted` after a stop
    (every ended run's result kept) and `AllRunsFailed` when no run has a loss."""
    from lrtransfer.training import stop

    options: CommandOptions = typed.trainer
    origin = replaces(folder) if rerun else None
    planned = runs(typed, folder)
    results: dict[Path, dict] = {}
    tasks, watches = [], {}
    for run in planned:
        doc = kept_result(run, origin, rerun)
        if doc is not None:
            results[run.folder] = doc
            continue
        runner.end_orphan(run.folder)  # a run a killed sweep left running
        shutil.rmtree(run.folder, ignore_errors=True)  # a run cut off runs again whole
        launch = render(options, run.values)
        metrics = metrics_path(options, run.values, run.folder) if options.metrics_file else None
        watch = Watch(options, metrics, typed.train.diverge_factor)
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **launch.env}
        tasks.append(runner.Task(run, launch.argv, launch.cwd, env, run.folder, watch))
        watches[run.folder] = watch
    steps = typed.train.steps
    done = {f: 0 for f in watches}
    if progress is not None and results:
        progress(len(results) * steps)

    def tick() -> None:
        if progress is None:
            return
        for f, w in watches.items():
            now = steps if f in results else min(steps, max(0, w.curve.last_step or 0))
            if now > done[f]:
                progress(now - done[f])
                done[f] = now

    def ended(e: runner.Ended) -> None:
        run: Planned = e.key
        doc = outcome(typed, run, watches[run.folder], e)
        doc["replaces"] = origin
        write_json_atomic(run.folder / RESULT, doc)
        results[run.folder] = doc

    stopped = runner.run(tasks, options.parallel, on_end=ended, on_tick=tick, should_stop=should_stop)
    tick()
    if stopped:
        raise stop.Interrupted("stopped: every run that ended is kept; a re-run runs the others")
    ok = [results[r.folder]["run"] for r in planned if results[r.folder]["outcome"] != "failed"]
    failed = [{**key_of(r), "error": results[r.folder]["error"], "exit_code": results[r.folder].get("exit_code")}
              for r in planned if results[r.folder]["outcome"] == "failed"]
    if not ok:
        first = failed[0]
        raise AllRunsFailed(f"every run failed ({len(failed)}); log2_lr={first['log2_lr']:g} seed={first['seed']}: "
                            f"{first['error']}")
    return {"device": "command", "threads": options.parallel, "runs": ok, **({"failed_runs": failed} if failed else {})}


def key_of(run: Planned) -> dict:
    out = {"log2_lr": round(run.log2_lr, 10), "lr": 2.0**run.log2_lr, "seed": run.seed}
    if run.grid:
        out["grid"] = dict(run.grid)
    return out


def outcome(typed, run: Planned, watch: Watch, e: runner.Ended) -> dict:
    """What the run's result.json says: finished, diverged or failed, with the record's run."""
    doc = {"format": 1, "exit_code": e.exit_code, "wall_time_s": round(e.seconds, 3),
           "argv": render(typed.trainer, run.values).argv}
    if e.error:
        return {**doc, "outcome": "failed", "error": e.error, "run": None}
    try:
        found = watch.finish()
    except readers.ReadError as err:
        found, why = readers.Curve(), str(err)
    else:
        why = None
    bad = curve.first_bad([v for _, v in curve.by_step(found.points)], typed.train.diverge_factor) is not None
    if found.points or watch.marked:
        if watch.marked or bad or e.exit_code == 0:
            t = typed.train
            result = curve.run_result(found.points, found.eval_loss, log2_lr=run.log2_lr, seed=run.seed,
                                      grid=dict(run.grid), final_window=t.final_window, history_points=t.history_points,
                                      diverge_factor=t.diverge_factor, marked_diverged=watch.marked)
            return {**doc, "outcome": "diverged" if result["diverged"] else "finished", "error": None, "run": result}
        last = found.points[-1][0]
        why = f"{exit_words(e.exit_code)} after step {last}" + (f": {watch.stderr}" if watch.stderr else "")
    elif why is None:
        source = "trainer.metrics_file" if typed.trainer.metrics_file else "trainer.loss_pattern"
        if e.exit_code == 0:
            why = f"it exited 0 but reported no loss (no line of its output matched {source}); see its stdout.log"
            if source == "trainer.metrics_file":
                why = f"it exited 0 but its metrics file holds no loss ({source}); see its stdout.log"
        else:
            why = exit_words(e.exit_code) + (f": {watch.stderr}" if watch.stderr else " (nothing on its standard error)")
    elif e.exit_code:
        why = f"{exit_words(e.exit_code)}: {watch.stderr or why}"
    return {**doc, "outcome": "failed", "error": why, "run": None}


def exit_words(code: int | None) -> str:
    """`exit code 3`, or `killed by SIGKILL` for a process a signal ended (a negative code)."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"


def title(typed) -> str:
    """The job in words, for its progress bar and its tracker: the command's label (else its program)."""
    name = typed.trainer.label or " ".join(os.path.basename(w) for w in typed.trainer.command.split()[:2])
    return f"{name} w={typed.width} d={typed.depth} s={typed.seed}"

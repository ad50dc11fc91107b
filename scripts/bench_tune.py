"""How fast does a search train its points? Prints the figures docs/tuning.md reports.

A search's round is K points of one small model, each with its own vector of per-module
hyperparameters (`hp.<role>.<name>`, the global LR, the weight decay, the output multiplier):
one ensemble. Measured here, at --width, for K = --points vectors drawn as `lrtransfer tune`
draws a random round:

  1. the batched ensemble of the K vectors against one run at a time: each vector a job of its own,
     configured to its values (what a loop of jobs runs, the fused kernel taking its Adam settings),
     one after another; and against each vector as an ensemble of one (its values per run, the
     path a batched run takes: slower where per-run settings cost more than a job's own, and the
     reference of this script's figures before 2026-11-29's second session); as run-steps per second;
  2. the same ensemble against a plain LR-only ensemble of the same K (its runs differ in the
     LR alone, no per-run key, no weight decay), and against an LR-only ensemble whose job sets
     the first vector's values once (the same work per step, weight decay included): what
     carrying a vector per run costs over each.

Steady-state steps are timed after warm-up, the modes interleaved over --rounds rounds and
summarised by medians, each ratio also as the median of the rounds' own ratios with their
quartiles (`bench_timing.py`: a machine shared with other work slows every mode
alike). One run at a time is timed on --alone of the K vectors (every vector costs the same
steps: its rate is the rate of all K, one after another).

    python scripts/bench_tune.py                          # transformer and MLP at width 64, K = 256
    python scripts/bench_tune.py --models mlp --points 64 --rounds 3
    python scripts/bench_tune.py --no-adam                # without per-run betas and epsilon
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]
from bench_steps import stepper  # noqa: E402
from bench_timing import cpu_model, each_round, spread  # noqa: E402

from lrtransfer.sweeps import search  # noqa: E402
from lrtransfer.training import build, engine  # noqa: E402
from lrtransfer.training.engine import Run  # noqa: E402
from tests.conftest import typed  # noqa: E402

MODELS = {
    "transformer": ["model=transformer", "data=text", "depth=2", "model.heads=4", "data.seq_len=32", "train.batch_size=8"],
    "mlp": ["model=mlp", "depth=3", "train.batch_size=64"],
}
# The searched keys, with a search's ranges; the transformer adds its attention and MLP
RANGES = {"lr": (2.0**-12, 2.0**-5), "hp.embedding.lr_mult": (0.25, 4.0), "hp.hidden.lr_mult": (0.25, 4.0),
          "hp.readout.lr_mult": (0.25, 4.0), "hp.vector.lr_mult": (0.25, 4.0), "hp.embedding.init_mult": (0.5, 2.0),
          "hp.hidden.init_mult": (0.5, 2.0), "hp.readout.init_mult": (0.5, 2.0), "hp.hidden.wd_mult": (0.0, 4.0),
          "hp.vector.wd_mult": (0.0, 4.0), "optim.weight_decay": (0.0, 0.1), "param.output_mult": (0.25, 4.0)}
PARTS = {"hp.attention.lr_mult": (0.25, 4.0), "hp.mlp.lr_mult": (0.25, 4.0)}
# Adam's settings per role (each run its own betas and epsilon: the optimizer's per-run path)
ADAM = {"hp.hidden.beta1": (0.8, 0.99), "hp.vector.beta2": (0.9, 0.9999), "hp.embedding.eps_mult": (0.1, 100.0),
        "hp.readout.eps_mult": (0.1, 100.0)}


def vectors(model: str, K: int, seed: int = 0, adam: bool = True) -> list[Run]:
    """K runs as a random round of `lrtransfer tune` draws them (`sweeps/search.py`)."""
    ranges = {**RANGES, **(PARTS if model == "transformer" else {}), **(ADAM if adam else {})}
    space = search.Space(tuple(search.Dim(k, lo, hi) for k, (lo, hi) in ranges.items()))
    rows = space.values(search.propose(space, "random", search.State(), K, seed))
    keys = space.keys[1:]
    return [Run(log2_lr=round(float(np.log2(r[0])), 6), seed=0, grid=tuple(zip(keys, r[1:]))) for r in rows]


def ensemble(over: list[str], runs: list[Run]) -> engine.Ensemble:
    cfg = typed(*over, "train.steps=100000", "engine.progress=false", "engine.device=cpu")
    return engine.Ensemble(build.job(cfg), runs)


def bench(model: str, width: int, K: int, alone: int, rounds: int, seconds: float, adam: bool) -> None:
    over = [*MODELS[model], f"width={width}"]
    runs = vectors(model, K, adam=adam)
    plain = [Run(log2_lr=r.log2_lr, seed=0) for r in runs]
    scalars = [f"{k}={v}" for k, v in runs[0].grid]  # the first vector, as the job's own values
    modes = {"vectors, batched": stepper(ensemble(over, runs), seconds),
             "LR only, batched": stepper(ensemble(over, plain), seconds),
             "LR only, one vector per job": stepper(ensemble([*over, *scalars], plain), seconds)}
    picks = [int(i) for i in np.linspace(0, K - 1, alone)]
    for i in picks:
        own = [f"{k}={v}" for k, v in runs[i].grid]
        modes[f"vector {i}, a job"] = stepper(ensemble([*over, *own], [Run(log2_lr=runs[i].log2_lr, seed=0)]), seconds / 4)
        modes[f"vector {i}, alone"] = stepper(ensemble(over, [runs[i]]), seconds / 4)
    t = each_round(modes, torch.device("cpu"), rounds)

    def rate(name: str, runs_per_step: int) -> list[float]:  # run-steps per second, each round
        return [modes[name].steps * runs_per_step / x for x in t[name]]

    batched, lr_only = rate("vectors, batched", K), rate("LR only, batched", K)
    same = rate("LR only, one vector per job", K)
    def one_at_a_time(how: str) -> list[float]:  # each round's mean seconds per run-step over the sampled vectors
        return [1 / statistics.mean(1 / rate(f"vector {i}, {how}", 1)[r] for i in picks) for r in range(rounds)]

    job_rate, alone_rate = one_at_a_time("a job"), one_at_a_time("alone")
    speed = [b / a for b, a in zip(batched, job_rate)]
    speed_alone = [b / a for b, a in zip(batched, alone_rate)]
    cost = [lr / b - 1 for lr, b in zip(lr_only, batched)]
    per_run = [x / b - 1 for x, b in zip(same, batched)]
    print(f"{model} width {width}, K = {K} vectors ({len(runs[0].grid)} keys per run beside the LR), "
          f"{torch.get_num_threads()} thread(s), {rounds} rounds:")
    print(f"  batched: {statistics.median(batched):,.0f} run-steps/s; one at a time ({alone} of the vectors, each a job "
          f"configured to it): {statistics.median(job_rate):,.0f} run-steps/s -> batched {spread(speed)} as fast")
    print(f"  (each vector as an ensemble of one: {statistics.median(alone_rate):,.0f} run-steps/s -> batched "
          f"{spread(speed_alone)} as fast)")
    print(f"  LR-only ensemble of the same K: {statistics.median(lr_only):,.0f} run-steps/s -> per-run vectors cost "
          f"{100 * statistics.median(cost):+.1f}% [{100 * min(statistics.quantiles(cost, n=4) if rounds > 1 else cost):+.1f}, "
          f"{100 * max(statistics.quantiles(cost, n=4) if rounds > 1 else cost):+.1f}] per run-step")
    print(f"  LR-only ensemble with the first vector as the job's own values (decay on, every key set once): "
          f"{statistics.median(same):,.0f} run-steps/s -> one vector per run costs {100 * statistics.median(per_run):+.1f}% "
          f"[{100 * min(statistics.quantiles(per_run, n=4) if rounds > 1 else per_run):+.1f}, "
          f"{100 * max(statistics.quantiles(per_run, n=4) if rounds > 1 else per_run):+.1f}]")
    sys.stdout.flush()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="transformer,mlp")
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--points", type=int, default=256, help="K: the vectors of one round")
    ap.add_argument("--alone", type=int, default=4, help="vectors timed one at a time")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=2.0, help="about how long each batched call runs")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--no-adam", action="store_true", help="without per-run betas and epsilon (the keys before them)")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    print(f"machine: {cpu_model()}; load {open('/proc/loadavg').read().split()[0]} at the start")
    for model in args.models.split(","):
        bench(model, args.width, args.points, args.alone, args.rounds, args.seconds, not args.no_adam)


if __name__ == "__main__":
    main()

"""Is an adaptive sweep honest? Coverage of its drift interval and how often its verdict is wrong, simulated.

Choosing where to sample from what was already seen can bias an optimum and shrink an
interval falsely. This script runs the adaptive procedure itself (`sweeps/rounds.py`:
the same policy, the same analysis, the same trimming) on fabricated studies whose
drift is known, and counts:
- coverage: how often the final 95% interval of the drift holds the true drift;
- wrong verdicts: a study that truly transfers (|drift| <= the band, 0.25) decided
  "drifts down/up", or one that truly drifts decided "transfers";
- undecided: the procedure stopped (out of seeds, budget) without a verdict.

The loss curves have the measured shape and noise of a real study: `--write-model STUDY
FINE` reads a fixed-grid study with several seeds (each width's mean curve, where its
runs diverge, how far its seeds' optima scatter) and one on a fine LR grid (the point
noise), and writes `scripts/curve_model.json`, which the simulation reads
(`write_model` says how). A simulated width's curve is its measured mean curve (a cubic
spline through it) moved so that its own minimum sits on the line of the true drift,
plus, for each seed, a shift of its optimum and independent noise at every LR, of the
measured sizes.

    python scripts/adaptive_coverage.py --write-model results/width results/fine   # see write_model
    python scripts/adaptive_coverage.py [--studies 3000] [--workers 2] [--first-seed 0]
"""

from __future__ import annotations

import argparse
import json
import math
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd

from lrtransfer import analysis
from lrtransfer.analysis.statistics import N_RESAMPLES
from lrtransfer.analysis.verdicts import TOLERANCE
from lrtransfer.sweeps import rounds

MODEL = Path(__file__).with_name("curve_model.json")
TRUTHS = (0.0, 0.15, -0.15, -0.45, -0.7)  # octaves per doubling: three that transfer, two that drift


# ---------------------------------------------------------------- the model, from a real study
def write_model(study: Path, fine: Path, out: Path = MODEL) -> dict:
    """The curve model: each width's mean curve from a fixed-grid study with several seeds
    (`study`), where it diverges, and two kinds of seed-to-seed noise.

    - Point noise, independent at each LR: measured on `fine`, the same model with several
      seeds on a grid 1/8 octave apart, by third differences of each seed's curve (a curve
      is straight at that scale, so what is left is noise; on an octave grid its bend would
      count as noise too).
    - A shift of each seed's optimum along the LR axis, of the size that makes one seed's
      optimum on `study`'s own grid scatter as much as its seeds' did: the measured scatter,
      less what the point noise alone gives there.
    """
    df = analysis.load_runs(study)
    (g,) = analysis.groups(df)
    widths = [int(w) for w in g.scales]
    curves, per_seed = {}, {}
    for w, best in zip(widths, g.best_log2_lr):
        sub = df[df["width"] == w]
        diverged = sub.groupby("log2_lr")["diverged"].any()
        mean = sub.groupby("log2_lr")["train_loss"].mean()[~diverged]
        first_bad = diverged[diverged].index.min() if diverged.any() else None
        curves[w] = {"optimum": best, "x": [float(x) for x in mean.index], "y": [float(y) for y in mean.values],
                     "diverges_above": None if first_bad is None else (float(mean.index.max()) + float(first_bad)) / 2}
        for _, one in sub.groupby("run_seed"):
            one = one.sort_values("log2_lr")
            o = analysis.subgrid_optima(one["log2_lr"].to_numpy(), one["train_loss"].to_numpy(dtype=float)[None])
            per_seed.setdefault(w, []).append(float(o.log2_lr[0]))
    scatter = math.sqrt(np.mean([np.var(v, ddof=1) for v in per_seed.values()]))
    runs = analysis.load_runs(fine)
    singles = [(one.sort_values("log2_lr")["log2_lr"].to_numpy(), one.sort_values("log2_lr")["train_loss"].to_numpy(dtype=float))
               for _, one in runs.groupby(["width", "run_seed"])]
    point = analysis.curve_noise(singles)
    model = {"source": f"{study.name}/ and {fine.name}/, read {time.strftime('%Y-%m-%d')}", "widths": widths,
             "curves": curves, "point_sd": point, "seed_scatter": scatter, "seed_shift_sd": 0.0,
             "steps": int(df["train.steps"].iloc[0]), "lr_min": float(df["lr.log2_min"].min()),
             "lr_max": float(df["lr.log2_max"].max()), "measured_drift": g.drift, "measured_ci": g.drift_ci}
    jitter = _point_noise_scatter(model)
    model["seed_shift_sd"] = math.sqrt(max(0.0, scatter**2 - jitter**2))
    out.write_text(json.dumps(model, indent=1) + "\n")
    return model


def _point_noise_scatter(model: dict, draws: int = 400) -> float:
    """How far the point noise alone moves one seed's optimum on the study's own grid (pooled s.d.)."""
    rng = np.random.default_rng(0)
    curves = Curves(model, 0.0)
    out = []
    for w in curves.widths:
        x = np.arange(model["lr_min"], model["lr_max"] + 1e-9, 1.0)
        y = curves.loss(w, x, 0.0)[None] + rng.normal(0, model["point_sd"], (draws, x.size))
        o = analysis.subgrid_optima(x, np.where(np.isfinite(y), y, np.nan)).log2_lr
        out.append(np.nanvar(o, ddof=1))
    return math.sqrt(float(np.mean(out)))


# ---------------------------------------------------------------- one simulated study
class Curves:
    """The model's curves, each moved to the optimum a true drift puts it at."""

    def __init__(self, model: dict, drift: float) -> None:
        from scipy.interpolate import CubicSpline

        self.model, self.widths = model, model["widths"]
        w0 = self.widths[0]
        start = model["curves"][str(w0)]["optimum"] if str(w0) in model["curves"] else model["curves"][w0]["optimum"]
        self.spline, self.optimum, self.top = {}, {}, {}
        for w in self.widths:
            c = model["curves"][str(w)] if str(w) in model["curves"] else model["curves"][w]
            x = np.array(c["x"])
            spline = CubicSpline(x, c["y"], bc_type="natural")
            fine = np.linspace(x.min(), x.max(), 20001)
            bottom = float(fine[np.argmin(spline(fine))])  # the curve's own minimum: the optimum it is moved by
            self.spline[w] = (spline, x.min(), x.max(), bottom)
            self.optimum[w] = start + drift * math.log2(w / w0)
            self.top[w] = None if c["diverges_above"] is None else c["diverges_above"] - bottom

    def loss(self, w: int, x: np.ndarray, shift: float) -> np.ndarray:
        """The width's mean curve at log2 LR x, its optimum at the drift's line + `shift`; NaN where
        it diverges. Beyond the measured LRs the curve goes on as a straight line."""
        spline, lo, hi, measured = self.spline[w]
        u = x - (self.optimum[w] + shift) + measured  # the measured curve's own coordinate
        y = spline(np.clip(u, lo, hi))
        y = y + np.where(u > hi, (u - hi) * abs(float(spline(hi, 1))), 0.0) + np.where(u < lo, (lo - u) * abs(float(spline(lo, 1))), 0.0)
        top = self.top[w]
        return y if top is None else np.where(u - measured > top, np.nan, y)


def simulate(model: dict, drift: float, seed: int, settings: rounds.Settings, resamples: int = N_RESAMPLES,
             budget: int | None = None):
    """One adaptive study on fabricated curves: (final analysis, how it ended, run-steps spent)."""
    rng = np.random.default_rng(seed)
    curves = Curves(model, drift)
    steps = model["steps"]
    shifts: dict[tuple, float] = {}
    rows: list[dict] = []
    states = rounds.first_round(curves.widths, 0, settings)
    requests = [rq for w in curves.widths for rq in rounds.requests_of(w, states[w], states[w].blocks, "coarse")]
    spent, g, step = 0, None, None
    while requests:
        for rq in requests:
            key = (rq.scale, rq.seed)
            if key not in shifts:
                shifts[key] = rng.normal(0, model["seed_shift_sd"])
            x = np.array(rq.block.values())
            y = curves.loss(rq.scale, x, shifts[key]) + rng.normal(0, model["point_sd"], x.size)
            rows += [{"width": rq.scale, "run_seed": rq.seed, "log2_lr": float(a), "train_loss": float(b),
                      "diverged": not math.isfinite(b), "adaptive.enabled": True} for a, b in zip(x, y)]
            spent += x.size * steps
        rounds.apply(states, requests)
        g = analysis.analyse(pd.DataFrame(rows), "width", {}, "train_loss", np.random.default_rng(0), resamples)
        step = rounds.next_step(g, states, settings)
        left = None if budget is None else budget - spent
        requests = rounds.trim(step.requests, lambda unit: sum(len(r.block.values()) for r in unit) * steps, left)
    end = step.state if not step.requests else "budget"
    return g, end, spent


def one(args):
    model, drift, seed, settings, resamples = args
    g, end, spent = simulate(model, drift, seed, settings, resamples)
    ci = g.drift_ci
    return {"drift": drift, "end": end, "spent": spent, "verdict": g.verdict if end == "decided" else "undecided",
            "covered": ci is not None and ci[0] <= drift <= ci[1], "has_ci": ci is not None,
            "width": None if ci is None else ci[1] - ci[0]}


def wilson(k: int, n: int, z: float = 1.96) -> tuple[float, float]:
    """Wilson's 95% interval for a proportion k/n: how far a batch of studies pins the coverage down."""
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return centre - half, centre + half


def report(results: list[dict], fixed_cost: int) -> list[str]:
    lines = [f"{'true drift':>10} {'studies':>7} {'coverage':>8} {'decided':>7} {'wrong':>6} {'undecided':>9} "
             f"{'mean width':>10} {'run-steps (median)':>18} {'of fixed 3 seeds':>16}"]
    for drift in sorted({r["drift"] for r in results}):
        rs = [r for r in results if r["drift"] == drift]
        truly = "transfers" if abs(drift) <= TOLERANCE else ("drifts down" if drift < 0 else "drifts up")
        decided = [r for r in rs if r["verdict"] != "undecided"]
        wrong = [r for r in decided if (r["verdict"] == "transfers") != (truly == "transfers")]
        spent = float(np.median([r["spent"] for r in rs]))
        lines.append(f"{drift:>10.2f} {len(rs):>7} {np.mean([r['covered'] for r in rs]):>8.3f} {len(decided) / len(rs):>7.3f} "
                     f"{len(wrong) / len(rs):>6.3f} {1 - len(decided) / len(rs):>9.3f} "
                     f"{np.mean([r['width'] for r in rs if r['width'] is not None]):>10.2f} {spent:>18,.0f} {spent / fixed_cost:>16.2f}")
    n = len(results)
    transfer = [r for r in results if abs(r["drift"]) <= TOLERANCE]
    drifting = [r for r in results if abs(r["drift"]) > TOLERANCE]
    lo, hi = wilson(sum(r["covered"] for r in results), n)
    lines.append(f"all {n} studies: coverage {np.mean([r['covered'] for r in results]):.3f} "
                 f"(the simulation's own 95% interval: {lo:.3f}-{hi:.3f}); "
                 f"truly transfers, decided 'drifts': {sum(r['verdict'] in ('drifts down', 'drifts up') for r in transfer) / max(1, len(transfer)):.3f}; "
                 f"truly drifts, decided 'transfers': {sum(r['verdict'] == 'transfers' for r in drifting) / max(1, len(drifting)):.3f}")
    return lines


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--write-model", type=Path, nargs=2, metavar=("STUDY", "FINE"),
                   help="write scripts/curve_model.json from a fixed-grid study and a fine-grid one (see write_model)")
    p.add_argument("--studies", type=int, default=3000, help="simulated studies in all, spread over the true drifts")
    p.add_argument("--first-seed", type=int, default=0, help="the first study's random seed (another batch: 1000)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--resamples", type=int, default=N_RESAMPLES)
    p.add_argument("--model", type=Path, default=MODEL)
    a = p.parse_args()
    if a.write_model:
        m = write_model(*a.write_model)
        print(f"wrote {MODEL}: widths {m['widths']}; one seed's optimum scatters {m['seed_scatter']:.3f} octave: "
              f"a seed shift of s.d. {m['seed_shift_sd']:.3f} octave and point noise of s.d. {m['point_sd']:.4f}; "
              f"measured drift {m['measured_drift']:+.2f}")
        return
    model = json.loads(a.model.read_text())
    settings = rounds.Settings(log2_min=model["lr_min"], log2_max=model["lr_max"], coarse_step=2.0, resolution=0.25,
                               max_seeds=10, extend=4.0)
    jobs = [(model, TRUTHS[i % len(TRUTHS)], a.first_seed + i, settings, a.resamples) for i in range(a.studies)]
    started = time.time()
    with ProcessPoolExecutor(a.workers) as pool:
        results = list(pool.map(one, jobs, chunksize=4))
    grid = int(round((model["lr_max"] - model["lr_min"]) / 1.0)) + 1
    fixed_cost = len(model["widths"]) * grid * 3 * model["steps"]
    print(f"{a.studies} simulated adaptive studies on {a.model.name} ({model['source']}), "
          f"seeds {a.first_seed}..{a.first_seed + a.studies - 1}, {a.resamples} resamples, {time.time() - started:.0f} s")
    for line in report(results, fixed_cost):
        print(line)


if __name__ == "__main__":
    main()

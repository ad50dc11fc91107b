"""How much evidence a firm verdict needs: coverage and wrong firm verdicts per design, simulated.

A design is a number of scales (consecutive doublings of width) and of seeds per scale.
For each, fabricates studies as scripts/interval_coverage.py does (a known drift, seed
noise as a shift of each seed's optimum, and noise at every LR point), runs the analysis
`lrtransfer summary` runs, and counts how often the drift's 95% interval covers the truth
and how often the verdict the interval gives (`analysis.verdict`, the firm rule's word) is
firm and wrong: "transfers" for a drift outside the band, "drifts down/up" for one of the
other sign or none. The rule a verdict must meet to be firm (`analysis.FIRM_RULE`: at least
3 scales, or at least 2 seeds at every scale) is read off this table; docs/studies.md quotes it.

    python scripts/verdict_evidence.py [--studies 300] [--resamples 500]
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

from lrtransfer import analysis

DESIGNS = ((2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (4, 1))  # (scales, seeds per scale)
NOISE = ((0.0, 0.01), (0.3, 0.01))  # (s.d. of a seed's optimum shift in octaves, s.d. of each point's noise)
DRIFTS = (0.0, -0.5, -1.0)  # true drifts, octaves per doubling


def study(rng, *, drift, scales, seeds, shift_sd, point_sd, grid=np.arange(-12.0, -2.0)):
    rows = []
    for i in range(scales):
        for s in range(seeds):
            opt = -7.0 + drift * i + rng.normal(0, shift_sd)
            loss = 1.0 + 0.05 * (grid - opt) ** 2 + rng.normal(0, point_sd, grid.size)
            rows += [{"width": 64 * 2**i, "run_seed": s, "log2_lr": x, "train_loss": y, "diverged": False}
                     for x, y in zip(grid, loss)]
    return pd.DataFrame(rows)


def wrong(word: str, drift: float) -> bool:
    """A firm verdict the truth contradicts."""
    if word == "transfers":
        return abs(drift) > analysis.TOLERANCE
    if word == "drifts down":
        return drift >= 0
    if word == "drifts up":
        return drift <= 0
    return False


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--studies", type=int, default=300)
    p.add_argument("--resamples", type=int, default=500)
    p.add_argument("--designs", default=",".join(f"{a}x{b}" for a, b in DESIGNS), help="scales x seeds, e.g. 2x2,3x1")
    p.add_argument("--drifts", default=",".join(map(str, DRIFTS)))
    a = p.parse_args()
    designs = [tuple(int(v) for v in d.split("x")) for d in a.designs.split(",")]
    drifts = [float(v) for v in a.drifts.split(",")]
    print(f"{'scales':>6} {'seeds':>5} {'true drift':>10} {'shift sd':>8} {'coverage':>8} {'firm':>5} "
          f"{'wrong firm':>10}  verdicts")
    for scales, seeds in designs:
        for drift in drifts:
            for shift_sd, point_sd in NOISE:
                rng = np.random.default_rng(0)
                hits, firm, bad, words = 0, 0, 0, {}
                for _ in range(a.studies):
                    df = study(rng, drift=drift, scales=scales, seeds=seeds, shift_sd=shift_sd, point_sd=point_sd)
                    g = analysis.analyse(df, "width", {}, "train_loss", rng, a.resamples)
                    word = g.leans  # the interval's word, whatever the rule says of the evidence
                    words[word] = words.get(word, 0) + 1
                    firm += word in analysis.FIRM_VERDICTS
                    bad += wrong(word, drift)
                    if g.drift_ci is not None:
                        hits += g.drift_ci[0] <= drift <= g.drift_ci[1]
                w = " ".join(f"{k}:{v}" for k, v in sorted(words.items()))
                print(f"{scales:>6} {seeds:>5} {drift:>10} {shift_sd:>8} {hits / a.studies:>8.2f} "
                      f"{firm / a.studies:>5.2f} {bad / a.studies:>10.3f}  {w}", flush=True)


if __name__ == "__main__":
    main()

"""Which model should `predict` extrapolate the optima with? Prints each candidate's coverage.

Fabricates studies of five scales (log2 scale 6..10) whose optimum follows a parabola in log2
scale with a known curvature (0: the straight line of a constant drift), measured with Gaussian
noise, and predicts one more measurement two doublings past the largest scale. For each
candidate rule it counts how often the 95% prediction interval holds that measurement, and its
mean width:
  line      the drift's straight line (t, n - 2 df);
  parabola  the parabola (t, n - 3 df): what `predict` uses from five scales on;
  pretest   the line, unless the curvature's 95% interval excludes 0, then the parabola;
  union     the pretest's choice, widened to hold the line's interval too.

    python scripts/prediction_models.py [--studies 4000]
"""

from __future__ import annotations

import argparse

import numpy as np

from lrtransfer.analysis import prediction

X = np.log2([64.0, 128, 256, 512, 1024])
X0 = 12.0  # width 4096


def intervals(y: np.ndarray) -> dict[str, tuple[float, float]]:
    line = prediction.residual_interval(X, y, X0)
    parabola = prediction.residual_interval(X, y, X0, degree=2)
    _, (clo, chi), _, _ = prediction.curvature(X, y, X0)
    bends = clo > 0 or chi < 0
    pretest = parabola if bends else line
    union = (min(line[0], parabola[0]), max(line[1], parabola[1])) if bends else line
    return {"line": line, "parabola": parabola, "pretest": pretest, "union": union}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--studies", type=int, default=4000)
    args = ap.parse_args()
    rng = np.random.default_rng(0)
    names = ["line", "parabola", "pretest", "union"]
    print(f"{args.studies} studies per row; coverage (mean width, octaves) of each rule's 95% interval at width 4096")
    print(f"{'curvature':>9} {'noise sd':>8} " + " ".join(f"{n:>16}" for n in names))
    for bend in (0.0, -0.03, -0.06, -0.09):
        for sd in (0.05, 0.1, 0.2):
            def truth(x):
                return -8.0 - 0.5 * (x - 8.0) + bend * (x - 8.0) ** 2

            hit = dict.fromkeys(names, 0)
            width = dict.fromkeys(names, 0.0)
            for _ in range(args.studies):
                y = truth(X) + rng.normal(0, sd, X.size)
                y0 = truth(X0) + rng.normal(0, sd)
                for name, (lo, hi) in intervals(y).items():
                    hit[name] += lo <= y0 <= hi
                    width[name] += hi - lo
            cells = " ".join(f"{hit[n] / args.studies:>8.1%} ({width[n] / args.studies:>4.2f})" for n in names)
            print(f"{bend:>+9.2f} {sd:>8.2f} {cells}")


if __name__ == "__main__":
    main()

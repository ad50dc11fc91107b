"""How much muP's epsilon rule moves a study: the same jobs with Adam's epsilon / m (param.eps_by_width=true,
muP's default since revision 2) and with one epsilon (false, as before), run by run.

    python scripts/mup_eps_check.py --widths 64,1024 -- OVERRIDES...   (one thread; seed 0 unless seed=N)

For each width (choose the study's narrowest and widest: m furthest from 1) one job of one seed under
each setting; prints each job's sub-grid optimum, the largest relative change of any run's final loss,
and whether the same runs diverged. When the changes are far below the digits a study prints (its
optima, from fitted parabolas, in hundredths of an octave; its losses to 3-4 digits), the study's
printed numbers cannot move.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--widths", required=True, help="comma-separated widths")
    ap.add_argument("--runs", action="store_true", help="print every run's final loss under both")
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()

    import torch

    from lrtransfer.config import validate
    from lrtransfer.sweeps.job import runs_of
    from lrtransfer.training import build, engine
    from tests.conftest import compose

    torch.set_num_threads(1)

    print("overrides:", " ".join(args.overrides))
    for width in map(int, args.widths.split(",")):
        results = {}
        for rule in ("true", "false"):
            cfg = validate(compose(*args.overrides, "param=mup", f"width={width}", f"param.eps_by_width={rule}",
                                   "engine.progress=false"))
            start = time.time()
            results[rule] = (engine.train(build.job(cfg), runs_of(cfg)), time.time() - start)
        (new, t_new), (old, t_old) = results["true"], results["false"]
        alive = [(a, b) for a, b in zip(new, old) if not (a.diverged or b.diverged)]
        change = max((abs(a.final_loss - b.final_loss) / abs(b.final_loss) for a, b in alive), default=0.0)
        if args.runs:
            for a, b in zip(new, old):
                print(f"  log2 LR {a.log2_lr:+g} seed {a.seed}: final loss {a.final_loss:.5f} (eps / m) vs {b.final_loss:.5f}"
                      f"{' diverged' if a.diverged or b.diverged else ''}")
        print(f"width {width} (m = {width / cfg.param.base_width:g}): sub-grid optimum {optimum(new):+.3f} (eps / m) vs "
              f"{optimum(old):+.3f} (one eps); largest relative change of a final loss {change:.2e}; "
              f"same runs diverged: {[r.diverged for r in new] == [r.diverged for r in old]}; "
              f"{t_new + t_old:.0f} s", flush=True)


def optimum(runs) -> float:
    """The sub-grid optimum of the runs' mean final loss per LR (diverged: missing), as `summary` finds it."""
    import numpy as np

    from lrtransfer.analysis.statistics import subgrid_optima

    lrs = sorted({r.log2_lr for r in runs})
    mean = [np.mean([r.final_loss if not r.diverged else np.nan for r in runs if r.log2_lr == x]) for x in lrs]
    return float(subgrid_optima(np.array(lrs), np.array([mean])).log2_lr[0])


if __name__ == "__main__":
    main()

"""How close bf16 stays to float32 on the models tests/test_precision.py checks: the two
margins that test bounds, measured, so that docs/performance.md can say how much room is left.

For every model of the test (its configurations, 40 steps, LRs 2^-9 and 2^-6, seeds 0 and 1), and the
MLP, ResNet-S and transformer under param=umup (tests/test_umup_models.py's, LRs 2^-5 and 2^-2):
- rounding: the largest relative difference of the first loss (the bound is 2^-8);
- training: the largest change of a run's final loss, as a fraction of the gap between two
  seeds at the same LR in float32 (the bound is one half).

    python scripts/bf16_margins.py      # a few seconds
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from lrtransfer.training import build, engine  # noqa: E402
from lrtransfer.training.runs import Run  # noqa: E402
from tests import test_precision, test_umup_models  # noqa: E402
from tests.conftest import typed  # noqa: E402
from tests.datafiles import write_cifar  # noqa: E402


def main() -> None:
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp())
    write_cifar(root / "cifar")
    data_over = {"cifar10": [f"data.root={root / 'cifar'}"], "mnist1d": [f"data.cache={root / 'mnist1d'}"]}
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]
    umup_runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-5, -2)]  # u-muP's LRs (test_umup_models')
    models = {model: (lambda dtype, m=model: test_precision.config(m, data_over, "train.steps=40", f"train.dtype={dtype}"),
                      runs) for model in test_precision.MODELS}
    umup = lambda over: lambda dtype: typed(*over, *test_umup_models.TRAIN, "train.steps=40", f"train.dtype={dtype}")  # noqa: E731
    models |= {f"{model} umup": (umup(over), umup_runs) for model, over in test_umup_models.SMALL.items()}
    worst_rounding = worst_training = 0.0
    print(f"{'model':<17} {'rounding':>9} {'training (of the seed gap)':>27}")
    for model, (config, lrs) in models.items():
        if model == "cnn1d":
            try:
                import mnist1d  # noqa: F401
            except ImportError:
                print(f"{model:<17} skipped: the mnist1d package is not installed")
                continue
        trained = {dtype: engine.train(build.job(config(dtype)), lrs) for dtype in ("float32", "bf16")}
        pairs = list(zip(trained["float32"], trained["bf16"]))
        rounding = max(abs(b.initial_loss - a.initial_loss) / a.initial_loss for a, b in pairs)
        f32 = trained["float32"]
        gap = sum(abs(f32[i].final_loss - f32[i + 2].final_loss) for i in (0, 1)) / 2
        training = max(abs(b.final_loss - a.final_loss) / gap for a, b in pairs)
        worst_rounding, worst_training = max(worst_rounding, rounding), max(worst_training, training)
        print(f"{model:<17} {rounding:>9.1e} {training:>27.3f}")
    print(f"largest: rounding {worst_rounding:.1e} (bound 2^-8 = {2**-8:.1e}), "
          f"training {worst_training:.3f} of the seed gap (bound 0.5)")


if __name__ == "__main__":
    main()

"""What lrtransfer trained for a published model before `model.init` existed, for tests/test_published.py.

    PYTHONPATH=/path/to/old/lrtransfer python scripts/make_torch_init_fixture.py

Run with an lrtransfer from before `model.init` (commit b592ecf: every Linear, Conv1D and
Embedding drawn from PyTorch's default init per seed) first on the path, it trains nanoGPT's
GPT (tests/nanogpt_standin.py), transformers' GPT2LMHeadModel and LlamaForCausalLM from
tiny configs under `standard` and `mup`, two seeds x two LRs, 3 steps in float64, and writes
each run's losses to tests/reference/torch_init.json. The test trains the same configs with
`model.init=torch` (and, under `mup`, the old conventions: `param.tied_init=readout
param.eps_by_width=false param.zero_query=false`) and asks for the same losses.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.append(str(ROOT))  # tests.* (after the lrtransfer PYTHONPATH names)
os.environ["HF_HUB_OFFLINE"] = "1"
OUT = ROOT / "tests" / "reference" / "torch_init.json"


def main() -> None:
    import lrtransfer
    import torch

    from lrtransfer.training import build, engine
    from lrtransfer.training.runs import Run
    from tests.conftest import typed
    from tests.test_published import FAMILIES, NANOGPT, SMALL

    path = NANOGPT
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]
    doc = {"lrtransfer": str(Path(lrtransfer.__file__).parent), "torch": torch.__version__, "cases": {}}
    for family, over in FAMILIES.items():
        over = ["model=custom", *(o.format(path=path) for o in over)]
        for param in ("standard", "mup"):
            base = ["param.base_width=8"] if param == "mup" else []
            cfg = typed(*over, *SMALL, "width=16", f"param={param}", *base, "train.dtype=float64", "train.steps=3")
            results = engine.train(build.job(cfg), runs)
            doc["cases"][f"{family} {param}"] = [
                {"log2_lr": r.log2_lr, "seed": r.seed, "history_loss": r.history_loss, "eval_loss": r.eval_loss}
                for r in results]
            print(family, param, [round(r.history_loss[0], 4) for r in results])
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT}")


if __name__ == "__main__":
    main()

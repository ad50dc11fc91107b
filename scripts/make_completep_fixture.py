"""Reference numbers for CompleteP from nanoGPT-mup's corrected model.py, for tests/test_completep.py.

    python scripts/make_completep_fixture.py NANOGPT_MUP_DIR

NANOGPT_MUP_DIR: a folder holding nanoGPT-mup's model.py as last published (its comment records the
epsilon fix and cites arXiv 2512.22382; the `completep` branch has the first, wrong, epsilon rule and
is refused). Nothing of it is copied: the script imports that model.py and writes only numbers, to
tests/reference/completep.json. It reuses make_nanogpt_mup_fixture.py's measurements (`case`):
per tensor the init std, its AdamW group's LR, epsilon and weight-decay multipliers, one AdamW step
in float64 from given tensors, and the readout's and attention's forward multipliers; here also the
residual branches' multiplier (`Block.residual_scaling`, which multiplies each branch's output).

nanoGPT-mup's GPT with `mup_enabled` and `depth_alpha_enabled`, 4 heads, vocabulary 64, context 16:
- "1024x8": width 1024 on base 256 (mup_width_multiplier 4), 8 layers on base 2
  (depth_multiplier 4), depth_alpha_exp 1 (CompleteP) and 0.5 (depth-muP), the issue's case;
- "128x4": width 128 on base 64 (2), 4 layers on base 2 (2), both alphas: the same rules at a size
  the default test suite can afford.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch

from make_nanogpt_mup_fixture import ADAMW_SETUP, case, config, load_nanogpt_mup

OUT = Path(__file__).resolve().parent.parent / "tests" / "reference" / "completep.json"
BASE_DEPTH = 2
SIZES = {"1024x8": (1024, 256, 8), "128x4": (128, 64, 4)}  # name: (width, base width, layers)
ALPHAS = (1.0, 0.5)


def completep(mod, width: int, base: int, layers: int, alpha: float) -> dict:
    flags = dict(mup_enabled=True, mup_width_multiplier=width / base, depth_alpha_enabled=True,
                 depth_multiplier=layers / BASE_DEPTH, depth_alpha_exp=alpha)
    doc = case(mod, width, layers, **flags)
    with torch.device("meta"):  # its blocks' branch multiplier: the numbers, not the tensors
        model = mod.GPT(config(mod, width, layers, **flags))
    (branch,) = {block.residual_scaling for block in model.transformer.h}
    doc["forward"]["branch"] = float(branch)
    doc["tensors"] = [{k: v for k, v in r.items() if k != "shape"} for r in doc["tensors"]]  # compact: names order
    return {"width": width, "base_width": base, "layers": layers, "base_depth": BASE_DEPTH, "alpha": alpha, **doc}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nanogpt_mup", type=Path, help="a folder with nanoGPT-mup's model.py (with the epsilon fix)")
    args = ap.parse_args()
    mod = load_nanogpt_mup(args.nanogpt_mup)
    doc = {"made_by": "scripts/make_completep_fixture.py", "torch": torch.__version__, **ADAMW_SETUP,
           "cases": {f"{name} alpha={alpha:g}": completep(mod, *SIZES[name], alpha) for name in SIZES for alpha in ALPHAS}}
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

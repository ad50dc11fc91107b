"""Reference numbers from nanoGPT-mup's own model.py (and nanoGPT's and GPT-2's as published), for
tests/test_nanogpt_mup.py.

    python scripts/make_nanogpt_mup_fixture.py NANOGPT_MUP_DIR [--nanogpt NANOGPT_DIR]

NANOGPT_MUP_DIR: a checkout of EleutherAI/nanoGPT-mup whose model.py records the epsilon fix
(its comment cites arXiv 2512.22382; the branch `completep` and older copies have the first
rule). NANOGPT_DIR: a checkout of karpathy/nanoGPT (its model.py as published). GPT-2 is the
installed `transformers`' GPT2LMHeadModel. Nothing of theirs is copied: the script imports each
model.py from the path given and writes only numbers, to tests/reference/nanogpt_mup.json.

nanoGPT-mup's GPT with `mup_enabled`, 2 layers of 4 heads, vocabulary 64, context 16, at widths
256 (its base: mup_width_multiplier 1) and 1024 (4), built right after torch.manual_seed(0):
- per parameter (named_parameters order): its init std;
- the forward multipliers, measured on a forward: the readout's (lm_head's input over ln_f's
  output) and the attention's (the `scale` scaled_dot_product_attention is called with);
- its AdamW groups from its own configure_optimizers (weight decay 0.1, eps 1e-6, betas 0.9,
  0.95): per parameter the LR multiplier (`lr_scale`, which train.py multiplies the LR by), the
  epsilon and the weight decay over the ones given;
- one AdamW step in float64 from given tensors: parameter i set to N(0, 0.02^2) drawn by a
  generator seeded 2000 + i, its gradient N(0, 1e-12) seeded 1000 + i (small, so that epsilon
  shows), LR 1e-3 x lr_scale per group as train.py sets it; per parameter the step
  d = after - before as RMS(d), sum(d * grad) and sum(d * before) (epsilon moves the second,
  weight decay the third).
nanoGPT's GPT (karpathy) and GPT-2 at the same shapes, seed 0: each parameter's init std.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from pathlib import Path

import torch

from lrtransfer.diagnostics.inspect import AttentionScales as Scales  # the scale each attention call is given

OUT = Path(__file__).resolve().parent.parent / "tests" / "reference" / "nanogpt_mup.json"
BASE, WIDTHS, LAYERS, HEADS, VOCAB, CONTEXT = 256, (256, 1024), 2, 4, 64, 16
LR, EPS, WD, BETAS, GRAD_STD, PARAM_STD = 1e-3, 1e-6, 0.1, (0.9, 0.95), 1e-6, 0.02
FIX = "2512.22382"  # the paper whose finding the corrected model.py's comment cites
# the shapes and the AdamW step every case is measured with (make_completep_fixture.py's too)
ADAMW_SETUP = {
    "shapes": {"base_width": BASE, "layers": LAYERS, "heads": HEADS, "vocab": VOCAB, "context": CONTEXT},
    "adamw": {"lr": LR, "eps": EPS, "weight_decay": WD, "betas": list(BETAS), "grad_std": GRAD_STD,
              "param_std": PARAM_STD, "param_seed": 2000, "grad_seed": 1000},
}


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


def stds(model) -> list[dict]:
    return [{"name": n, "shape": list(p.shape), "init_std": float(p.detach().double().std())}
            for n, p in model.named_parameters()]


def given(i: int, shape, seed: int, std: float) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed + i), dtype=torch.float64) * std


def forward_mults(model) -> dict:
    """The readout's and the attention's multipliers, as the forward applies them."""
    seen = {}
    hooks = [model.transformer.ln_f.register_forward_hook(lambda m, i, o: seen.__setitem__("ln_f", o.detach().clone())),
             model.lm_head.register_forward_pre_hook(lambda m, i: seen.__setitem__("head", i[0].detach().clone()))]
    idx = torch.randint(0, VOCAB, (2, CONTEXT), generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), Scales() as scales:
        model(idx, targets=idx)
    for h in hooks:
        h.remove()
    ratio = seen["head"] / seen["ln_f"]
    assert torch.allclose(ratio, ratio.flatten()[0]), "the readout's multiplier is not one number"
    assert len(set(scales.seen)) == 1, scales.seen
    return {"readout": float(ratio.flatten()[0]), "attention": float(scales.seen[0]), "d_head": model.config.n_embd // HEADS}


def groups(model) -> dict[str, dict]:
    """name -> lr_mult, eps_mult, wd_mult in the AdamW groups of the model's own configure_optimizers."""
    opt = model.configure_optimizers(WD, LR, BETAS, EPS, "cpu")
    by_id = {}
    for g in opt.param_groups:
        for p in g["params"]:
            by_id[id(p)] = {"lr_mult": g.get("lr_scale", 1.0), "eps_mult": g["eps"] / EPS, "wd_mult": g["weight_decay"] / WD}
    return {n: by_id[id(p)] for n, p in model.named_parameters()}


def one_step(model) -> dict[str, dict]:
    """One AdamW step in float64 from the given tensors, with the model's own groups and train.py's LR."""
    model = model.double()
    named = list(model.named_parameters())
    before, grads = {}, {}
    with torch.no_grad():
        for i, (n, p) in enumerate(named):
            p.copy_(given(i, p.shape, 2000, PARAM_STD))
            before[n] = p.detach().clone()
            grads[n] = given(i, p.shape, 1000, GRAD_STD)
            p.grad = grads[n].clone()
    opt = model.configure_optimizers(WD, LR, BETAS, EPS, "cpu")
    for g in opt.param_groups:
        g["lr"] = LR * g.get("lr_scale", 1.0)  # as train.py sets each group's LR
    opt.step()
    out = {}
    for n, p in named:
        d = p.detach() - before[n]
        out[n] = {"step_rms": float(d.pow(2).mean().sqrt()), "step_dot_grad": float((d * grads[n]).sum()),
                  "step_dot_param": float((d * before[n]).sum())}
    return out


def load_nanogpt_mup(path: Path):
    """nanoGPT-mup's model.py from a checkout, refused without the epsilon fix."""
    source = (path / "model.py").read_text()
    if FIX not in source:
        sys.exit(f"error: {path / 'model.py'} does not record the epsilon fix (no '{FIX}' in it): "
                 "use the version of nanoGPT-mup's model.py whose comment cites it")
    return load(path / "model.py", "nanogpt_mup_model")


def config(mod, width: int, layers: int, **flags):
    return mod.GPTConfig(block_size=CONTEXT, vocab_size=VOCAB, n_layer=layers, n_head=HEADS, n_embd=width,
                         dropout=0.0, bias=True, **flags)


def case(mod, width: int, layers: int = LAYERS, **flags) -> dict:
    """nanoGPT-mup's GPT at `width` and `layers` with its config `flags` (mup_enabled, ...), seed 0:
    its forward multipliers, and per tensor init std, AdamW group and one step."""
    torch.manual_seed(0)
    model = mod.GPT(config(mod, width, layers, **flags))
    rows = stds(model)
    mults, grouped = forward_mults(model), groups(model)
    step = one_step(model)
    for r in rows:
        r.update(grouped[r["name"]], **step[r["name"]])
    return {"forward": mults, "tensors": rows}


def nanogpt_mup(path: Path) -> dict:
    mod = load_nanogpt_mup(path)
    return {str(w): case(mod, w, mup_enabled=True, mup_width_multiplier=w / BASE) for w in WIDTHS}


def as_published(make) -> dict:
    doc = {}
    for width in WIDTHS:
        torch.manual_seed(0)
        doc[str(width)] = stds(make(width))
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("nanogpt_mup", type=Path, help="a checkout of EleutherAI/nanoGPT-mup (its model.py with the epsilon fix)")
    ap.add_argument("--nanogpt", type=Path, required=True, help="a checkout of karpathy/nanoGPT")
    args = ap.parse_args()
    import transformers

    nano = load(args.nanogpt / "model.py", "nanogpt_model")

    def karpathy(width):
        return nano.GPT(nano.GPTConfig(block_size=CONTEXT, vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS, n_embd=width,
                                       dropout=0.0, bias=True))

    def gpt2(width):
        config = transformers.GPT2Config(n_positions=CONTEXT, vocab_size=VOCAB, n_layer=LAYERS, n_head=HEADS, n_embd=width)
        return transformers.GPT2LMHeadModel(config)

    doc = {
        "made_by": "scripts/make_nanogpt_mup_fixture.py", "torch": torch.__version__,
        "transformers": transformers.__version__,
        **ADAMW_SETUP,
        "nanogpt_mup": nanogpt_mup(args.nanogpt_mup),
        "nanogpt": as_published(karpathy),
        "gpt2": as_published(gpt2),
    }
    OUT.write_text(json.dumps(doc, indent=1) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

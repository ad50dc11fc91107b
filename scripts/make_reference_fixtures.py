"""Reference numbers made by the reference packages themselves, for tests/test_reference.py.

    python scripts/make_reference_fixtures.py [--venv /tmp/refenv]

Builds models with `mup` 1.0.0 and `modula` 0.0.0.0.0.2 and writes
tests/reference/mup.json and tests/reference/modula.json. The tests read only the
JSON, never the packages, so CI needs neither; re-run this script to re-derive them.

When this interpreter cannot import both packages (with torch 2.13.0), the script
makes a scratch virtual environment (`--venv`), installs torch==2.13.0 there, then
the two packages with --no-deps (`pip install mup` would pull torchvision, which
replaces a CPU torch with a CUDA build) and their pure-Python needs (pyyaml, numpy),
checks torch's version, and runs itself inside it.

The models: lrtransfer's MLP (readout zeroed or not), CNN and transformer, nanoGPT's GPT with its
table tied to a MuSharedReadout, and tests/loose_net.py's model, whose trained tensors outside any
layer (a matrix, a vector, a fixed one) mup rules on by how many of their dimensions grow.

mup.json, per model and width (64, 256, 1024, or the model's own; base width 64), per parameter in
forward order: its init std (seed 0: the model is built right after
torch.manual_seed(0), so its draws are PyTorch's, in the order lrtransfer draws
them), its forward multiplier (MuReadout's output_mult / width_mult; 1 elsewhere; for an
embedding shared with a MuSharedReadout, 1, with the readout's multiplier as
`readout_mult`),
its LR multiplier in MuAdam's and MuSGD's parameter groups, and one MuAdam and one
MuSGD (momentum 0.9) step from the same weights with the fixed gradient
randn(numel, seed 1000 + i): the step's RMS and its dot product with the gradient
(both independent of the tensor's layout, since these updates act elementwise).

modula.json, per model: each atom's target norm when the whole network's is 1, read
off Modula's own `normalize(w, target_norm=1)` on its orthogonal (unit singular
values, so its one power iteration is exact) or unit-row initial weights, and its
forward multiplier (the atom's `scale`); for the MLPs and the GPT, the network's output
on a given input with given weights (`given_weight`), Modula's forward in float64; and
one Conv2D's multiplier and output, likewise.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

TORCH = "2.13.0"
PACKAGES = ["mup==1.0.0", "modula==0.0.0.0.0.2", "pyyaml", "numpy"]
OUT = Path(__file__).resolve().parent.parent / "tests" / "reference"
BASE, WIDTHS = 64, (64, 256, 1024)
ADAM_LR, SGD_LR, SGD_MOMENTUM = 0.01, 0.1, 0.9
MODULA_WIDTH = 64
FORWARD_SEED = 3000


def have_references() -> bool:
    try:
        import modula  # noqa: F401
        import mup  # noqa: F401
        import torch
    except ImportError:
        return False
    return torch.__version__.split("+")[0] == TORCH


def run_in_scratch_env(venv: Path) -> None:
    py = venv / "bin" / "python"
    if not py.exists():
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(py), "-m", "pip", "install", "--quiet"]
    subprocess.run([*pip, f"torch=={TORCH}"], check=True)
    subprocess.run([*pip, "--no-deps", *PACKAGES], check=True)
    version = subprocess.run([str(py), "-c", "import torch; print(torch.__version__)"], check=True,
                             capture_output=True, text=True).stdout.strip()
    if version.split("+")[0] != TORCH:
        sys.exit(f"error: the scratch environment has torch {version}, not {TORCH}")
    os.execv(str(py), [str(py), __file__, "--venv", str(venv)])


# ---------------------------------------------------------------- mup
def mup_models():
    """name -> (builder(width) -> nn.Module in lrtransfer's forward order, lrtransfer overrides, input_shape,
    output_dim[, widths])."""
    from mup import MuReadout, MuSharedReadout
    from torch import nn

    sys.path.insert(0, str(OUT.parent.parent))
    from tests.loose_net import LooseNet

    def mlp(readout_zero_init):
        def build(w):
            return nn.Sequential(nn.Linear(32, w), nn.ReLU(), nn.Linear(w, w), nn.ReLU(),
                                 MuReadout(w, 10, readout_zero_init=readout_zero_init))
        return build

    def cnn(w):  # stem conv, one hidden conv, global pooling, readout (only the parameters matter)
        return nn.Sequential(nn.Conv2d(3, w, 3, padding=1), nn.Conv2d(w, w, 3, padding=1),
                             MuReadout(w, 10, readout_zero_init=True))

    def transformer(w, vocab=40, context=16):
        layers = [nn.Embedding(vocab, w), nn.Embedding(context, w)]
        layers += [nn.LayerNorm(w), nn.Linear(w, w), nn.Linear(w, w), nn.Linear(w, w), nn.Linear(w, w),  # q k v o
                   nn.LayerNorm(w), nn.Linear(w, 4 * w), nn.Linear(4 * w, w)]
        layers += [nn.LayerNorm(w), MuReadout(w, vocab, readout_zero_init=True)]
        return nn.Sequential(*layers)

    class Attention(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.c_attn, self.c_proj = nn.Linear(w, 3 * w), nn.Linear(w, w)

    class MLP(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.c_fc, self.c_proj = nn.Linear(w, 4 * w), nn.Linear(4 * w, w)

    class Block(nn.Module):
        def __init__(self, w):
            super().__init__()
            self.ln_1, self.attn, self.ln_2, self.mlp = nn.LayerNorm(w), Attention(w), nn.LayerNorm(w), MLP(w)

    class GPT(nn.Module):
        """nanoGPT's parameters (tests/nanogpt_standin.py's GPT: names, shapes, the tie), the head a
        MuSharedReadout of the token table, as mup's own Transformer example ties it."""

        def __init__(self, w, vocab=40, context=16, layers=1):
            super().__init__()
            self.transformer = nn.ModuleDict(dict(
                wte=nn.Embedding(vocab, w), wpe=nn.Embedding(context, w),
                h=nn.ModuleList([Block(w) for _ in range(layers)]), ln_f=nn.LayerNorm(w)))
            self.lm_head = MuSharedReadout(self.transformer.wte.weight, bias=False)

    class Loose(LooseNet):
        """tests/loose_net.py's model, its readout a MuReadout: trained tensors outside any layer."""

        def __init__(self, w):
            super().__init__(w, (32,), 10)
            self.head = MuReadout(w, 10, readout_zero_init=True)

    # PyTorch's init drawn by lrtransfer (as the GPT below is), the table rescaled as MuSharedReadout
    # rescales it, the queries left as mup's example leaves c_attn
    nanogpt = ["model=custom", "model.target={nanogpt}:GPT", "model.config={nanogpt}:GPTConfig",
               "model.width_key=n_embd", "model.depth_key=n_layer", "model.config_kwargs={n_head: 4}", "depth=1",
               "model.init=torch", "param.tied_init=readout", "param.zero_query=false"]
    return {
        "mlp": (mlp(True), ["model=mlp", "depth=3"], [32], 10),
        "mlp_readout_init": (mlp(False), ["model=mlp", "depth=3", "param.readout_zero_init=false"], [32], 10),
        "cnn": (cnn, ["model=cnn", "depth=2", "model.pool=0"], [3, 8, 8], 10),
        "transformer": (transformer, ["model=transformer", "depth=1"], [16], 40),
        # "{nanogpt}": the test writes its nanoGPT file and puts its path there
        "nanogpt_tied": (GPT, nanogpt, [16], 40, (64, 256)),
        # "{tests}": the folder of tests/loose_net.py
        "loose_tensors": (Loose, ["model=custom", "model.target={tests}/loose_net.py:LooseNet", "model.init=torch",
                                  "data=teacher"], [32], 10),
    }


def lr_mults(opt, params, lr):
    out = {}
    for group in opt.param_groups:
        for p in group["params"]:
            out[id(p)] = group["lr"] / lr
    return [out[id(p)] for p in params]


def one_step(make_opt, model, grads):
    import torch

    params = list(model.parameters())
    before = [p.detach().clone() for p in params]
    opt = make_opt(params)
    for p, g in zip(params, grads):
        p.grad = g.clone()
    opt.step()
    deltas = [p.detach() - b for p, b in zip(params, before)]
    with torch.no_grad():
        for p, b in zip(params, before):
            p.copy_(b)
    return [(float(d.double().pow(2).mean().sqrt()), float((d.double() * g.double()).sum()))
            for d, g in zip(deltas, grads)]


def mup_reference() -> dict:
    import torch
    from mup import MuAdam, MuReadout, MuSGD, MuSharedReadout, set_base_shapes

    doc = {"package": "mup 1.0.0", "torch": torch.__version__, "base_width": BASE, "adam_lr": ADAM_LR,
           "sgd_lr": SGD_LR, "sgd_momentum": SGD_MOMENTUM, "models": {}}
    for name, (build, overrides, input_shape, output_dim, *widths) in mup_models().items():
        per_width = {}
        for width in (widths[0] if widths else WIDTHS):
            base, delta = build(BASE), build(2 * BASE)  # built first: the model's draws come right after the seed
            torch.manual_seed(0)
            model = build(width)
            if name == "transformer":  # mup's examples start the queries at zero, as lrtransfer's zero_query
                model[3].weight.data.zero_()
            set_base_shapes(model, base, delta=delta)
            params = list(model.parameters())
            readout_mult = {id(m.weight): m.output_mult / m.width_mult() for m in model.modules()
                            if isinstance(m, MuReadout)}
            shared = {id(m.weight) for m in model.modules() if isinstance(m, MuSharedReadout)}
            grads = [torch.randn(p.numel(), generator=torch.Generator().manual_seed(1000 + i)).view(p.shape)
                     for i, p in enumerate(params)]
            adam = lr_mults(MuAdam(params, lr=ADAM_LR), params, ADAM_LR)
            sgd = lr_mults(MuSGD(params, lr=SGD_LR, momentum=SGD_MOMENTUM), params, SGD_LR)
            adam_step = one_step(lambda ps: MuAdam(ps, lr=ADAM_LR), model, grads)
            sgd_step = one_step(lambda ps: MuSGD(ps, lr=SGD_LR, momentum=SGD_MOMENTUM), model, grads)
            rows = []
            for i, (pname, p) in enumerate(model.named_parameters()):
                tied = {"readout_mult": readout_mult[id(p)]} if id(p) in shared else {}
                rows.append({
                    "name": pname, "shape": list(p.shape),
                    "init_std": float(p.detach().double().std()) if p.numel() > 1 else 0.0,
                    # a shared table: the embedding reads it as it is, the readout times its multiplier
                    "forward_mult": 1.0 if tied else readout_mult.get(id(p), 1.0), **tied,
                    "adam_lr_mult": adam[i], "sgd_lr_mult": sgd[i],
                    "adam_step_rms": adam_step[i][0], "adam_step_dot": adam_step[i][1],
                    "sgd_step_rms": sgd_step[i][0], "sgd_step_dot": sgd_step[i][1],
                })
            per_width[str(width)] = rows
        doc["models"][name] = {"overrides": overrides, "input_shape": input_shape, "output_dim": output_dim,
                               "widths": per_width}
    return doc


# ---------------------------------------------------------------- modula
def modula_models():
    """name -> (Modula module, lrtransfer overrides, input_shape, output_dim)."""
    from modula.atom import Linear
    from modula.bond import GELU, ReLU, ScaledGELU, ScaledReLU
    from modula.compound import GPT, ResMLP

    w = MODULA_WIDTH

    def mlp(act):
        return Linear(10, w) @ act() @ Linear(w, w) @ act() @ Linear(w, 32)

    models = {f"mlp_{n}": (mlp(a), ["model=mlp", "depth=3", "model.bias=false", f"model.activation={n}"], [32], 10)
              for n, a in (("relu", ReLU), ("scaled_relu", ScaledReLU), ("gelu", GELU), ("scaled_gelu", ScaledGELU))}
    for L in (2, 8):  # Modula's ResMLP (Abs: sensitivity 1) against the resnet's default under modular
        models[f"resmlp_L{L}"] = (ResMLP(w, L, 2, 32, 10), ["model=resnet", f"depth={L}", "model.bias=false"], [32], 10)
    models["gpt"] = (GPT(40, 16, 4, w, w // 4, w // 4, 2),
                     ["model=transformer", "depth=2", "model.heads=4", "model.bias=false"], [16], 40)
    return models


def leaves(module):
    """Modula's atoms in the order of its weight Vector (a composite's first-applied child first)."""
    if not module.children:
        return [module] if module.length else []
    return [a for child in module.children for a in leaves(child)]


def modula_reference() -> dict:
    import torch
    from modula.atom import Conv2D
    from modula.vector import Vector

    doc = {"package": "modula 0.0.0.0.0.2", "torch": torch.__version__, "width": MODULA_WIDTH,
           "forward_seed": FORWARD_SEED, "models": {}}
    for name, (module, overrides, input_shape, output_dim) in modula_models().items():
        torch.manual_seed(0)
        weights = module.initialize(device="cpu")
        module.normalize(weights, target_norm=1.0)
        atoms = []
        for atom, t in zip(leaves(module), weights, strict=True):
            t = t.detach().double()
            # an embedding's norm is its rows' l2 (each row normalised), a Linear's the spectral norm
            embedding = type(atom).__name__ == "Embedding"
            target = float(t.norm(dim=1).mean()) if embedding else float(torch.linalg.matrix_norm(t, ord=2))
            atoms.append({"kind": type(atom).__name__, "shape": list(t.shape), "target_norm": target,
                          "forward_mult": float(atom.scale)})
        doc["models"][name] = {"overrides": [f"width={MODULA_WIDTH}", *overrides], "input_shape": input_shape,
                               "output_dim": output_dim, "atoms": atoms}
        if not name.startswith("resmlp"):  # lrtransfer's resnet has other bonds than Modula's ResMLP: its targets only
            x = (torch.randint(0, output_dim, (2, *input_shape), generator=torch.Generator().manual_seed(0))
                 if name == "gpt" else torch.randn(4, *input_shape, generator=torch.Generator().manual_seed(0),
                                                   dtype=torch.float64))
            given = Vector([given_weight(list(t.shape), i) for i, t in enumerate(weights)])
            doc["models"][name]["forward"] = {"input": x.tolist(), "output": module(x, given).tolist()}
    conv = Conv2D(6, 4)  # (out, in) channels, 3x3, padding 1
    x = torch.randn(2, 4, 5, 5, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    doc["conv"] = {"c_out": 6, "c_in": 4, "kernel": 3, "forward_mult": float(conv.scale), "input": x.tolist(),
                   "output": conv(x, Vector([given_weight([6, 4, 3, 3], 0)])).tolist()}
    return doc


def given_weight(shape: list[int], i: int):
    """The weights a forward is measured with: atom i's (Modula's shape: a Linear's (out, in), an Embedding's
    (num, dim), a Conv2D's (out, in, k, k)) N(0, 1 / shape[1]) entries in float64, from a generator seeded
    FORWARD_SEED + i."""
    import torch

    gen = torch.Generator().manual_seed(FORWARD_SEED + i)
    return torch.randn(shape, generator=gen, dtype=torch.float64) * shape[1] ** -0.5


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--venv", type=Path, default=Path("/tmp/refenv"), help="scratch environment [/tmp/refenv]")
    args = ap.parse_args()
    if not have_references():
        run_in_scratch_env(args.venv)
    OUT.mkdir(parents=True, exist_ok=True)
    for name, doc in (("mup", mup_reference()), ("modula", modula_reference())):
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")


if __name__ == "__main__":
    main()

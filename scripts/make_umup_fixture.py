"""Reference numbers for u-muP from Graphcore's `unit-scaling` 0.3.5 itself, for tests/test_umup.py.

    pip install --no-deps unit-scaling==0.3.5 einops docstring-parser tabulate
    python scripts/make_umup_fixture.py

(`--no-deps`: the package asks for any torch >= 2.2, and pip would replace this environment's;
the script checks that torch is still 2.13.0.) Nothing of the package is copied: the script builds
its models and calls its functions, and writes only numbers, to tests/reference/umup.json. Every
number below is read off what the package computes (a forward, its optimizer's parameter groups, a
step of its AdamW), not off its formulas:

- "functions": its unit-scaled GELU's output gain at several `mult` (U.gelu(x) over gelu(mult x) /
  mult), its causal attention's output gain at several head sizes, sequence lengths and `mult`
  (U.scaled_dot_product_attention over F.scaled_dot_product_attention at scale mult / d_head),
  the two factors of `residual_add` at several tau, `add`'s factor, and its `cross_entropy(mult)` on
  given logits;
- "taus": its TransformerStack's (mhsa_tau, mlp_tau) per layer under
  `transformer_residual_scaling_rule(residual_mult, residual_attn_ratio)`;
- "mlp": an MLP made of its layers (Linear(16, w), GELU(act_mult), [Linear(w, w), GELU] x (depth - 2),
  LinearReadout(w, 10), every Linear with a bias; `cross_entropy(loss_mult)`), and "decoder": its
  TransformerDecoder(w, vocabulary 64, depth layers, 4 heads), each at widths 64 and 256 and depths
  2 and 4, built right after torch.manual_seed(0); and "blocks": its DepthSequential of `depth` blocks
  (LayerNorm(w, elementwise_affine=True), Linear(w, w) with a bias), for its norms' and biases' rules
  inside a depth container. Per tensor (named_parameters order): its
  mup_type and scaling depth, init std, forward multiplier (its layer's output over F.linear's; a
  bias's at a zero input), its AdamW group's LR at lr 1 (the Adam LR multiplier), and one AdamW step
  from given tensors (tensor i N(0, 1) from a generator seeded 2000 + i, its gradient N(0, 1e-16)
  seeded 1000 + i, so that epsilon 1e-8 counts; LR 0.01, weight decay 0.01; with
  `independent_weight_decay` true, the default, and false): the step d = after - before as RMS(d),
  sum(d * grad) and sum(d * before). The MLP also on given inputs: its tensors set to N(0, 1) (seeded
  3000 + i, biases too), 32 inputs N(0, 1) and labels (seed 4000), in float64: the loss, and each
  tensor's gradient's cosine with a probe N(0, 1) seeded 5000 + i and its RMS.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

TORCH, PACKAGE = "2.13.0", "0.3.5"
OUT = Path(__file__).resolve().parent.parent / "tests" / "reference" / "umup.json"
WIDTHS, DEPTHS = (64, 256), (2, 4)
MLP_IN, MLP_CLASSES, BATCH = 16, 10, 32
VOCAB, HEADS, CONTEXT = 64, 4, 16
ADAMW = {"lr": 0.01, "eps": 1e-8, "weight_decay": 0.01, "betas": [0.9, 0.999], "grad_std": 1e-8, "param_std": 1.0,
         "param_seed": 2000, "grad_seed": 1000}
GIVEN = {"tensor_seed": 3000, "data_seed": 4000, "probe_seed": 5000, "batch": BATCH}
MULTS = (0.25, 0.5, 1.0, 2.0, 4.0, 1000.0)


def need_package():
    try:
        import unit_scaling as uu
    except ImportError:
        sys.exit("error: unit_scaling is not importable here; pip install --no-deps unit-scaling==0.3.5 "
                 "einops docstring-parser tabulate")
    if uu.__version__ != PACKAGE or torch.__version__.split("+")[0] != TORCH:
        sys.exit(f"error: need unit-scaling {PACKAGE} and torch {TORCH}, have {uu.__version__} and {torch.__version__}")
    return uu


def given(i: int, shape, seed: int, std: float = 1.0) -> torch.Tensor:
    return torch.randn(shape, generator=torch.Generator().manual_seed(seed + i), dtype=torch.float64) * std


# ---------------------------------------------------------------- functions
def functions(uu) -> dict:
    U = uu.functional
    x = torch.tensor([0.7, -1.3], dtype=torch.float64)
    gelu = {f"{m:g}": float((U.gelu(x, mult=m) / (F.gelu(x * m) / m))[0]) for m in MULTS}
    attention = []
    for d_head in (16, 64):
        for T in (8, 64):
            for mult in (0.5, 1.0, 2.0):
                q, k, v = (given(i, (2, 1, T, d_head), 6000) for i in range(3))
                ours = U.scaled_dot_product_attention(q, k, v, is_causal=True, mult=mult)
                plain = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=mult / d_head)
                attention.append({"d_head": d_head, "seq_len": T, "mult": mult, "gain": float((ours / plain).mean()),
                                  "gain_spread": float((ours / plain).std())})
    one, zero = torch.ones(3, dtype=torch.float64), torch.zeros(3, dtype=torch.float64)
    residual = {f"{tau:g}": {"branch": float(U.residual_add(one, zero, tau=tau)[0]),
                             "skip": float(U.residual_add(zero, one, tau=tau)[0])} for tau in (0.25, 0.5, 1.0, 2.0)}
    logits, labels = given(0, (8, 10), 7000), torch.randint(0, 10, (8,), generator=torch.Generator().manual_seed(7000))
    ce = {f"{m:g}": float(U.cross_entropy(logits, labels, mult=m)) for m in (0.5, 1.0, 2.0)}
    return {"gelu_gain": gelu, "attention_gain": attention, "residual_add": residual,
            "add": float(U.add(one, zero)[0]), "cross_entropy": {"logits_seed": 7000, "classes": 10, "rows": 8, "loss": ce}}


def taus(uu) -> dict:
    out = {}
    for rm, ratio in ((1.0, 1.0), (0.5, 2.0), (2.0, 0.5)):
        rule = uu.transformer_residual_scaling_rule(residual_mult=rm, residual_attn_ratio=ratio)
        for layers in (1, 2, 4, 8):
            with torch.device("meta"):
                stack = uu._modules.TransformerStack(layers=layers, residual_scaling=rule, hidden_size=8, heads=2,
                                                     is_causal=True)
            out[f"residual_mult={rm:g} residual_attn_ratio={ratio:g} layers={layers}"] = [
                [float(layer.mhsa_tau), float(layer.mlp_tau)] for layer in stack]
    return out


# ---------------------------------------------------------------- per tensor
@torch.no_grad()
def forward_mults(model) -> dict[str, float]:
    """Each layer's factor on x W^T + b, read off a forward exactly: with its weight set to ones and
    one input 1, the rest 0, its output is the weight's factor; with the weight 0 and the bias ones,
    the bias's. The layer's own tensors are put back."""
    out = {}
    for path, m in model.named_modules():
        if not isinstance(m, (torch.nn.Linear, torch.nn.Embedding)):
            continue
        kept = {n: p.detach().clone() for n, p in m.named_parameters()}
        m.weight.fill_(1.0)
        if isinstance(m, torch.nn.Embedding):
            out[f"{path}.weight"] = float(m(torch.tensor([0]))[0, 0])
        else:
            if m.bias is not None:
                m.bias.zero_()
            x = torch.zeros(1, m.in_features, dtype=m.weight.dtype)
            x[0, 0] = 1.0
            out[f"{path}.weight"] = float(m(x)[0, 0])
            if m.bias is not None:
                m.weight.zero_()
                m.bias.fill_(1.0)
                out[f"{path}.bias"] = float(m(torch.zeros_like(x))[0, 0])
        for n, p in m.named_parameters():
            p.copy_(kept[n])
    return out


def adamw_groups(uu, model) -> dict[str, float]:
    """The LR each tensor's group of the package's AdamW has at lr 1."""
    names = {id(p): n for n, p in model.named_parameters()}
    opt = uu.optim.AdamW(model.parameters(), lr=1.0)
    return {names[id(g["params"][0])]: float(g["lr"]) for g in opt.param_groups}


def one_step(uu, model, independent: bool) -> dict[str, dict]:
    params = list(model.named_parameters())
    with torch.no_grad():
        before = {}
        for i, (n, p) in enumerate(params):
            p.copy_(given(i, p.shape, ADAMW["param_seed"], ADAMW["param_std"]))
            p.grad = given(i, p.shape, ADAMW["grad_seed"], ADAMW["grad_std"])
            before[n] = p.detach().clone()
    opt = uu.optim.AdamW(model.parameters(), lr=ADAMW["lr"], weight_decay=ADAMW["weight_decay"], eps=ADAMW["eps"],
                         betas=tuple(ADAMW["betas"]), independent_weight_decay=independent)
    opt.step()
    out = {}
    for n, p in params:
        d = p.detach() - before[n]
        out[n] = {"step_rms": float(d.pow(2).mean().sqrt()), "step_dot_grad": float((d * p.grad).sum()),
                  "step_dot_param": float((d * before[n]).sum())}
    return out


def rows(uu, model) -> list[dict]:
    model = model.double()
    stds = {n: float(p.detach().std()) if p.numel() > 1 else 0.0 for n, p in model.named_parameters()}
    mults, lrs = forward_mults(model), adamw_groups(uu, model)
    steps = {True: one_step(uu, model, True), False: one_step(uu, model, False)}
    out = []
    for n, p in model.named_parameters():
        out.append({"name": n, "shape": list(p.shape), "mup_type": p.mup_type, "depth": p.mup_scaling_depth,
                    "init_std": stds[n], "forward_mult": mults.get(n), "lr_mult": lrs[n],
                    **steps[True][n], **{f"{k}_lr_decay": v for k, v in steps[False][n].items()}})
    return out


# ---------------------------------------------------------------- the models
def mlp(uu, width: int, depth: int, act_mult: float = 1.0):
    layers = [uu.Linear(MLP_IN, width, bias=True), uu.GELU(mult=act_mult)]
    for _ in range(depth - 2):
        layers += [uu.Linear(width, width, bias=True), uu.GELU(mult=act_mult)]
    layers.append(uu.LinearReadout(width, MLP_CLASSES, bias=True))
    return torch.nn.Sequential(*layers)


def mlp_on_given(uu, width: int, depth: int, act_mult: float, loss_mult: float) -> dict:
    """The loss and the gradients on given tensors and inputs, in float64."""
    model = mlp(uu, width, depth, act_mult).double()
    with torch.no_grad():
        for i, (_, p) in enumerate(model.named_parameters()):
            p.copy_(given(i, p.shape, GIVEN["tensor_seed"]))
    x = given(0, (BATCH, MLP_IN), GIVEN["data_seed"])
    y = torch.randint(0, MLP_CLASSES, (BATCH,), generator=torch.Generator().manual_seed(GIVEN["data_seed"]))
    loss = uu.functional.cross_entropy(model(x), y, mult=loss_mult)
    loss.backward()
    grads = {}
    for i, (n, p) in enumerate(model.named_parameters()):
        probe = given(i, p.shape, GIVEN["probe_seed"])
        g = p.grad
        grads[n] = {"grad_cos_probe": float((g * probe).sum() / (g.norm() * probe.norm())),
                    "grad_rms": float(g.pow(2).mean().sqrt())}
    return {"act_mult": act_mult, "loss_mult": loss_mult, "loss": float(loss.detach()), "grads": grads}


def main() -> None:
    uu = need_package()
    doc = {"made_by": "scripts/make_umup_fixture.py", "unit_scaling": uu.__version__, "torch": torch.__version__,
           "adamw": ADAMW, "given": GIVEN,
           "shapes": {"mlp_in": MLP_IN, "mlp_classes": MLP_CLASSES, "vocab": VOCAB, "heads": HEADS, "context": CONTEXT},
           "functions": functions(uu), "taus": taus(uu), "mlp": {}, "decoder": {}, "blocks": {}}
    for width in WIDTHS:
        for depth in DEPTHS:
            key = f"w{width} d{depth}"
            torch.manual_seed(0)
            doc["mlp"][key] = {"width": width, "depth": depth, "tensors": rows(uu, mlp(uu, width, depth)),
                               "given": [mlp_on_given(uu, width, depth, 1.0, 1.0)]}
            torch.manual_seed(0)
            decoder = uu.TransformerDecoder(hidden_size=width, vocab_size=VOCAB, layers=depth, heads=HEADS)
            doc["decoder"][key] = {"width": width, "depth": depth, "tensors": rows(uu, decoder),
                                   "taus": [[float(layer.mhsa_tau), float(layer.mlp_tau)] for layer in decoder.layers]}
            torch.manual_seed(0)
            blocks = uu.DepthSequential(*[torch.nn.Sequential(uu.LayerNorm(width, elementwise_affine=True),
                                                              uu.Linear(width, width, bias=True)) for _ in range(depth)])
            doc["blocks"][key] = {"width": width, "depth": depth, "tensors": rows(uu, blocks)}
    doc["mlp"]["w64 d4"]["given"].append(mlp_on_given(uu, 64, 4, 2.0, 0.5))
    OUT.write_text(json.dumps(doc, separators=(",", ":")) + "\n")
    print(f"wrote {OUT} ({OUT.stat().st_size} bytes)")


if __name__ == "__main__":
    main()

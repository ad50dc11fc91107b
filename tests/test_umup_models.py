"""`param=umup` on the built-in models: u-muP's defining property (activations at a scale that does
not move with the width, near 1 in the transformer at any depth), training (batched equals one at a
time in float64, bf16 within tests/test_precision.py's bound), and what `inspect` shows. The numbers
against the `unit-scaling` package itself: tests/test_umup.py."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lrtransfer.nn import Activation, Residual
from lrtransfer.options.param import umup
from lrtransfer.training import build, engine
from lrtransfer.training.runs import Run
from tests.conftest import typed
from tests.test_umup import REF, built


# ---------------------------------------------------------------- u-muP's defining property
def rms_through(net, x) -> list[float]:
    """The RMS of what each nonlinearity and residual block hands on, at init."""
    seen = []
    hooks = [m.register_forward_hook(lambda m, i, o: seen.append(float(o.double().pow(2).mean().sqrt())))
             for m in net.modules() if isinstance(m, (Activation, Residual))]
    with torch.no_grad():
        net(x)
    for h in hooks:
        h.remove()
    return seen


@pytest.mark.parametrize("model, extra, x", [
    ("mlp", ["model.activation=gelu"], lambda: torch.randn(256, 32)),
    ("mlp", [], lambda: torch.randn(256, 32)),
    ("resnet", [], lambda: torch.randn(256, 32)),
    ("resnet", ["model.layer_norm=true", "model.activation=gelu"], lambda: torch.randn(256, 32)),
    ("transformer", ["data=text", "data.seq_len=32"], lambda: torch.randint(0, 64, (4, 32))),
])
def test_activations_keep_their_scale_at_any_width_and_near_one_at_any_depth(model, extra, x):
    """At init, what every nonlinearity and residual block hands on has the same RMS at width 64 and
    1024 (within 30%: width 64 is not wide, and ResNet-S at depth 8 varies most); in the transformer RMS near 1 at depth 2 and 8: the
    property the package's unit scaling is for. Its unit-scaled nonlinearities set the std of a unit
    Gaussian's output to 1, not its RMS (the mean stays), so where outputs of nonlinearities add up
    without a Linear between (a plain MLP layer after layer, ResNet-S's branches, which end in one)
    the RMS grows with depth, as the package's own layers' does (its GELU MLP at width 1024: 1.16,
    1.34, 1.59, 1.90, ... layer by layer, measured with unit-scaling 0.3.5); the transformer's
    branches end in a Linear."""
    inputs = x()
    for depth in (2, 8):
        seen = {}
        for width in (64, 1024):
            cfg = typed(f"model={model}", *extra, "param=umup", f"width={width}", f"depth={depth}")
            param, net = built(cfg, tuple(inputs.shape[1:]), 64 if model == "transformer" else 10)
            param.initialize(net, [0])
            seen[width] = rms_through(net, inputs)
        assert seen[64] and seen[1024] == pytest.approx(seen[64], rel=0.3), (model, depth, seen)
        near_one = seen[1024] if model == "transformer" else seen[1024][:1]
        assert all(0.6 < r < 1.6 for r in near_one), (model, depth, [round(r, 2) for r in seen[1024]])


# ---------------------------------------------------------------- training: batched, bf16
SMALL = {"mlp": ["model=mlp", "width=24", "depth=3"], "resnet": ["model=resnet", "width=24", "depth=3"],
         "transformer": ["model=transformer", "data=text", "data.seq_len=8", "width=24", "depth=2"]}
TRAIN = ["param=umup", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu", "engine.progress=false"]


@pytest.mark.parametrize("model", ["mlp", "resnet"])  # the transformer's: tests/test_grid.py, with a value per run
def test_batched_equals_one_run_at_a_time_in_float64(model):
    over = [*SMALL[model], *TRAIN, "train.dtype=float64", "train.steps=20", "n_seeds=2"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-5, -2)]
    batched = engine.train(build.job(typed(*over)), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone, strict=True):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


@pytest.mark.parametrize("model", list(SMALL))
def test_bf16_stays_within_what_bf16_allows_of_float32(model):
    """tests/test_precision.py's bound: the first loss within bf16's spacing 2^-8, each final loss within
    half the gap between two seeds in float32."""
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-5, -2)]
    over = [*SMALL[model], *TRAIN, "train.steps=40"]
    f32 = engine.train(build.job(typed(*over)), runs)
    b16 = engine.train(build.job(typed(*over, "train.dtype=bf16")), runs)
    assert [a.history_loss for a in b16] != [a.history_loss for a in f32], "bf16 changed nothing"
    for a, b in zip(f32, b16):
        assert abs(b.initial_loss - a.initial_loss) <= 2**-8 * a.initial_loss
    gap = sum(abs(f32[i].final_loss - f32[i + 2].final_loss) for i in (0, 1)) / 2
    for a, b in zip(f32, b16):
        assert abs(b.final_loss - a.final_loss) <= gap / 2, (a.lr, a.seed, a.final_loss, b.final_loss, gap)


def test_inspect_shows_the_unit_scaled_operations(cli):
    code, out, err = cli("inspect", "model=transformer", "data=text", "data.seq_len=16", "width=64", "depth=2",
                         "param=umup", "param.act_mult=2", "--json")
    assert code == 0, err
    doc = json.loads(out)
    taus = [t for layer in REF["decoder"]["w64 d2"]["taus"] for t in layer]
    assert doc["branch_mult"] == pytest.approx([t / (1 + t**2) ** 0.5 for t in taus], rel=1e-12)
    assert doc["skip_mult"] == pytest.approx([1 / (1 + t**2) ** 0.5 for t in taus], rel=1e-12)
    assert (doc["activation_mult"], doc["activation_gain"]) == (2.0, pytest.approx(REF["functions"]["gelu_gain"]["2"]))
    assert doc["attention_output_mult"] == pytest.approx(umup.attention_gain(16, 16, 1.0), rel=1e-7)  # float32
    assert doc["attention_scale"] == 1 / 16
    code, out, err = cli("inspect", "model=transformer", "data=text", "data.seq_len=16", "width=64", "depth=2", "param=umup")
    assert code == 0, err
    assert "residual adds (skip, branch): (0.8165, 0.5774), (0.866, 0.5)" in out
    assert "nonlinearities: gain x f(mult x) / mult, mult 1, gain 1.767" in out and "attention output x " in out


def test_inspect_says_what_it_cannot_reach_in_a_published_model(cli):
    example = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"
    code, out, err = cli("inspect", "model=custom", f"model.target={example}:LayerNormMLP", "param=umup", "--json")
    assert code == 0, err
    notes = " ".join(json.loads(out)["notes"])
    assert "its residual adds, nonlinearities, norms and attention output keep their own scales" in notes
    assert "no residual branches found: no tensor gets u-muP's depth^-1/2 LR" in notes

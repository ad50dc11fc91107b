"""bf16: every matrix product in bfloat16, on copies of the weights the optimizer writes once a
step; everything else in float32. How close its losses stay to float32's, and how that is judged.

The tolerance has two parts, one per source of difference:
- rounding alone (the first loss, before any update): bf16 keeps 8 significant bits, so a
  product's relative error is bounded by its spacing, 2^-8; the loss may differ by no more;
- training (the final loss, the mean of the last 10% of steps): rounding changes each step a
  little and the dynamics carry it on, as a different seed does; bf16 may move a run's final
  loss by at most half the gap between two seeds at the same LR in float32 (so that it cannot
  change which LR a study finds best by more than re-seeding does). Measured on these tiny
  models: at most 0.15 of it (scripts/bf16_margins.py).
"""

from __future__ import annotations

import pytest
import torch
from torch.nn import functional as F

from lrtransfer.config import identity
from lrtransfer.training import build, engine, precision
from lrtransfer.training.ensemble import Ensemble
from lrtransfer.training.runs import Run
from tests.conftest import compose, typed
from tests.datafiles import write_cifar
from tests.test_cuda import MODELS as CUDA_MODELS

SMALL = ["train.batch_size=16", "data.eval_size=64", "engine.progress=false", "engine.device=cpu"]
# every built-in family on the data it is made for, and a user's own module (as the GPU's tests)
MODELS = {**CUDA_MODELS, "cnn1d": ["model=cnn1d", "width=16", "depth=2", "data=mnist1d", "data.num_samples=400"]}


@pytest.fixture(scope="module")
def data_over(tmp_path_factory):
    """The data options the file-backed tasks need: fake CIFAR files, MNIST-1D's cache."""
    root = tmp_path_factory.mktemp("data")
    write_cifar(root / "cifar")
    return {"cifar10": [f"data.root={root / 'cifar'}"], "mnist1d": [f"data.cache={root / 'mnist1d'}"]}


def config(model: str, data_over, *over: str):
    extra = [x for name, opts in data_over.items() if f"data={name}" in MODELS[model] for x in opts]
    if model == "cnn1d":
        pytest.importorskip("mnist1d")
    return typed(*MODELS[model], *SMALL, *extra, *over)


@pytest.mark.parametrize("model", MODELS)
def test_bf16_losses_stay_within_what_bf16_allows_of_float32(model, data_over):
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]
    f32 = engine.train(build.job(config(model, data_over, "train.steps=40")), runs)
    b16 = engine.train(build.job(config(model, data_over, "train.steps=40", "train.dtype=bf16")), runs)
    assert [a.history_loss for a in b16] != [a.history_loss for a in f32], "bf16 changed nothing"
    for a, b in zip(f32, b16):  # rounding alone
        assert abs(b.initial_loss - a.initial_loss) <= 2**-8 * a.initial_loss
    gap = sum(abs(f32[i].final_loss - f32[i + 2].final_loss) for i in (0, 1)) / 2  # seed 0 against seed 1, per LR
    for a, b in zip(f32, b16):  # training
        assert abs(b.final_loss - a.final_loss) <= gap / 2, (a.lr, a.seed, a.final_loss, b.final_loss, gap)


@pytest.mark.parametrize("param", ["standard", "modular"])  # the one pass per run; the direction path
def test_matrix_products_run_on_bf16_copies_of_float32_masters(param):
    """The forward's Linear weights are bfloat16, each the rounded master of its run after every
    step; the masters, biases and optimizer state stay float32, and the masters move."""
    cfg = typed("width=192", "depth=3", "train.batch_size=8", "engine.device=cpu", "train.dtype=bf16", f"param={param}")
    ens = Ensemble(build.job(cfg), [Run(log2_lr=e, seed=0) for e in (-9, -7)])
    before = [t.clone() for t in ens.tensors]
    for _ in range(3):
        ens.step()
    copies = 0
    for s, copy, old in zip(ens.slots, ens.copies, before):
        held = getattr(s.atom, s.name)  # what the forward computes with
        assert s.tensor.dtype == torch.float32 and not torch.equal(s.tensor, old)
        if s.name in s.atom.MATRICES:
            copies += 1
            assert held is copy and held.dtype == torch.bfloat16
            assert torch.equal(held, s.tensor.to(torch.bfloat16))
        else:
            assert copy is None and held is s.tensor
    assert copies == 3
    assert all(t.dtype == torch.float32 for t in ens.opt.state)


def test_a_linear_adds_its_bias_in_bf16_so_its_nonlinearity_runs_in_bf16(monkeypatch):
    """As torch's own linear and conv under autocast: the product and its bias one bfloat16
    tensor, so the elementwise pass after it reads and writes half the bytes; the bias itself
    stays a float32 master, as every tensor that is not multiplied as a matrix."""
    from lrtransfer.nn.compounds import Activation

    seen = []
    real = Activation.forward
    monkeypatch.setattr(Activation, "forward", lambda self, x: seen.append(x.dtype) or real(self, x))
    cfg = typed("width=64", "depth=3", "train.batch_size=8", "engine.device=cpu", "train.dtype=bf16")
    ens = Ensemble(build.job(cfg), [Run(log2_lr=-8, seed=0)])
    ens.step()
    assert seen and set(seen) == {torch.bfloat16}
    biases = [s for s in ens.slots if s.name == "bias"]
    assert biases and all(s.tensor.dtype == torch.float32 and getattr(s.atom, s.name) is s.tensor for s in biases)


def test_attention_runs_in_float32_in_a_bf16_step_on_a_cpu(monkeypatch):
    seen = []
    real = F.scaled_dot_product_attention

    def spy(q, k, v, **kw):
        seen.append((q.dtype, torch.is_autocast_enabled("cpu")))
        return real(q, k, v, **kw)

    monkeypatch.setattr(F, "scaled_dot_product_attention", spy)
    cfg = typed(*MODELS["transformer"], *SMALL, "train.dtype=bf16")
    ens = Ensemble(build.job(cfg), [Run(log2_lr=-8, seed=0)])
    ens.step()
    assert seen and all(s == (torch.float32, False) for s in seen)
    linear = next(a for a in ens.model.atoms() if a.kind == "linear")
    assert linear.weight.dtype == torch.bfloat16  # while the products around it are bf16


def test_bf16_batched_equals_one_run_at_a_time():
    over = ["width=192", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu",
            "train.steps=20", "train.dtype=bf16", "n_seeds=2"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]
    batched = engine.train(build.job(typed(*over)), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-6)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-6)


def test_bf16_autocast_is_bf16s_former_name():
    over = ["width=24", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu", "train.steps=10"]
    runs = [Run(log2_lr=-7, seed=0)]
    (new,) = engine.train(build.job(typed(*over, "train.dtype=bf16")), runs)
    (old,) = engine.train(build.job(typed(*over, "train.dtype=bf16_autocast")), runs)
    assert vars(new) == vars(old)
    assert identity.semantic(compose("train.dtype=bf16")) == identity.semantic(compose("train.dtype=bf16_autocast"))
    assert identity.semantic(compose("train.dtype=bf16")) != identity.semantic(compose())


def test_bf16_unit_and_the_plans_note(monkeypatch):
    cpu = torch.device("cpu")
    unit = precision.bf16_unit(cpu)
    amx, dot = torch.cpu._is_amx_tile_supported(), torch.cpu._is_avx512_bf16_supported()
    assert (unit is None) == (not (amx or dot))
    assert precision.bf16_note("float32", cpu) is None
    monkeypatch.setattr(precision, "bf16_unit", lambda device: None)
    assert "bf16 will not be faster than float32 here" in precision.bf16_note("bf16", cpu)
    monkeypatch.setattr(precision, "bf16_unit", lambda device: precision.Unit("AVX-512 BF16", matrix=False))
    assert "no bf16 matrix unit" in precision.bf16_note("bf16", cpu)
    monkeypatch.setattr(precision, "bf16_unit", lambda device: precision.Unit("AMX", matrix=True))
    assert precision.bf16_note("bf16", cpu) is None


def test_the_plan_says_where_bf16_is_not_faster(cli, tmp_path, monkeypatch):
    monkeypatch.setattr(precision, "bf16_unit", lambda device: None)
    code, out, err = cli("sweep", "--plan", "train.dtype=bf16", "width=16,32", f"results_dir={tmp_path}")
    assert code == 0, err
    assert out.count("bf16 will not be faster than float32 here") == 1  # once, not per job
    code, out, err = cli("sweep", "--plan", "width=16,32", f"results_dir={tmp_path}")
    assert code == 0 and "train.dtype" not in out
    assert not any(tmp_path.iterdir())  # a plan writes nothing

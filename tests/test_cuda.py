"""The engine on a GPU: what the CPU tests prove, proved again on CUDA, and CUDA against the CPU.

Marked `cuda` and skipped where no GPU is present (the CPU suite, CI). On a machine with one,
`pytest -m cuda` runs only these; the plain suite runs them too. Tolerances are stated per test:
float64 must agree as on the CPU; float32 on two devices differs by rounding only (no TF32, the
same batches: every random draw is made on the CPU, `Task.sample`); bf16 and TF32 are opt-in
precisions held to the same tolerance as the CPU's bf16 test.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from lrtransfer.training import build, engine, stop
from lrtransfer.training.ensemble import Ensemble
from lrtransfer.sweeps.checkpoint import FileCheckpoint
from lrtransfer.training.runs import Run
from tests.conftest import typed
from tests.datafiles import write_cifar

pytestmark = [pytest.mark.cuda,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"
SMALL = ["train.batch_size=8", "data.eval_size=32", "engine.progress=false"]
MODELS = {  # each built-in family on the data it is made for, and a user's own module
    "mlp": ["model=mlp", "width=24", "depth=3"],
    "resnet": ["model=resnet", "width=16", "depth=2"],
    "cnn": ["model=cnn", "width=8", "depth=2", "model.pool=4", "data=cifar10"],
    "resnet_cnn": ["model=resnet_cnn", "width=8", "depth=2", "model.pool=4", "data=cifar10"],
    "transformer": ["model=transformer", "width=16", "depth=2", "data=text", "data.seq_len=16"],
    "custom": ["model=custom", f"model.target={EXAMPLE}:build", "width=24", "depth=3"],
}
PARAMS = {
    "standard": [],
    "equalized": ["param=equalized"],
    "mup": ["param=mup", "param.base_width=8"],
    "modular": ["param=modular"],
    "spectral": ["param=spectral"],
}
NOT_OFFERED = {("custom", "modular")}  # refused before training (test_custom)
NANOGPT = Path(__file__).resolve().parent / "nanogpt_standin.py"
PUBLISHED = {  # a user's modules with attention (scaled_dot_product_attention under vmap)
    "nanogpt": ["model=custom", f"model.target={NANOGPT}:GPT", f"model.config={NANOGPT}:GPTConfig",
                "model.width_key=n_embd", "model.depth_key=n_layer", "model.config_kwargs={n_head: 2}"],
    "gpt2": ["model=custom", "model.target=transformers:GPT2LMHeadModel", "model.config=transformers:GPT2Config",
             "model.width_key=n_embd", "model.depth_key=n_layer",
             "model.config_kwargs={n_head: 2, resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}"],
}


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    root = tmp_path_factory.mktemp("cifar")
    write_cifar(root)
    return root


def config(model: str, param: str, device: str, cifar_root, *over: str):
    extra = [f"data.root={cifar_root}"] if "data=cifar10" in MODELS[model] else []
    return typed(*MODELS[model], *PARAMS[param], *SMALL, *extra, f"engine.device={device}", *over)


def test_auto_and_cuda_0_pick_the_gpu():
    assert build.select_device("auto") == torch.device("cuda", torch.cuda.current_device())
    assert build.select_device("cuda:0") == torch.device("cuda", 0)
    assert build.job(typed("engine.device=auto")).device.type == "cuda"


@pytest.mark.parametrize("param", PARAMS)
@pytest.mark.parametrize("model", MODELS)
def test_batched_equals_one_run_at_a_time_in_float64_on_cuda(model, param, cifar_root):
    if (model, param) in NOT_OFFERED:
        pytest.skip(f"param={param} is not offered for model={model}")
    over = ["train.dtype=float64", "train.steps=20", "n_seeds=2"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]
    batched = engine.train(build.job(config(model, param, "cuda", cifar_root, *over)), runs)
    alone = engine.train(build.job(config(model, param, "cuda", cifar_root, *over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone):
        assert (a.lr, a.seed, a.diverged) == (b.lr, b.seed, b.diverged)
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


@pytest.mark.parametrize("model", MODELS)
def test_cuda_float32_equals_cpu_float32(model, cifar_root):
    """The same batches on both devices; the first loss to 1e-5 (a TF32 convolution would be off
    by about 1e-3), and 30 steps of training to 1e-3."""
    runs = [Run(log2_lr=e, seed=0) for e in (-9, -7)]
    cpu = engine.train(build.job(config(model, "standard", "cpu", cifar_root, "train.steps=30")), runs)
    gpu = engine.train(build.job(config(model, "standard", "cuda", cifar_root, "train.steps=30")), runs)
    for a, b in zip(gpu, cpu):
        assert a.initial_loss == pytest.approx(b.initial_loss, rel=1e-5)
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-3)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-3)


@pytest.mark.parametrize("model", ["mlp", "cnn", "transformer"])
def test_bf16_autocast_and_tf32_on_cuda_stay_near_float32(model, cifar_root):
    """Both really change the numbers (they ran), and stay within 5% of float32's losses."""
    runs = [Run(log2_lr=-7, seed=0)]
    over = ["width=64", "train.steps=30"] if model == "mlp" else ["train.steps=30"]
    (f32,) = engine.train(build.job(config(model, "standard", "cuda", cifar_root, *over)), runs)
    for dtype in ("bf16_autocast", "tf32"):
        (low,) = engine.train(build.job(config(model, "standard", "cuda", cifar_root, *over, f"train.dtype={dtype}")), runs)
        assert low.history_loss != f32.history_loss, f"{dtype} changed nothing"
        assert low.final_loss == pytest.approx(f32.final_loss, rel=0.05)
        assert low.eval_loss == pytest.approx(f32.eval_loss, rel=0.05)


@pytest.mark.parametrize("write_on, resume_on", [("cuda", "cpu"), ("cpu", "cuda")])
@pytest.mark.parametrize("param, optim", [("standard", "adam"), ("modular", "adam"), ("spectral", "muon")])
def test_a_checkpoint_resumes_on_the_other_device(tmp_path, monkeypatch, write_on, resume_on, param, optim):
    """Interrupted on one device, resumed (not restarted) on the other: the runs end as an
    uninterrupted run on the resuming device does, to float32 rounding over 40 steps."""
    def over(device):
        return typed("width=16", "train.steps=40", *SMALL, f"param={param}", f"optim={optim}", f"engine.device={device}")

    runs = [Run(log2_lr=e, seed=0) for e in (-9, -6)]
    reference = engine.train(build.job(over(resume_on)), runs)
    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)
    seen = []

    def interrupt_midway(n):
        seen.append(n)
        if sum(seen) >= 40:  # half of the 2 runs x 40 steps
            stop.request()

    monkeypatch.setattr(stop, "_requested", False)
    with pytest.raises(engine.Interrupted):
        engine.train(build.job(over(write_on)), runs, progress=interrupt_midway, checkpoint=ckpt)
    monkeypatch.setattr(stop, "_requested", False)

    def refuse(why):
        raise AssertionError(f"the checkpoint was rejected: {why}")

    monkeypatch.setattr(ckpt, "reject", refuse)
    resumed = engine.train(build.job(over(resume_on)), runs, checkpoint=ckpt)
    for a, b in zip(resumed, reference):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-3)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-3)


@pytest.mark.parametrize("family", PUBLISHED)
def test_a_published_model_trains_on_cuda_as_on_the_cpu(family):
    """Attention in a user's module runs under vmap; on the GPU its fused kernels' batching rules
    failed (GPT-2 and nanoGPT alike), so it runs the plain kernel there (`batching.plain_attention`):
    the runs train, float32 as on the CPU to 1e-3 over 20 steps."""
    if family == "gpt2":
        pytest.importorskip("transformers")
    over = [*PUBLISHED[family], "data=text", "data.seq_len=16", "width=16", "depth=2", *SMALL, "train.steps=20"]
    runs = [Run(log2_lr=e, seed=0) for e in (-9, -6)]
    cpu = engine.train(build.job(typed(*over, "engine.device=cpu")), runs)
    gpu = engine.train(build.job(typed(*over, "engine.device=cuda")), runs)
    for a, b in zip(gpu, cpu):
        assert not a.diverged
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-3)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-3)


GRAPH_RUNS = [Run(log2_lr=-9, seed=0), Run(log2_lr=-6, seed=0), Run(log2_lr=-6, seed=1), Run(log2_lr=3, seed=1)]


@pytest.mark.parametrize("optim", ["adam", "sgd"])
@pytest.mark.parametrize("param", ["standard", "mup"])
@pytest.mark.parametrize("model", MODELS)
def test_a_graphed_step_equals_the_eager_step_in_float64(model, param, optim, cifar_root):
    """Replayed as a CUDA graph (`training/graphs.py`) the step computes what the eager step does:
    under a warm-up then cosine schedule (the factor read on the device at each replay), two seeds,
    and a run at LR 2^3 that diverges and is frozen mid-training (its LR zeroed where the graph
    reads it). Float64, to 1e-9."""
    over = ["train.dtype=float64", "train.steps=30", "train.schedule=cosine", "train.warmup_steps=5",
            f"optim={optim}"]
    graphed = engine.train(build.job(config(model, param, "cuda", cifar_root, *over, "engine.graphs=always")), GRAPH_RUNS)
    eager = engine.train(build.job(config(model, param, "cuda", cifar_root, *over, "engine.graphs=never")), GRAPH_RUNS)
    assert [r.diverged for r in graphed] == [r.diverged for r in eager]
    for a, b in zip(graphed, eager):
        assert a.diverged_step == b.diverged_step
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9, nan_ok=True)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9, nan_ok=True)


@pytest.mark.parametrize("dtype", ["float32", "bf16", "tf32"])
@pytest.mark.parametrize("model", [*MODELS, *PUBLISHED])
def test_a_narrow_step_is_captured_and_replays_as_the_eager_step(model, dtype, cifar_root):
    """With engine.graphs=auto a narrow model's step is captured (no fallback to eager), and in
    each precision its losses are the eager step's: the same kernels on the same numbers."""
    if model == "gpt2":
        pytest.importorskip("transformers")
    if model in PUBLISHED:
        over = typed(*PUBLISHED[model], "data=text", "data.seq_len=16", "width=16", "depth=2", *SMALL,
                     "engine.device=cuda", f"train.dtype={dtype}", "train.steps=12")
    else:
        over = config(model, "mup", "cuda", cifar_root, f"train.dtype={dtype}", "train.steps=12")
    runs = [Run(log2_lr=e, seed=0) for e in (-9, -7)]
    ens = Ensemble(build.job(over), runs)
    while not ens.finished:
        ens.step()
    assert ens.graphed is not None and ens.graphed.failed is None and ens.graphed.graph is not None
    eager = Ensemble(build.job(over), runs)
    eager.graphed, eager.fused = None, False  # the same direction path, eagerly
    while not eager.finished:
        eager.step()
    # the same kernels; cuBLAS may pick another algorithm inside a capture, so not bit for bit
    torch.testing.assert_close(ens.history, eager.history, rtol=1e-2 if dtype == "bf16" else 1e-5, atol=0)


@pytest.mark.parametrize("name", ["OddSteps", "EvenSteps", "ByBatch", "Dropout"])
def test_a_custom_model_that_skips_or_draws_trains_alike_graphed_or_not(tmp_path, name):
    """A CUDA graph replays a step's kernels without running the forward's Python: a user's module
    that uses a parameter at some steps only (`training/skips.py`), or draws random numbers from
    each run's stream (dropout), must train under engine.graphs=auto exactly as eagerly (float64,
    to 1e-9), its steps no longer replayed once a skip or a draw was seen."""
    from tests.test_custom_hostile import HOSTILE

    if name == "Dropout":
        target = f"{Path(__file__).resolve().parent / 'random_net.py'}:Dropout"
    else:
        (tmp_path / "hostile.py").write_text(HOSTILE)
        target = f"{tmp_path / 'hostile.py'}:{name}"
    over = ["model=custom", f"model.target={target}", "width=16", *SMALL, "engine.device=cuda",
            "train.dtype=float64", "train.steps=12", "optim=adam"]
    runs = [Run(log2_lr=-6, seed=0), Run(log2_lr=-5, seed=1)]
    trained = {}
    for graphs in ("auto", "never"):
        ens = trained[graphs] = Ensemble(build.job(typed(*over, f"engine.graphs={graphs}")), runs)
        while not ens.finished:
            ens.step()
    if name != "ByBatch":  # a skip or a draw at the first step: never replayed from then on
        assert trained["auto"].graphed is None
    torch.testing.assert_close(trained["auto"].history, trained["never"].history, rtol=1e-9, atol=0)


# Adam's settings per run: on the CPU the compiled pass (`optim/along.c`) updates the tensors whose
# settings differ between runs, on a GPU PyTorch's operations do (`optim/along.py`), graphed or not
PER_RUN_ADAM = [Run(log2_lr=-8, seed=0, grid=(("optim.beta1", 0.5), ("optim.beta2", 0.99))),
                Run(log2_lr=-6, seed=0, grid=(("optim.beta1", 0.9), ("optim.beta2", 0.9))),
                Run(log2_lr=-6, seed=1, grid=(("optim.beta1", 0.95), ("optim.beta2", 0.999)))]


@pytest.mark.parametrize("param", ["standard", "modular"])
def test_per_run_adam_settings_on_cuda_equal_the_cpu_in_float64(param, cifar_root):
    """Each run its own beta1 and beta2: the GPU's step, eager and replayed as a CUDA graph, equals the
    CPU's to 1e-9 in float64 (standard: the update path; modular: the direction path)."""
    over = ["train.dtype=float64", "train.steps=20"]
    cpu = engine.train(build.job(config("mlp", param, "cpu", cifar_root, *over)), PER_RUN_ADAM)
    for graphs in ("always", "never"):
        gpu = engine.train(build.job(config("mlp", param, "cuda", cifar_root, *over, f"engine.graphs={graphs}")),
                           PER_RUN_ADAM)
        for a, b in zip(gpu, cpu):
            assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9), graphs
            assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9), graphs

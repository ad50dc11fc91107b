"""The engine computes what separate, plain PyTorch trainings would."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from lrtransfer.training import build
from lrtransfer.training import engine, memory
from lrtransfer.training.ensemble import Ensemble, apply_updates
from lrtransfer.training.runs import Run
from lrtransfer.training.build import model as build_model
from lrtransfer.training.build import optimizer as build_optimizer
from lrtransfer.training.schedule import lr_factor
from lrtransfer.training.build import parameterization as build_param
from tests.conftest import typed

SMALL = ["width=24", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu"]


def torch_mlp(cfg, seed: int, input_dim: int, output_dim: int) -> torch.nn.Sequential:
    """The reference: torch.nn's own MLP, initialised by torch's own code."""
    torch.manual_seed(seed)
    dims = [input_dim] + [cfg.width] * (cfg.depth - 1) + [output_dim]
    layers = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        layers.append(torch.nn.Linear(a, b))
        if i < len(dims) - 2:
            layers.append(torch.nn.ReLU())
    return torch.nn.Sequential(*layers)


def our_mlp(cfg, seeds, input_dim=32, output_dim=10):
    param = build_param(cfg)
    model = build_model(cfg, param, runs=len(seeds), input_shape=(input_dim,), output_dim=output_dim)
    param.initialize(model, seeds)
    return model, param


def test_standard_init_and_forward_equal_torch_nn():
    cfg = typed(*SMALL)
    model, _ = our_mlp(cfg, [3])
    ref = torch_mlp(cfg, 3, 32, 10)
    linears = [m for m in ref if isinstance(m, torch.nn.Linear)]
    for atom, lin in zip(model.atoms(), linears):
        torch.testing.assert_close(atom.weight[0], lin.weight.t(), rtol=0, atol=0)
        torch.testing.assert_close(atom.bias[0, 0], lin.bias, rtol=0, atol=0)
    x = torch.randn(5, 32)
    torch.testing.assert_close(model(x)[0], ref(x))


@pytest.mark.parametrize("optim, torch_opt", [("adam", "Adam"), ("sgd", "SGD")])
def test_optimizer_steps_equal_torch_optim(optim, torch_opt):
    """Our directions + SP updates reproduce torch.optim, in float64, over 20 steps."""
    cfg = typed(*SMALL, f"optim={optim}", "train.dtype=float64")
    lr = 2.0**-6
    model, param = our_mlp(cfg, [0])
    model.double()
    ref = torch_mlp(cfg, 0, 32, 10).double()
    kwargs = {"momentum": 0.9} if optim == "sgd" else {"eps": 1e-8}
    ref_opt = getattr(torch.optim, torch_opt)(ref.parameters(), lr=lr, **kwargs)
    slots = param.slots(model)
    opt = build_optimizer(cfg, slots)
    gen = torch.Generator().manual_seed(0)
    for _ in range(20):
        x = torch.randn(8, 32, generator=gen, dtype=torch.float64)
        y = torch.randint(0, 10, (8,), generator=gen)
        loss = torch.nn.functional.cross_entropy(model(x)[0], y)
        grads = torch.autograd.grad(loss, [s.tensor for s in slots])
        with torch.no_grad():
            for s, u in zip(slots, param.updates(slots, opt.directions(grads), torch.tensor([lr], dtype=torch.float64))):
                s.tensor.sub_(u)
        ref_opt.zero_grad()
        torch.nn.functional.cross_entropy(ref(x), y).backward()
        ref_opt.step()
    for atom, lin in zip(model.atoms(), [m for m in ref if isinstance(m, torch.nn.Linear)]):
        torch.testing.assert_close(atom.weight[0], lin.weight.t(), rtol=1e-10, atol=1e-12)


# Every parameterization, away from any width where it reduces to SP.
PARAMS = {
    "standard": [],
    "equalized": ["param=equalized"],
    "mup": ["param=mup", "param.base_width=8", "optim.weight_decay=0.01", "optim.decay_scaling=lr"],
    "modular": ["param=modular", "optim.weight_decay=0.01"],
    "modular-dualize": ["param=modular", "param.update=dualize"],
}


@pytest.mark.parametrize(
    "optim, param",
    [("adam", p) for p in PARAMS] + [("sgd", "standard"), ("sgd", "mup"), ("sgd", "modular")],
)
def test_batched_equals_one_run_at_a_time_in_float64(optim, param):
    over = [*SMALL, f"optim={optim}", *PARAMS[param], "train.dtype=float64", "train.steps=50", "n_seeds=2"]
    cfg = typed(*over)
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -7, -5)]
    batched = engine.train(build.job(cfg), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone, strict=True):
        assert (a.lr, a.seed) == (b.lr, b.seed)
        assert a.final_loss == pytest.approx(b.final_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)
        for la, lb in zip(a.history_loss, b.history_loss, strict=True):
            assert la == pytest.approx(lb, rel=1e-9)


def test_batched_equals_sequential_first_step_in_float32():
    over = [*SMALL, "train.steps=1", "train.history_points=1"]
    runs = [Run(log2_lr=e, seed=0) for e in (-9, -5)]
    a = engine.train(build.job(typed(*over)), runs)
    b = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for ra, rb in zip(a, b, strict=True):
        assert ra.initial_loss == pytest.approx(rb.initial_loss, rel=1e-6)  # the forward
        assert ra.eval_loss == pytest.approx(rb.eval_loss, rel=1e-5)  # after the one step


def test_a_diverging_run_is_recorded_and_does_not_touch_the_others():
    over = [*SMALL, "train.steps=40", "train.dtype=float64"]
    calm = [Run(log2_lr=-9, seed=0), Run(log2_lr=-7, seed=0)]
    wild = Run(log2_lr=8, seed=0)
    with_wild = engine.train(build.job(typed(*over)), [calm[0], wild, calm[1]])
    without = engine.train(build.job(typed(*over)), calm)
    res = with_wild[1]
    assert res.diverged and res.final_loss is None and res.eval_loss is None
    assert 0 <= res.diverged_step < 40
    assert res.history_step[-1] == res.diverged_step
    for a, b in zip([with_wild[0], with_wild[2]], without, strict=True):
        assert not a.diverged
        assert a.final_loss == pytest.approx(b.final_loss, rel=1e-12)


def test_schedules():
    assert [lr_factor("constant", s, 10) for s in (0, 9)] == [1.0, 1.0]
    assert lr_factor("linear", 0, 10) == 1.0 and lr_factor("linear", 5, 10) == pytest.approx(0.5)
    assert lr_factor("cosine", 5, 10) == pytest.approx(0.5) and lr_factor("cosine", 0, 10) == 1.0
    assert [lr_factor("cosine", s, 10, warmup=4) for s in range(4)] == [0.25, 0.5, 0.75, 1.0]
    assert lr_factor("linear", 4, 10, warmup=4) == 1.0
    assert lr_factor("linear", 9, 10) == pytest.approx(0.1)


@pytest.mark.parametrize("scaling", ["independent", "lr"])
def test_decoupled_weight_decay(scaling):
    """With a zero update, one step multiplies each run's weights by 1 - decay."""
    cfg = typed(*SMALL, "optim.weight_decay=0.1", f"optim.decay_scaling={scaling}", "train.dtype=float64")
    model, param = our_mlp(cfg, [0, 0])
    model.double()
    slots = param.slots(model)
    before = [s.tensor.clone() for s in slots]
    lr = torch.tensor([0.5, 0.0], dtype=torch.float64)  # run 1 is frozen
    decays = param.decays(slots, lr, 0.5, cfg.optim)
    apply_updates(slots, [torch.zeros_like(s.tensor) for s in slots], decays)
    expected = 1 - (0.1 * 0.5 if scaling == "independent" else 0.5 * 0.1 * 0.5)
    for s, w0 in zip(slots, before):
        torch.testing.assert_close(s.tensor[0], w0[0] * expected)
        torch.testing.assert_close(s.tensor[1], w0[1])


def test_device_selection():
    assert build.select_device("cpu").type == "cpu"
    assert build.select_device("auto").type == ("cuda" if torch.cuda.is_available() else "cpu")
    if not torch.cuda.is_available():
        with pytest.raises(build.DeviceError, match="CUDA is not available"):
            build.select_device("cuda")


def test_which_steps_replay_as_a_cuda_graph():
    """engine.graphs: auto graphs a CUDA step up to MAX_ELEMENTS trained numbers, always and never
    say so, and nothing is graphed on a CPU or where the step reads a value on the host."""
    from lrtransfer.training.graphs import MAX_ELEMENTS, use_graphs

    cuda, cpu = torch.device("cuda", 0), torch.device("cpu")
    assert use_graphs("auto", cuda, MAX_ELEMENTS, capturable=True)
    assert not use_graphs("auto", cuda, MAX_ELEMENTS + 1, capturable=True)
    assert use_graphs("always", cuda, 100 * MAX_ELEMENTS, capturable=True)
    assert not use_graphs("never", cuda, 1, capturable=True)
    assert not use_graphs("always", cuda, 1, capturable=False)
    assert not use_graphs("always", cpu, 1, capturable=True)
    for setting in ("auto", "always"):  # a CPU ensemble keeps its eager step
        assert Ensemble(build.job(typed(*SMALL, f"engine.graphs={setting}")), [Run(-8, 0)]).graphed is None


def test_the_default_memory_budget_is_4_gib_on_a_cpu():
    from lrtransfer.training.memory import budget

    assert budget(0, torch.device("cpu")) == 4 * 2**30
    assert budget(1.5, torch.device("cpu")) == 1.5 * 2**30


def test_chunked_ensembles_equal_one_ensemble():
    over = [*SMALL, "train.dtype=float64", "train.steps=20", "n_seeds=2"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -7, -5)]
    whole = engine.train(build.job(typed(*over)), runs)
    one_run = memory.footprint(build.job(typed(*over), torch.device("cpu")))
    budget = 1.5 * one_run.bytes_per_run / 2**30  # room for one run, not two
    for chunk in ("engine.chunk=4", f"engine.max_memory_gb={budget}"):  # 4+2 runs; 1 run each
        parts = engine.train(build.job(typed(*over, chunk)), runs)
        for a, b in zip(parts, whole):
            assert (a.lr, a.seed, a.diverged) == (b.lr, b.seed, b.diverged)
            assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
            assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)


def test_the_memory_budget_sets_the_chunk():
    """On a CPU as on a GPU: no cache bound (docs/performance.md, "Ensemble size")."""
    cpu = torch.device("cpu")
    fp = memory.footprint(build.job(typed("width=512"), cpu))
    hidden = 512 * 512
    assert hidden < fp.weights < 1.2 * hidden and fp.element == 4
    budget = 3.5 * fp.bytes_per_run / 2**30
    assert memory.chunk_size(build.job(typed("width=512", f"engine.max_memory_gb={budget}"), cpu), 11) == 3  # 3, 3, 3, 2
    assert memory.chunk_size(build.job(typed("width=1024"), cpu), 11) == 11  # 11 x 1024^2 x 5 floats: about 240 MB
    assert memory.chunk_size(build.job(typed("width=512", "engine.chunk=2"), cpu), 11) == 2
    assert memory.chunk_size(build.job(typed("width=512", "engine.batched=false"), cpu), 11) == 1


FAULTS = """
import resource, sys, torch
from lrtransfer.training.allocator import keep_freed_memory

def faults_per_step():  # a step's 64 MiB gradient, allocated, written and freed, as a step does
    for _ in range(20):  # the heap grows to what the steps need (a few blocks: alignment), then holds
        torch.empty(2**24).fill_(1.0)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(5):
        torch.empty(2**24).fill_(1.0)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 5

print(faults_per_step(), keep_freed_memory(), faults_per_step())
"""


def test_a_step_reuses_its_large_blocks_instead_of_mapping_them_afresh():
    """glibc maps every block over 32 MiB afresh and unmaps it on free: each step faults in all its
    pages again (16,384 for 64 MiB), unless the engine keeps freed memory (`allocator`): then,
    once the heap has grown to what the steps need, none. In a process of its own: the setting is
    process-wide, and the first reading needs the default."""
    out = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True).stdout.split()
    before, applied, after = float(out[0]), out[1] == "True", float(out[2])
    if not applied:
        pytest.skip("not glibc: the C library's own allocator is left as it is")
    assert before > 10_000 and after < 100, (before, after)


def test_a_job_gets_one_thread_unless_told_otherwise(monkeypatch):
    from lrtransfer.sweeps.job import thread_count

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("SLURM_CPUS_PER_TASK", raising=False)
    assert thread_count(0) == 1 and thread_count(3) == 3
    monkeypatch.setenv("SLURM_CPUS_PER_TASK", "4")
    assert thread_count(0) == 4
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert thread_count(0) == 2


def test_a_run_above_the_memory_budget_is_refused_before_training():
    """The sweep's planning calls check_fits on every job before any trains (test_bad_input covers the CLI)."""
    cpu = torch.device("cpu")
    need = memory.footprint(build.job(typed("width=512"), cpu)).bytes_per_run
    label = "width=512 depth=3 train.batch_size=64"
    with pytest.raises(memory.MemoryLimitError, match="width=512 depth=3 .* one run needs about"):
        memory.check_fits(build.job(typed("width=512", f"engine.max_memory_gb={0.9 * need / 2**30}"), cpu), label)
    memory.check_fits(build.job(typed("width=512", f"engine.max_memory_gb={1.1 * need / 2**30}"), cpu), label)


def test_opt_in_precisions():
    """bf16 autocast trains close to float32; TF32 changes nothing on a CPU."""
    over = [*SMALL, "train.steps=30"]
    runs = [Run(log2_lr=-7, seed=0)]
    (f32,) = engine.train(build.job(typed(*over)), runs)
    (tf32,) = engine.train(build.job(typed(*over, "train.dtype=tf32")), runs)
    (bf16,) = engine.train(build.job(typed(*over, "train.dtype=bf16_autocast")), runs)
    assert tf32.history_loss == f32.history_loss
    assert bf16.history_loss != f32.history_loss  # bfloat16 really ran
    assert bf16.final_loss == pytest.approx(f32.final_loss, rel=0.05)
    assert bf16.eval_loss == pytest.approx(f32.eval_loss, rel=0.05)


# ---------------------------------------------------------------- one optimizer pass per run
# Width 192: the hidden matrix's slice of a run (192 x 192) is past passes.PER_RUN_MIN, so it takes
# the fused pass per run; the other tensors take the whole-ensemble path.
ONE_PASS = {
    "adam": ["optim.weight_decay=0.01"],
    "adam-lr-decay": ["optim.weight_decay=0.01", "optim.decay_scaling=lr"],
    "mup": ["param=mup", "param.base_width=48", "optim.weight_decay=0.01", "optim.decay_scaling=lr"],
    "equalized": ["param=equalized"],
    "sgd": ["optim=sgd", "optim.weight_decay=0.01"],
    "sgd-nesterov": ["optim=sgd", "optim.nesterov=true"],
    "sgd-plain": ["optim=sgd", "optim.momentum=0"],
}


def direction_path(monkeypatch) -> None:
    """Make every rule look as if it owned its updates: the engine then takes the direction path."""
    from lrtransfer.options.param.base import Parameterization

    monkeypatch.setattr(Parameterization, "scales_directions", property(lambda self: False))


def trained_both_ways(monkeypatch, over, runs):
    one_pass = engine.train(build.job(typed(*over)), runs)
    with monkeypatch.context() as m:
        direction_path(m)
        return one_pass, engine.train(build.job(typed(*over)), runs)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("case", ONE_PASS)
def test_one_pass_per_run_equals_the_direction_path_bit_for_bit(monkeypatch, case, dtype):
    """Where each run's rate is a power of two (integer log2 LRs, a constant schedule,
    power-of-two multipliers: muP at width 4x its base), folding it into the fused kernel
    rounds exactly as scaling the direction does, decay and per-run weight decay included."""
    over = ["width=192", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu",
            "train.steps=20", f"train.dtype={dtype}", *ONE_PASS[case]]
    sgd = "optim=sgd" in over
    lrs = (-7, -5, -3) if sgd else (-11, -9, -7)
    runs = [Run(log2_lr=e, seed=0, grid=(("optim.weight_decay", wd),)) for e in lrs for wd in (0.0, 0.01)]
    cfg = typed(*over)
    ens = Ensemble(build.job(cfg), runs[:1])
    assert ens.fused and any(ens.opt._split)
    one_pass, directions = trained_both_ways(monkeypatch, over, runs)
    assert [vars(r) for r in one_pass] == [vars(r) for r in directions]
    assert not any(r.diverged for r in one_pass)


def test_one_pass_per_run_rounds_like_the_direction_path_elsewhere(monkeypatch):
    """A cosine schedule, fractional log2 LRs, muP at 3x its base width: the two paths round the
    rate's product differently (in the last bit), and stay within float64 rounding of each other."""
    over = ["width=192", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu", "train.steps=30",
            "train.dtype=float64", "train.schedule=cosine", "param=mup", "param.base_width=64", "optim.weight_decay=0.1"]
    runs = [Run(log2_lr=e, seed=0) for e in (-8.3, -6.6)]
    one_pass, directions = trained_both_ways(monkeypatch, over, runs)
    assert [r.history_loss for r in one_pass] != [r.history_loss for r in directions]  # the paths did differ
    for a, b in zip(one_pass, directions):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-12)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-12)


@pytest.mark.parametrize("param, optim, fused", [
    ("standard", "adam", True), ("mup", "sgd", True), ("equalized", "adam", True),
    ("modular", "adam", False), ("spectral", "adam", False), ("standard", "muon", False),
])
def test_only_rate_times_direction_updates_take_the_one_pass(param, optim, fused):
    """The modular norm and spectral map directions to updates of their own (`updates`); Muon
    orthogonalises: each keeps its own pass."""
    cfg = typed("width=24", "depth=3", f"param={param}", f"optim={optim}", "engine.device=cpu")
    assert Ensemble(build.job(cfg), [Run(log2_lr=-7, seed=0)]).fused == fused

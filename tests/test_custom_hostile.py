"""model=custom given modules that break the wrapper's assumptions: frozen parameters, parameters the
forward never uses or uses at some steps only, logits that cannot train, a module that exits. Each either trains as the module
says, or is refused in one line before any training."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from lrtransfer.errors import ConfigError
from lrtransfer.sweeps.checkpoint import FileCheckpoint
from lrtransfer.training import build, engine, memory, stop
from lrtransfer.training.engine import Run, data_seed
from tests.conftest import typed
from tests.test_custom import RUNS, SMALL, same, train

HOSTILE = '''
from collections import OrderedDict

import torch
from torch import nn

class Net(nn.Sequential):
    """Layers a, b, c, with ReLUs between them."""
    def __init__(self, width, input_shape, output_dim):
        layers = nn.Linear(input_shape[0], width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(), nn.Linear(width, output_dim)
        super().__init__(OrderedDict(zip(["a", "relu_a", "b", "relu_b", "c"], layers)))

class Frozen(Net):
    """A first layer the module freezes (random features): never trained."""
    def __init__(self, width, input_shape, output_dim):
        super().__init__(width, input_shape, output_dim)
        self.a.requires_grad_(False)

class AllFrozen(Net):
    def __init__(self, width, input_shape, output_dim):
        super().__init__(width, input_shape, output_dim)
        self.requires_grad_(False)

class Double(Net):
    def __init__(self, width, input_shape, output_dim):
        super().__init__(width, input_shape, output_dim)
        self.double()

class ExitsBuilt(Net):
    def __init__(self, width, input_shape, output_dim):
        raise SystemExit(0)

class Unused(Net):
    """A layer the forward never calls (b), as real models often hold."""
    def forward(self, x):
        return self.c(torch.relu(self.a(x)))

class OddSteps(Net):
    """b at every second forward (not the first): a branch taken by the step, which vmap runs."""
    calls, parity = 0, 0
    def forward(self, x):
        self.calls += 1
        h = torch.relu(self.a(x))
        if self.calls % 2 == self.parity:
            h = torch.relu(self.b(h))
        return self.c(h)

class EvenSteps(OddSteps):
    """b at the first forward, then at every second one: skipped after it was used."""
    parity = 1

class ByBatch(Net):
    """b where the batch's first input is positive: a branch the data takes (vmap cannot: one run at
    a time), so runs of different seeds take it at different steps."""
    def forward(self, x):
        h = torch.relu(self.a(x))
        if bool(x[0, 0] > 0):
            h = torch.relu(self.b(h))
        return self.c(h)

class IntLogits(Net):
    def forward(self, x):
        return super().forward(x).long()

class Detached(Net):
    def forward(self, x):
        return super().forward(x).detach()

class ExitsForward(Net):
    def forward(self, x):
        raise SystemExit(3)

class NoParameters(nn.Module):
    def __init__(self, width, input_shape, output_dim):
        super().__init__()
        self.n = output_dim
    def forward(self, x):
        return x[:, :self.n]
'''


@pytest.fixture
def hostile(tmp_path):
    path = tmp_path / "hostile.py"
    path.write_text(HOSTILE)
    return lambda name: ["model=custom", f"model.target={path}:{name}"]


def ensemble(*over, runs=RUNS[:2] + RUNS[3:5]):
    return engine.Ensemble(build.job(typed(*SMALL, *over)), runs)


def user_tensor(ens, name):
    """The (K, ...) tensor the ensemble holds under the user's parameter `name`: trained or frozen."""
    model = ens.model
    if name in model.frozen:
        return model.stacked.get_buffer(name.replace(".", "/"))
    return next(t for a in model.atoms() for n, t in a.trained() if a.user_names[n] == name)


@pytest.mark.parametrize("param", [[], ["param=mup", "param.base_width=8"], ["optim=sgd"], ["param=equalized"]])
def test_a_frozen_layer_is_never_trained(hostile, param):
    """requires_grad=False: held as a buffer is, bit for bit what the module built, under every
    parameterization and weight decay, while the layers after it move; out of every optimizer."""
    over = [*hostile("Frozen"), *param, "optim.weight_decay=0.1", "n_seeds=2"]
    ens = ensemble(*over)
    frozen = {n: user_tensor(ens, n).clone() for n in ("a.weight", "a.bias")}
    trained = user_tensor(ens, "b.weight").clone()
    assert all(id(s.tensor) != id(user_tensor(ens, "a.weight")) for s in ens.slots)
    for _ in range(4):
        ens.step()
    assert all(torch.equal(user_tensor(ens, n), v) for n, v in frozen.items())
    assert not torch.equal(user_tensor(ens, "b.weight"), trained)
    seeds = [r.seed for r in ens.runs]  # each run holds the module's own build under its seed
    first = {s: seeds.index(s) for s in (0, 1)}
    assert all(torch.equal(frozen["a.weight"][k], frozen["a.weight"][first[s]]) for k, s in enumerate(seeds))
    assert not torch.equal(frozen["a.weight"][first[0]], frozen["a.weight"][first[1]])
    assert "stacked.a/weight" in ens.state_dict()["buffers"]  # carried in checkpoints


def test_a_frozen_layer_trains_alike_batched_and_one_run_at_a_time(hostile):
    over = [*hostile("Frozen"), "n_seeds=2", "param=mup", "param.base_width=8"]
    same(train(*over), train(*over, "engine.batched=false"), rel=1e-9)


def test_inspect_shows_a_frozen_layer_as_not_trained(hostile, cli):
    code, out, err = cli("inspect", *hostile("Frozen"), "width=16")
    assert code == 0, err
    rows = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert "b.weight" in rows and "a.weight" not in rows and "a.bias" not in rows
    assert "note: frozen, not trained (requires_grad=False): a.weight, a.bias" in out


def test_a_module_with_nothing_to_train_is_refused(hostile):
    with pytest.raises(ConfigError, match=r"AllFrozen: every parameter has requires_grad=False \(a.weight, a.bias, "
                                          r"b.weight, \.\.\.\): nothing would be trained"):
        ensemble(*hostile("AllFrozen"))


@pytest.mark.parametrize("optim", ["adam", "sgd", "muon"])
@pytest.mark.parametrize("batched", ["true", "false"])
def test_a_parameter_the_forward_never_uses_trains_with_a_zero_gradient(hostile, optim, batched, capsys):
    """The engine's gradient of every trained tensor: one the forward never reaches gets zero, not
    torch's 'appears to not have been used in the graph', and stays as it started."""
    ens = ensemble(*hostile("Unused"), f"optim={optim}", f"engine.batched={batched}", "n_seeds=2",
                   "optim.weight_decay=0.1")  # no decay either, as torch skips a tensor with no gradient
    spare, used = user_tensor(ens, "b.weight").clone(), user_tensor(ens, "a.weight").clone()
    for _ in range(3):
        ens.step()
    assert torch.equal(user_tensor(ens, "b.weight"), spare)
    assert not torch.equal(user_tensor(ens, "a.weight"), used)
    assert bool(torch.isfinite(ens.history[:, :3]).all())
    assert ("its forward does not use b.weight, b.bias at its first step: a step that does not use a parameter skips "
            "it, as torch's optimizers skip one without a gradient (no update, no weight decay)") in capsys.readouterr().err


def test_unused_parameters_train_alike_batched_and_one_run_at_a_time(hostile):
    over = [*hostile("Unused"), "n_seeds=2"]
    same(train(*over), train(*over, "engine.batched=false"), rel=1e-9)


# ---------------------------------------------------------------- a parameter used at some steps only
OPTIMIZERS = {"adam": ["optim=adam"], "adamw": ["optim=adam", "optim.weight_decay=0.1", "optim.decay_scaling=lr"],
              "sgd": ["optim=sgd"], "nesterov": ["optim=sgd", "optim.nesterov=true"]}
STEPS = 12


def plain_loop(net, ens, k: int, start: dict) -> tuple[list[float], dict, list[set]]:
    """The reference: run k of `ens` alone, as a plain PyTorch loop trains it: `net` (a fresh module,
    given run k's tensors and buffers of `start`) on run k's batches, `zero_grad(set_to_none=True)`,
    `backward()`, and torch.optim's Adam, AdamW or SGD `step()`, which skip a parameter without a
    gradient. Its losses, its tensors and buffers at the end, and the parameters each step used."""
    net = net.double()
    with torch.no_grad():
        for n, t in [*net.named_parameters(), *net.named_buffers()]:
            t.copy_(start[n][k])
    o, lr = ens.optim, 2.0 ** ens.runs[k].log2_lr
    if o.name == "sgd":
        opt = torch.optim.SGD(net.parameters(), lr=lr, momentum=o.momentum, nesterov=o.nesterov)
    else:
        kind, decay = (torch.optim.AdamW, {"weight_decay": o.weight_decay}) if o.weight_decay else (torch.optim.Adam, {})
        b1, b2, eps = (float(x[k]) if isinstance(x, torch.Tensor) else x for x in (o.beta1, o.beta2, o.eps))  # per run
        opt = kind(net.parameters(), lr=lr, betas=(b1, b2), eps=eps, **decay)
    gen = torch.Generator().manual_seed(data_seed(ens.runs[k].seed))
    losses, used = [], []
    for _ in range(ens.steps):
        x, y = ens.task.sample(gen, 8)
        loss = ens.task.losses(net(x).unsqueeze(0), y)[0]
        opt.zero_grad(set_to_none=True)
        loss.backward()
        used.append({n for n, p in net.named_parameters() if p.grad is not None})
        opt.step()
        losses.append(loss.item())
    return losses, {n: t.detach() for n, t in [*net.named_parameters(), *net.named_buffers()]}, used


def held(ens) -> dict:
    """Every tensor and buffer of the user's module, by its name, as the ensemble holds it: (K, ...)."""
    model = ens.model
    out = {model.buffer_names[n]: b for n, b in model.stacked.named_buffers() if n in model.buffer_names}
    return out | {n: user_tensor(ens, n) for a in model.atoms() for n in map(a.user_names.get, dict(a.trained()))}


def trained_alike(ens, make) -> list[list[set]]:
    """Train `ens` (float64), then each run against its own plain loop of `make(seed)`, the module
    built: losses, tensors and buffers equal to 1e-12. The parameters each run used at each step."""
    start = {n: t.clone() for n, t in held(ens).items()}
    for _ in range(ens.steps):
        ens.step()
    pattern = []
    for k, run in enumerate(ens.runs):
        losses, tensors, used = plain_loop(make(run.seed), ens, k, start)
        assert ens.history[k].tolist() == pytest.approx(losses, rel=1e-12, abs=0)
        for n, t in tensors.items():
            torch.testing.assert_close(held(ens)[n][k], t, rtol=1e-12, atol=1e-13)
        pattern.append(used)
    return pattern


def trained_as_plain_loops(hostile, name: str, over: list[str], runs: list[Run]) -> list[list[bool]]:
    """Each run of one ensemble against its own plain loop (float64): losses and tensors equal to
    1e-12; which steps each run used b.weight."""
    ens = ensemble(*hostile(name), *over, "train.dtype=float64", f"train.steps={STEPS}", runs=runs)
    ens.model.net.calls = 0  # the branch counts the training forwards only
    path = hostile(name)[1].split("=", 1)[1].rsplit(":", 1)[0]
    spec = importlib.util.spec_from_file_location("hostile_ref", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    pattern = trained_alike(ens, lambda seed: getattr(module, name)(24, (32,), 10))
    return [["b.weight" in step for step in used] for used in pattern]


@pytest.mark.parametrize("optim", OPTIMIZERS)
@pytest.mark.parametrize("name", ["OddSteps", "EvenSteps", "ByBatch"])
def test_a_parameter_used_at_some_steps_trains_as_a_plain_torch_loop(hostile, name, optim):
    """A step whose forward does not use b skips b, as torch's optimizers skip a parameter without a
    gradient: no update, no weight decay, its moments or momentum kept, and Adam's bias correction
    at b's own step count. Unhandled, the engine moved b by its decaying moments at the steps it
    skipped, or stopped with torch's 'appears to not have been used in the graph'."""
    (used,) = trained_as_plain_loops(hostile, name, OPTIMIZERS[optim], [Run(log2_lr=-5, seed=0)])
    assert any(used) and not all(used)


def test_runs_that_use_a_parameter_at_different_steps_each_train_as_their_own_plain_loop(hostile):
    """One run at a time (the branch reads the data), two seeds' batches: each run skips b at its own
    steps; three LRs under vmap, where every run takes the branch at the same steps."""
    seeds = trained_as_plain_loops(hostile, "ByBatch", OPTIMIZERS["adamw"],
                                   [Run(log2_lr=-6, seed=0), Run(log2_lr=-5, seed=1), Run(log2_lr=-5, seed=0)])
    assert seeds[0] != seeds[1] and seeds[0] == seeds[2]
    trained_as_plain_loops(hostile, "OddSteps", OPTIMIZERS["sgd"], [Run(log2_lr=e, seed=0) for e in (-7, -5, -4)])


def test_runs_with_their_own_betas_skip_a_parameter_as_their_own_plain_loops(hostile):
    """Per-run beta1, beta2 and epsilon (grid.optim.*): the skipped steps' update takes each run's own."""
    runs = [Run(log2_lr=-5, seed=0, grid=(("optim.beta2", b),)) for b in (0.5, 0.999)]
    trained_as_plain_loops(hostile, "OddSteps", OPTIMIZERS["adamw"], runs)
    runs = [Run(log2_lr=-5, seed=0, grid=(("optim.beta1", b),)) for b in (0.3, 0.9)]
    trained_as_plain_loops(hostile, "OddSteps", OPTIMIZERS["adam"], runs)


@pytest.mark.parametrize("name", ["OddSteps", "ByBatch"])
def test_a_parameter_used_at_some_steps_trains_alike_batched_and_one_run_at_a_time_under_mup(hostile, name):
    """muP's per-tensor LRs, epsilons and decays (no plain loop has them) on the steps that use b."""
    over = [*hostile(name), "n_seeds=2", "param=mup", "param.base_width=8", "optim.weight_decay=0.01",
            "optim.decay_scaling=lr"]
    same(train(*over), train(*over, "engine.batched=false"), rel=1e-9)


@pytest.mark.parametrize("over, says", [
    (["optim=muon"], "which optim=muon cannot skip for a step as torch's optimizers skip a parameter without a "
                     "gradient; use optim=adam or sgd, or a forward that uses it at every step (or never)"),
    (["param=spectral"], "which param=spectral cannot skip for a step as torch's optimizers skip a parameter without "
                         "a gradient; use param=standard, mup, equalized or completep"),
])
@pytest.mark.parametrize("name, when", [("OddSteps", "used at step 2, skipped before"),
                                        ("EvenSteps", "skipped at step 2, used before")])
def test_what_cannot_skip_a_parameter_for_a_step_refuses_it_in_one_line(hostile, over, says, name, when):
    """Muon, the spectral condition: no step that would train b otherwise than a plain loop; a
    parameter the forward never uses still trains under them (above)."""
    ens = ensemble(*hostile(name), *over)
    with pytest.raises(ConfigError) as e:
        for _ in range(2):
            ens.step()
    assert str(e.value).startswith(f"model.target={hostile(name)[1].split('=', 1)[1]} uses b.weight at some steps and "
                                   f"not at others ({when}), {says}")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("target, saved", [("ByBatch", "uses"), ("Dropout", "streams")])
def test_a_job_whose_runs_skip_or_draw_resumes_exactly(hostile, tmp_path, monkeypatch, target, saved):
    """The steps each run used each tensor, and each run's stream of random draws, go into the
    checkpoint: a resumed job's runs end as an uninterrupted job's, bit for bit; a saved count past
    the steps done is refused as damage."""
    cfg = typed(*SMALL, *(hostile(target) if target == "ByBatch" else RANDOM), "train.steps=40")
    runs = [Run(log2_lr=-6, seed=0), Run(log2_lr=-5, seed=1)]
    reference = [vars(r) for r in engine.train(build.job(cfg), runs)]
    ckpt = FileCheckpoint(tmp_path / "checkpoint.pt", interval_s=1e-9)

    def stop_midway(n):
        if n and ckpt.path.exists():
            stop.request()

    monkeypatch.setattr(stop, "_requested", False)
    with pytest.raises(engine.Interrupted):
        engine.train(build.job(cfg), runs, progress=stop_midway, checkpoint=ckpt)
    monkeypatch.setattr(stop, "_requested", False)
    state = torch.load(ckpt.path, weights_only=True)
    assert 0 < state["ensemble"]["step_index"] < 40 and state["ensemble"][saved] is not None
    assert [vars(r) for r in engine.train(build.job(cfg), runs, checkpoint=ckpt)] == reference

    state["ensemble"][saved] = state["ensemble"][saved][:, :5] if saved == "streams" else state["ensemble"][saved] + 1000
    with pytest.raises(engine.DamagedState, match=saved):
        engine.Ensemble(build.job(cfg), runs).load_state_dict(state["ensemble"])


# ---------------------------------------------------------------- random draws in the forward
RANDOM = ["model=custom", f"model.target={Path(__file__).parent / 'random_net.py'}:Dropout"]


@pytest.mark.parametrize("batched", ["true", "false"])
@pytest.mark.parametrize("runs", [[Run(log2_lr=-6, seed=0), Run(log2_lr=-5, seed=1), Run(log2_lr=-5, seed=0)],
                                  [Run(log2_lr=-6, seed=3), Run(log2_lr=-5, seed=3)]], ids=["two seeds", "one seed"])
def test_dropout_draws_each_runs_masks_as_a_plain_loop_seeded_with_its_seed(runs, batched):
    """Each run's dropout masks (and so its BatchNorm statistics) are those of a plain loop that calls
    torch.manual_seed(seed) and then builds the module: batched (the runs of each seed under vmap at
    once) or one at a time. Before, every run drew from torch's global generator, wherever the process
    had left it: no run repeated, and none was its plain loop's."""
    from tests.random_net import Dropout

    def make(seed):
        torch.manual_seed(seed)
        return Dropout(24, (32,), 10)

    state = torch.get_rng_state()
    ens = ensemble(*RANDOM, f"engine.batched={batched}", "optim=adam", "train.dtype=float64", f"train.steps={STEPS}",
                   runs=runs)
    trained_alike(ens, make)
    assert ens.model.random
    torch.set_rng_state(state)


@pytest.mark.parametrize("batched", ["true", "false"])
def test_the_held_out_loss_is_scored_in_eval_mode_as_a_plain_loop_scores_it(batched):
    """Held-out data is scored with the module in eval mode (no dropout, BatchNorm's running statistics),
    as nanoGPT's estimate_loss and transformers' Trainer score it; each run as its own plain loop's module
    after its training, and the buffers left as training left them. Before, it was scored in training
    mode: dropout on, and BatchNorm normalising each held-out chunk by its own statistics."""
    from tests.random_net import Dropout

    def make(seed):
        torch.manual_seed(seed)
        return Dropout(24, (32,), 10)

    state = torch.get_rng_state()
    runs = [Run(log2_lr=-6, seed=0), Run(log2_lr=-5, seed=1)]
    ens = ensemble(*RANDOM, f"engine.batched={batched}", "optim=adam", "train.dtype=float64",
                   f"train.steps={STEPS}", runs=runs)
    start = {n: t.clone() for n, t in held(ens).items()}
    for _ in range(ens.steps):
        ens.step()
    trained = {n: t.clone() for n, t in held(ens).items()}
    results = ens.results()
    x, y = ens.task.eval_set()
    for k, run in enumerate(runs):
        net = make(run.seed).double()
        with torch.no_grad():
            for n, t in [*net.named_parameters(), *net.named_buffers()]:
                t.copy_(trained[n][k])
            want = ens.task.losses(net.eval()(x).unsqueeze(0), y)[0].item()
        assert results[k].eval_loss == pytest.approx(want, rel=1e-12, abs=0)
    for n, t in held(ens).items():  # scoring changed nothing training keeps
        assert torch.equal(t, trained[n]), n
    assert ens.model.training and any(not torch.equal(start[n], trained[n]) for n in start)
    torch.set_rng_state(state)


@pytest.mark.parametrize("batched", ["true", "false"])
def test_a_forward_that_first_draws_after_its_first_step_stops_in_one_line(batched):
    """Its first step showed no draw, so its runs were not given streams: it stops at the step that draws,
    rather than draw every run's masks from wherever torch's global generator is."""
    ens = ensemble(RANDOM[0], RANDOM[1].replace(":Dropout", ":LateDropout"), f"engine.batched={batched}")
    ens.step()
    with pytest.raises(ConfigError) as e:
        ens.step()
    assert str(e.value) == (f"{RANDOM[1].replace(':Dropout', ':LateDropout')}: its forward draws random numbers at "
                            "some steps and not at its first, so its runs' draws cannot each follow their own seed; "
                            "draw them at every step (dropout of rate 0 draws none)")


def test_a_module_that_cannot_be_built_on_the_meta_device_trains_as_a_plain_loop():
    """torch's orthogonal parametrization reads its weight as it is registered, which the meta device
    (where the roles are read at twice the width, and a sweep checks every job before training) cannot:
    such a module is built there on the CPU. It was refused: 'raised when built (width=48 depth=3):
    RuntimeError: Tensor.item() cannot be called on meta tensors'."""
    from tests.parametrized_net import Orthogonal

    over = ["model=custom", f"model.target={Path(__file__).parent / 'parametrized_net.py'}:Orthogonal"]
    memory.check_fits(build.job(typed(*SMALL, *over)), "here")
    build.check(build.job(typed(*SMALL, *over)))

    def make(seed):
        torch.manual_seed(seed)
        return Orthogonal(24, (32,), 10)

    trained_alike(ensemble(*over, "train.dtype=float64", f"train.steps={STEPS}"), make)


@pytest.mark.parametrize("name, says", [
    ("IntLogits", "IntLogits gives logits of dtype int64; logits must be floating point"),
    ("Detached", "Detached gives logits that no trained parameter reaches"),
    ("ExitsForward", "ExitsForward: its forward raised SystemExit: 3"),
    ("ExitsBuilt", r"ExitsBuilt raised when built \(width=24 depth=3\): SystemExit: 0"),
    ("NoParameters", r"NoParameters: no parameter grows with width \(it has no parameters\)$"),
])
def test_a_module_that_cannot_train_is_refused_at_the_probe(hostile, name, says):
    """The meta-device forward a sweep runs before any job (`memory.check_fits`) refuses it in one line."""
    with pytest.raises(ConfigError, match=says) as e:
        memory.check_fits(build.job(typed(*SMALL, *hostile(name))), "here")
    assert "\n" not in str(e.value)


@pytest.mark.parametrize("name", ["ExitsForward", "ExitsBuilt"])
def test_a_module_that_exits_stops_the_sweep_with_one_line(hostile, name, cli, tmp_path):
    code, out, err = cli("sweep", *hostile(name), "width=16", "train.steps=20", f"results_dir={tmp_path / 'r'}")
    assert code == 2 and "SystemExit" in err and f"{name}" in err, (code, out, err)
    assert not list((tmp_path / "r").rglob("*.json"))


def test_a_module_that_makes_itself_float64_trains_in_the_jobs_dtype(hostile):
    ens = ensemble(*hostile("Double"), "train.dtype=float32")
    ens.step()
    assert {s.tensor.dtype for s in ens.slots} == {torch.float32} and bool(torch.isfinite(ens.history[:, 0]).all())

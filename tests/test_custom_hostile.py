"""model=custom given modules that break the wrapper's assumptions: frozen parameters, parameters the
forward never uses, logits that cannot train, a module that exits. Each either trains as the module
says, or is refused in one line before any training."""

from __future__ import annotations

import pytest
import torch

from lrtransfer.errors import ConfigError
from lrtransfer.training import build, engine, memory
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
    assert "its forward does not use b.weight, b.bias: a zero gradient and no weight decay" in capsys.readouterr().err


def test_unused_parameters_train_alike_batched_and_one_run_at_a_time(hostile):
    over = [*hostile("Unused"), "n_seeds=2"]
    same(train(*over), train(*over, "engine.batched=false"), rel=1e-9)


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

"""model=custom: a user's nn.Module trains exactly as the built-in model of the same shape,
its roles are read off shapes, and a module vmap cannot run still trains (one run at a time)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from lrtransfer.training import build, engine
from lrtransfer.training.engine import Run
from lrtransfer.nn import FIXED, HIDDEN, INPUT, OUTPUT, VECTOR
from lrtransfer.store import job_id
from tests.conftest import TINY, compose, lrtransfer_cmd, typed

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "mynets.py"
SMALL = ["width=24", "depth=3", "train.batch_size=8", "data.eval_size=32", "engine.device=cpu",
         "train.dtype=float64", "train.steps=30"]
CUSTOM = ["model=custom", f"model.target={EXAMPLE}:build"]
# PyTorch's init drawn by lrtransfer, atom by atom, as for the built-in models (model.init=own: the
# module's own draws, `test_its_own_init_is_the_builtin_mlps_under_standard`)
TORCH_INIT = [*CUSTOM, "model.init=torch"]
PARAMS = {
    "standard": [],
    "equalized": ["param=equalized"],
    "mup": ["param=mup", "param.base_width=8", "optim.weight_decay=0.01", "optim.decay_scaling=lr"],
    # the power estimate of a norm starts from vectors in the storage layout, which a user's
    # nn.Linear transposes: to the digit only with the exact norm
    "spectral": ["param=spectral", "param.norm_estimate=exact"],
}
RUNS = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -7, -5)]


def train(*over, runs=RUNS):
    return engine.train(build.job(typed(*SMALL, *over)), runs)


def same(a, b, rel):
    for ra, rb in zip(a, b, strict=True):
        assert (ra.lr, ra.seed, ra.diverged) == (rb.lr, rb.seed, rb.diverged)
        assert ra.final_loss == pytest.approx(rb.final_loss, rel=rel)
        assert ra.eval_loss == pytest.approx(rb.eval_loss, rel=rel)
        for la, lb in zip(ra.history_loss, rb.history_loss, strict=True):
            assert la == pytest.approx(lb, rel=rel)


@pytest.mark.parametrize("optim, param", [("adam", p) for p in PARAMS] + [("sgd", "mup")]
                         + [("muon", p) for p in ("standard", "mup", "spectral")])
@pytest.mark.parametrize("batched", [True, False])
def test_a_plain_sequential_trains_as_the_builtin_mlp(optim, param, batched):
    """nn.Sequential(Linear, ReLU, ...) given as model.target: the same init (the same draws
    per atom in forward order), the same forward multipliers folded into the tensors, the
    same per-tensor LRs: the same losses as model=mlp, batched and one run at a time."""
    over = [f"optim={optim}", *PARAMS[param], "n_seeds=2", f"engine.batched={str(batched).lower()}"]
    ours = train(*TORCH_INIT, *over)
    theirs = train(*over)
    assert not any(r.diverged for r in theirs[:2])  # the comparison sees trained runs
    same(ours, theirs, rel=1e-6)
    assert any(r.final_loss != pytest.approx(r.initial_loss, rel=1e-3) for r in ours)  # it did train


def test_its_own_init_is_the_builtin_mlps_under_standard():
    """nn.Linear's own init is PyTorch's, and the module built under the run's seed draws it in the
    order lrtransfer does: model.init=own trains the built-in MLP's runs, loss for loss."""
    same(train(*CUSTOM), train(), rel=1e-12)


def test_one_seed_shares_its_batch_across_runs():
    """One seed: x is (B, ...) for every run (vmap in_dims None), not (K, B, ...)."""
    runs = [Run(log2_lr=e, seed=3) for e in (-9, -7, -5)]
    same(train(*TORCH_INIT, "param=mup", "param.base_width=8", runs=runs), train("param=mup", "param.base_width=8", runs=runs),
         rel=1e-6)


def model_of(*over, input_shape=(32,), output_dim=10, runs=1):
    cfg = typed(*SMALL, *over)
    param = build.parameterization(cfg)
    return param, build.model(cfg, param, runs=runs, input_shape=input_shape, output_dim=output_dim)


def test_roles_are_read_off_shapes():
    _, net = model_of("model=custom", f"model.target={EXAMPLE}:LayerNormMLP", "depth=4")
    roles = {(a.path or a.user_names.get("tensor"), a.kind): a.role for a in net.atoms()}
    assert roles == {
        ("embed", "linear"): INPUT,
        ("blocks.0.0", "gain"): HIDDEN, ("blocks.0.1", "linear"): HIDDEN,
        ("blocks.1.0", "gain"): HIDDEN, ("blocks.1.1", "linear"): HIDDEN,
        ("scale", "tensor"): VECTOR,
        ("head", "linear"): OUTPUT,
    }
    assert [a.tag for a in net.atoms()][-1] == "readout"
    fan = {a.path: (a.fan_in, a.fan_out) for a in net.atoms() if a.kind == "linear"}
    assert fan == {"embed": (32, 24), "blocks.0.1": (24, 24), "blocks.1.1": (24, 24), "head": (24, 10)}


MODELS = '''
import torch
from torch import nn

class Branchy(nn.Module):
    """Control flow that reads values: vmap cannot run it."""
    def __init__(self, width, output_dim, input_shape):
        super().__init__()
        self.a = nn.Linear(input_shape[0], width)
        self.b = nn.Linear(width, output_dim)
    def forward(self, x):
        h = torch.relu(self.a(x))
        if float(h.detach().mean()) > 1e9:
            h = h * 0
        return self.b(h)

def batchnorm(width, input_shape, output_dim):
    return nn.Sequential(nn.Linear(input_shape[0], width), nn.BatchNorm1d(width), nn.ReLU(),
                         nn.Linear(width, width), nn.ReLU(), nn.Linear(width, 4), nn.Linear(4, output_dim))

def tied(width, input_shape, output_dim):
    emb = nn.Embedding(output_dim, width)
    head = nn.Linear(width, output_dim, bias=False)
    head.weight = emb.weight
    return nn.Sequential(emb, nn.ReLU(), head)

def fixed_scale(width, input_shape, output_dim):
    """A trained tensor its own init sets the same under every seed (a ramp), beside drawn layers."""
    net = nn.Sequential(nn.Linear(input_shape[0], width), nn.ReLU(), nn.Linear(width, output_dim))
    net.ramp = nn.Parameter(torch.linspace(0.5, 1.5, width))
    return net

class Attn(nn.Module):
    def __init__(self, width, input_shape, output_dim, heads=1):
        super().__init__()
        self.inp = nn.Linear(input_shape[0], width)
        self.att = nn.MultiheadAttention(width, 2, batch_first=True)
        self.more = nn.ModuleList([nn.MultiheadAttention(width, 2, batch_first=True) for _ in range(heads - 1)])
        self.out = nn.Linear(width, output_dim)
    def forward(self, x):
        h = self.inp(x).unsqueeze(1)
        for att in [self.att, *self.more]:
            h = att(h, h, h)[0]
        return self.out(h[:, 0])
'''


@pytest.fixture
def models(tmp_path):
    path = tmp_path / "models.py"
    path.write_text(MODELS)
    return path


def test_a_module_vmap_cannot_run_goes_one_run_at_a_time(models, capsys):
    over = ["model=custom", f"model.target={models}:Branchy", "n_seeds=2"]
    batched = train(*over)
    assert "vmap cannot run it (it stops at .item() (a tensor read as a Python number))" in capsys.readouterr().err
    same(batched, train(*over, "engine.batched=false"), rel=1e-9)


def test_a_tensor_its_own_init_fixes_is_kept_and_said(models, capsys):
    """A deterministic own init of one tensor (a ramp) is the model's choice: every run starts it alike,
    a warning says so; the drawn layers still differ between seeds."""
    param, net = model_of("model=custom", f"model.target={models}:fixed_scale", runs=2)
    param.initialize(net, [0, 1])
    assert "its own init gives ramp the same values under every seed" in capsys.readouterr().err
    ramp = next(t for a in net.atoms() for n, t in a.trained() if a.user_names[n] == "ramp")
    assert torch.equal(ramp[0], torch.linspace(0.5, 1.5, 24)) and torch.equal(ramp[0], ramp[1])
    first = next(a for a in net.atoms() if a.path == "0").weight
    assert not torch.equal(first[0], first[1])


def test_buffers_are_stacked_per_run(models):
    """BatchNorm's running statistics, updated in place under vmap, stay each run's own; a
    4-unit layer after the output layer is fixed, and the readout is the last output weight."""
    over = ["model=custom", f"model.target={models}:batchnorm", "n_seeds=2", "param=mup", "param.base_width=8"]
    same(train(*over), train(*over, "engine.batched=false"), rel=1e-9)
    _, net = model_of(*over, runs=2)
    roles = [(a.kind, a.role, a.tag) for a in net.atoms()]
    assert roles == [("linear", INPUT, None), ("gain", HIDDEN, None), ("linear", HIDDEN, None),
                     ("linear", OUTPUT, "readout"), ("linear", FIXED, None)]
    ens = engine.Ensemble(build.job(typed(*SMALL, *over)), RUNS[:2] + RUNS[3:5])
    ens.step()
    mean = dict(net.stacked.named_buffers())  # names only
    assert "1/running_mean" in mean
    stats = dict(ens.model.stacked.named_buffers())["1/running_mean"]  # (K, width)
    assert stats.shape == (4, 24) and not torch.equal(stats[0], stats[2])  # seeds 0 and 1 saw other batches


@pytest.mark.parametrize("named", [[], ["model.readout=0.weight"], ["model.readout=2.weight"]])
def test_tied_weights_stay_tied(models, named):
    """An embedding whose table the head reuses is one atom with an embedding's role; its
    readout use is a tensorless atom carrying the readout's multiplier (found, or named by either name)."""
    param, net = model_of("model=custom", f"model.target={models}:tied", *named, "data=text", "param=mup",
                          "param.base_width=8", input_shape=(8,), output_dim=16)
    atom, use = list(net.atoms())
    assert atom.kind == "embedding" and atom.role == INPUT and atom.tied is use
    assert (use.role, use.tag, use.name, list(use.trained())) == (OUTPUT, "readout", "2.weight", [])
    assert [s.tensor for s in param.slots(net)] == [atom.weight]
    assert (atom.weight_mult, use.weight_mult) == (1.0, 8 / 24)
    y = net(torch.randint(0, 16, (5, 8)))
    assert y.shape == (1, 5, 8, 16)


def test_the_job_id_follows_the_file_content(tmp_path):
    path = tmp_path / "nets.py"
    path.write_text(EXAMPLE.read_text())
    over = ["model=custom", f"model.target={path}:build"]
    before = job_id(compose(*over))
    assert job_id(compose(*over)) == before
    path.write_text(EXAMPLE.read_text() + "\n# edited\n")
    assert job_id(compose(*over)) != before
    assert job_id(compose(*over[:1], f"model.target={path}:LayerNormMLP")) != job_id(compose(*over))


TARGET = """
from torch import nn
import helpers


def build(width, depth, input_shape, output_dim):
    return nn.Sequential(nn.Linear(input_shape[0], width), helpers.act(), nn.Linear(width, output_dim))
"""
HELPERS = """
from torch import nn


def act():
    return nn.ReLU()
"""
CONFIG = """
from dataclasses import dataclass


@dataclass
class NetConfig:
    hidden: int = 8
    dropout: float = 0.0
"""
CONFIGURED = """
from torch import nn


class Net(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.a, self.b = nn.Linear(32, config.hidden), nn.Linear(config.hidden, 10)
        self.drop = nn.Dropout(config.dropout)

    def forward(self, x):
        return self.b(self.drop(self.a(x)))
"""


def test_the_job_id_follows_the_files_the_target_imports(tmp_path, monkeypatch):
    """Issue 40, case 2: a local module the target imports is part of its identity, by content:
    editing it recomputes the jobs, moving it (beside the target -> the working folder) does not."""
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "nets.py").write_text(TARGET)
    (tmp_path / "a" / "helpers.py").write_text(HELPERS)
    monkeypatch.chdir(tmp_path)
    over = ["model=custom", f"model.target={tmp_path / 'a' / 'nets.py'}:build"]
    before = job_id(compose(*over))
    (tmp_path / "a" / "helpers.py").rename(tmp_path / "helpers.py")  # moved, unchanged
    assert job_id(compose(*over)) == before
    (tmp_path / "helpers.py").write_text(HELPERS.replace("ReLU", "GELU"))  # a different model
    assert job_id(compose(*over)) != before


def test_the_job_id_follows_the_config_classs_file(tmp_path):
    """Issue 40, case 2: model.config in a file of its own; a changed default is a different model."""
    (tmp_path / "cfg.py").write_text(CONFIG)
    (tmp_path / "net.py").write_text(CONFIGURED)
    over = ["model=custom", f"model.target={tmp_path / 'net.py'}:Net", f"model.config={tmp_path / 'cfg.py'}:NetConfig",
            "model.width_key=hidden"]
    before = job_id(compose(*over))
    assert job_id(compose(*over)) == before
    (tmp_path / "cfg.py").write_text(CONFIG.replace("dropout: float = 0.0", "dropout: float = 0.5"))
    assert job_id(compose(*over)) != before


def test_a_package_modules_relative_imports_count_and_nothing_runs(tmp_path, monkeypatch):
    """A module target (`mypkg.nets:build`) imports its package's other modules relatively; they are
    read, never run, to find them (a module that would leave a marker if run leaves none)."""
    pkg = tmp_path / "mypkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(TARGET.replace("import helpers", "from . import helpers\nfrom .marker import *"))
    (pkg / "helpers.py").write_text(HELPERS)
    (pkg / "marker.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    over = ["model=custom", "model.target=mypkg.nets:build"]
    before = job_id(compose(*over))
    assert not (tmp_path / "ran").exists()
    (pkg / "helpers.py").write_text(HELPERS.replace("ReLU", "GELU"))
    assert job_id(compose(*over)) != before


def test_modular_is_refused_in_one_line():
    from lrtransfer.options.schema import ConfigError

    with pytest.raises(ConfigError, match="param=modular needs the model's tree of modules.*that work: completep, equalized, mup, spectral, standard"):
        typed(*CUSTOM, "param=modular")


def test_inspect_shows_roles_and_warns_of_attention_under_mup(models, cli):
    code, out, err = cli("inspect", "model=custom", f"model.target={models}:Attn", "param=mup", "width=16,32")
    assert code == 0, err
    assert "muP's 1/d attention scale cannot be applied from outside" in out + err
    assert "att.in_proj_weight" in out and "out.weight" in out
    assert "output (readout)" in out
    code, out, err = cli("inspect", "model=custom", f"model.target={models}:Attn", "param=standard")
    assert code == 0 and "attention scale" not in out + err
    code, out, err = cli("inspect", "model=custom", f"model.target={models}:Attn", "model.kwargs={heads: 4}", "param=mup",
                         "width=16")
    assert code == 0 and "warning: att (MultiheadAttention), more.0 (MultiheadAttention), more.1 (MultiheadAttention), " \
        "... computes attention" in out  # 4 modules: the first 3 named


def test_kwargs_reach_the_target():
    _, net = model_of("model=custom", f"model.target={EXAMPLE}:LayerNormMLP", "model.kwargs={dropout: 0.25}", "depth=4")
    assert [m.p for m in net.net.modules() if isinstance(m, torch.nn.Dropout)] == [0.25, 0.25]


def test_buffers_are_saved_in_checkpoints(models):
    """BatchNorm's running statistics change as it trains: a checkpoint keeps them, so an
    ensemble resumed from one ends with the statistics of an uninterrupted one, bit for bit."""
    built = build.job(typed(*SMALL, "model=custom", f"model.target={models}:batchnorm", "n_seeds=2"))
    runs = RUNS[:2] + RUNS[3:5]
    whole, half = engine.Ensemble(built, runs), engine.Ensemble(built, runs)
    for _ in range(6):
        whole.step()
    for _ in range(3):
        half.step()
    state = half.state_dict()
    assert "stacked.1/running_mean" in state["buffers"] and "weight_mult" not in str(list(state["buffers"]))
    resumed = engine.Ensemble(built, runs)
    resumed.load_state_dict(state)
    for _ in range(3):
        resumed.step()
    ours, theirs = dict(resumed.model.named_buffers()), dict(whole.model.named_buffers())
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[n], theirs[n]) for n in ours)
    assert not torch.equal(theirs["stacked.1/running_mean"], engine.Ensemble(built, runs).model.stacked.get_buffer("1/running_mean"))


def test_a_package_in_the_folder_the_sweep_runs_from_is_found(tmp_path):
    """`model.target=mypkg.nets:build` run from the folder mypkg sits in, as `python -m` would find
    it: the `lrtransfer` command itself does not put that folder on the path."""
    pkg = tmp_path / "herepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "nets.py").write_text(TARGET.replace("import helpers\n", "").replace("helpers.act()", "nn.ReLU()"))
    done = subprocess.run(lrtransfer_cmd() + ["sweep", "--plan", "model=custom", "model.target=herepkg.nets:build",
                                              "width=16,32", f"results_dir={tmp_path / 'r'}"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0 and "2 job(s)" in done.stdout, (done.stdout, done.stderr)


def test_a_target_file_imports_the_module_beside_it_and_trains(tmp_path):
    """`model.target=mod2.py:build` whose mod2.py does `import helper2` (and a config file doing the
    same) failed with ModuleNotFoundError unless PYTHONPATH named the folder: Python puts a script's
    folder on the path, and lrtransfer now does the same while importing the file. Trained in a
    fresh process run from another folder, and the job's id follows the sibling's content."""
    models = tmp_path / "models"
    models.mkdir()
    (models / "mod2.py").write_text(TARGET.replace("import helpers", "import helper2 as helpers"))
    (models / "helper2.py").write_text(HELPERS)
    (models / "cfg2.py").write_text("import defaults2\n" + CONFIG.replace("hidden: int = 8", "hidden: int = defaults2.HIDDEN"))
    (models / "defaults2.py").write_text("HIDDEN = 8\n")
    (models / "net2.py").write_text(CONFIGURED)
    (tmp_path / "elsewhere").mkdir()
    targets = [[f"model.target={models / 'mod2.py'}:build"],
               [f"model.target={models / 'net2.py'}:Net", f"model.config={models / 'cfg2.py'}:NetConfig",
                "model.width_key=hidden"]]
    for i, target in enumerate(targets):
        done = subprocess.run(lrtransfer_cmd() + ["sweep", "model=custom", *target, *TINY, "width=16",
                                                  f"results_dir={tmp_path / 'r'}", f"name=s{i}"],
                              cwd=tmp_path / "elsewhere", capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, (done.stdout, done.stderr)
        records = [json.loads(p.read_text()) for p in (tmp_path / "r" / f"s{i}").glob("*/record.json")]
        assert len(records) == 1 and records[0]["status"] == "complete"
        assert all(run["final_loss"] is not None for run in records[0]["runs"])
    from lrtransfer.options.model.target import load

    before = sys.path.copy()
    assert callable(load(f"{models / 'mod2.py'}:build"))  # in this process too
    assert sys.path == before and "helper2" in sys.modules  # the folder was on the path while the file imported
    del sys.modules["helper2"]
    over = ["model=custom", *targets[0]]
    first = job_id(compose(*over))
    (models / "helper2.py").write_text(HELPERS.replace("ReLU", "GELU"))
    assert job_id(compose(*over)) != first

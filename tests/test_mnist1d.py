"""MNIST-1D (generated offline, cached as plain arrays) and the 1-D conv net of the notes."""

from __future__ import annotations

import json
import random
import socket
import sys

import numpy as np
import pytest
import torch

from lrtransfer.training import build, engine
from lrtransfer.options.data import ensure_files
from lrtransfer.options.data import mnist1d as m1d
from lrtransfer.options.data.formats import DataError
from lrtransfer.training.engine import Run
from lrtransfer.nn import Conv, Linear
from lrtransfer.options.param.modular import PerTap, Spectral
from lrtransfer.store import job_id
from tests.conftest import compose, typed
from tests.test_architectures import GOOD_LR, PARAMS, assert_batched_equals_alone, built, toeplitz

pytest.importorskip("mnist1d")

CPU = torch.device("cpu")
SMALL = ["data=mnist1d", "data.num_samples=200", "engine.device=cpu", "engine.progress=false"]


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    return tmp_path_factory.mktemp("mnist1d-cache")


def small(cache, *over):
    return typed(*SMALL, f"data.cache={cache}", *over)


# ---------------------------------------------------------------- the data
def test_the_set_is_the_packages_own_generation_and_is_read_back_from_the_cache(tmp_path, monkeypatch):
    from mnist1d.data import get_dataset_args, make_dataset

    cfg = small(tmp_path)
    random.seed(7)
    np.random.seed(7)
    before = (random.random(), np.random.rand())
    random.seed(7)
    np.random.seed(7)
    task = build.task(cfg, CPU, torch.float64)
    assert (random.random(), np.random.rand()) == before  # generating left the global RNGs alone
    args = get_dataset_args()
    args.num_samples = 200
    ref = make_dataset(args)
    assert task.input_shape == (1, 40) and task.output_dim == 10
    assert torch.equal(task.x, torch.from_numpy(ref["x"]).unsqueeze(1)) and torch.equal(task.y, torch.from_numpy(ref["y"]))
    x, y = task.eval_set()  # the package's own test split
    assert torch.equal(x[:, 0], torch.from_numpy(ref["x_test"])) and torch.equal(y, torch.from_numpy(ref["y_test"]))
    assert (len(task.y), len(y)) == (160, 40)
    (path,) = tmp_path.glob("mnist1d-*.npz")
    monkeypatch.setattr(m1d, "generate", lambda d: pytest.fail("regenerated a cached set"))
    again = build.task(cfg, CPU, torch.float64)
    assert torch.equal(again.x, task.x)
    xb, yb = task.sample(torch.Generator().manual_seed(0), 8)
    assert xb.shape == (8, 1, 40) and yb.shape == (8,)
    assert torch.equal(xb, task.sample(torch.Generator().manual_seed(0), 8)[0])


def test_every_generation_argument_has_its_own_cache_file_and_the_folder_is_no_part_of_identity(tmp_path):
    a, b = small(tmp_path), small(tmp_path, "data.iid_noise_scale=0.05")
    assert m1d.cache_path(a.data) != m1d.cache_path(b.data)
    base = [*SMALL, "data.num_samples=200"]
    assert job_id(compose(*base, "data.cache=/x")) == job_id(compose(*base, "data.cache=/y"))
    assert job_id(compose(*base)) != job_id(compose(*base, "data.seed=1"))


def test_a_cache_holding_pickled_objects_is_refused_not_run(tmp_path):
    cfg = small(tmp_path)
    path = m1d.cache_path(cfg.data)
    np.savez(path, x=np.array([object()], dtype=object), y=0, x_test=0, y_test=0)
    with pytest.raises(DataError, match="not a readable MNIST-1D cache.*delete it"):
        ensure_files(cfg.data)


def test_a_missing_package_names_the_extra(tmp_path, monkeypatch, cli):
    monkeypatch.setitem(sys.modules, "mnist1d", None)  # `import mnist1d` now raises ImportError
    monkeypatch.setitem(sys.modules, "mnist1d.data", None)
    with pytest.raises(DataError, match=r"needs the mnist1d package.*pip install 'lrtransfer\[mnist1d\]'"):
        ensure_files(small(tmp_path).data)
    code, _, err = cli("sweep", *SMALL, f"data.cache={tmp_path}", "model=cnn1d", f"results_dir={tmp_path}")
    assert code == 2 and err.count("\n") == 1 and "lrtransfer[mnist1d]" in err


def test_an_unusable_cache_is_one_line(tmp_path, cli):
    """A cache that is a regular file (or under /proc) is said before generating, as data=hf_disk's."""
    (tmp_path / "file").write_text("not a folder")
    for cache, why in ((tmp_path / "file", f"{tmp_path / 'file'} is a regular file, not a folder"),
                       ("/proc/forbidden", "No such file or directory")):
        code, _, err = cli("sweep", *SMALL, f"data.cache={cache}", "model=cnn1d", f"results_dir={tmp_path}/r")
        assert code == 2 and err.count("\n") == 1 and err.startswith(f"error: data.cache={cache}: cannot keep files in "
                                                                     f"{cache} ({why})"), err


def test_eval_size_larger_than_the_test_split_is_refused(tmp_path):
    with pytest.raises(DataError, match="data.eval_size=41 but MNIST-1D's test split has 40 signals"):
        ensure_files(small(tmp_path, "data.eval_size=41").data)


# ---------------------------------------------------------------- the model
def test_cnn1d_is_toeplitz_products_pooling_and_a_flat_readout():
    """Seed 002, eqs. 7.49-7.50 by hand: each conv layer sums Q(w_ij) z_j over input channels."""
    _, _, model = built("model=cnn1d", "data=mnist1d", "width=3", "depth=2", "model.kernel_size=3",
                        "model.pool_layers=1", input_shape=(1, 8))
    convs = [a for a in model.atoms() if isinstance(a, Conv)]
    (readout,) = [a for a in model.atoms() if isinstance(a, Linear)]
    assert [c.fan_in for c in convs] == [1 * 3, 3 * 3] and readout.fan_in == 3 * 4  # c_in * k; width * length
    z = torch.randn(5, 1, 8, dtype=torch.float64)  # (B, C, L)

    def conv(c, z):  # (B, c_in, L) -> (B, c_out, L)
        w, b = c.weight[0], c.bias[0]
        rows = [sum(toeplitz(w[i, j], z.shape[-1]) @ z[:, j].T for j in range(c.c_in)).T + b[i] for i in range(c.c_out)]
        return torch.stack(rows, 1)

    h = torch.relu(conv(convs[0], z))
    h = 0.5 * (h[..., 0::2] + h[..., 1::2])  # 2x average pooling: 8 -> 4
    h = torch.relu(conv(convs[1], h))  # not pooled (pool_layers=1)
    ref = h.flatten(1) @ readout.weight[0] + readout.bias[0, 0]
    torch.testing.assert_close(model(z)[0], ref, rtol=1e-12, atol=1e-12)


def test_sp_draws_a_conv1d_as_torchs_nn_conv1d():
    _, param, model = built("model=cnn1d", "data=mnist1d", "width=6", "depth=2", input_shape=(1, 40))
    hidden = [a for a in model.atoms() if isinstance(a, Conv)][1]
    torch.manual_seed(3)
    ref = torch.nn.Conv1d(6, 6, 5, padding=2)
    w = param.init_tensor(hidden, "weight", torch.Generator().manual_seed(3))
    torch.testing.assert_close(w, ref.weight.detach(), rtol=0, atol=0)


def test_modular_conv1d_taps_start_orthogonal_and_are_normalised_one_by_one():
    _, param, model = built("model=cnn1d", "data=mnist1d", "param=modular", "width=6", "depth=2",
                            "param.norm_estimate=exact", input_shape=(1, 40), runs=2)
    hidden = [a for a in model.atoms() if isinstance(a, Conv)][1]
    assert hidden.weight_mult == pytest.approx(1.0 / 5)  # sqrt(c_out/c_in) / k
    sv = torch.linalg.svdvals(PerTap.taps(hidden.weight.detach()))  # (K, 5 taps, 6)
    torch.testing.assert_close(sv, torch.ones_like(sv), rtol=1e-6, atol=1e-6)
    (slot,) = [s for s in param.slots(model) if s.atom is hidden and s.name == "weight"]
    lr = torch.tensor([0.5, 0.03], dtype=torch.float64)
    (u,) = param.updates([slot], [torch.randn_like(slot.tensor)], lr)
    norms = Spectral().value(PerTap.taps(u))  # (K, 5): every tap has exactly the target
    torch.testing.assert_close(norms, (lr * param.share(slot)).view(2, 1).expand_as(norms), rtol=1e-10, atol=0)


def overrides(param: str, model: str, cache) -> list[str]:
    over = [*SMALL, f"data.cache={cache}", f"model={model}", "width=8", "depth=3", f"param={param}"]
    return over + (["param.base_width=8"] if param == "mup" else [])  # muP is SP at its base width


@pytest.mark.parametrize("model", ["cnn1d", "mlp"])
@pytest.mark.parametrize("param", PARAMS)
def test_each_model_trains_on_mnist1d_under_each_parameterization(param, model, cache):
    cfg = typed(*overrides(param, model, cache), "train.steps=60", "train.batch_size=32")
    (res,) = engine.train(build.job(cfg), [Run(log2_lr=GOOD_LR[param], seed=0)])
    assert not res.diverged and res.final_loss < 0.9 * res.initial_loss, (res.initial_loss, res.final_loss)


@pytest.mark.parametrize("param", PARAMS)
def test_cnn1d_batched_equals_one_run_at_a_time_in_float64(param, cache):
    over = [*overrides(param, "cnn1d", cache), "train.steps=10", "train.batch_size=8", "n_seeds=2", "train.dtype=float64"]
    assert_batched_equals_alone(over, param)


def test_the_cnn1d_sweep_runs_with_no_network(cli, tmp_path, monkeypatch):
    """`lrtransfer sweep data=mnist1d model=cnn1d width=16,32 train.steps=20`, every socket refused."""

    def refuse(*args, **kwargs):
        raise OSError("no network in this test")

    monkeypatch.setattr(socket, "socket", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    code, out, err = cli("sweep", "data=mnist1d", "model=cnn1d", "width=16,32", "train.steps=20", "data.num_samples=200",
                         f"data.cache={tmp_path / 'cache'}", "lr.log2_min=-8", "lr.log2_max=-6", "engine.progress=false",
                         f"results_dir={tmp_path}", "name=m")  # fmt: skip
    assert code == 0, err
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("m/*/record.json"))]
    assert sorted(r["config"]["width"] for r in records) == [16, 32]
    for rec in records:
        assert rec["status"] == "complete"
        assert all(0 <= run["eval_acc"] <= 1 and run["eval_loss"] is not None for run in rec["runs"])

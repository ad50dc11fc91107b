"""Real datasets, read from files written in their real on-disk formats."""

from __future__ import annotations

import gzip
import json
import math
import pickle
import sys
import types

import numpy as np
import pytest
import torch

from lrtransfer.training import build
from lrtransfer.config import ConfigError
from lrtransfer.training.build import task as build_task
from lrtransfer.options.data import Task, ensure_files
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.data.images import augment, channel_stats
from lrtransfer.store import job_id
from tests.conftest import TINY, compose, typed
from tests.datafiles import write_cifar, write_mnist

CPU = torch.device("cpu")
# option -> (writer, (C, H, W), classes)
IMAGE_SETS = {
    "cifar10": (lambda root: write_cifar(root), (3, 32, 32), 10),
    "cifar100": (lambda root: write_cifar(root, classes=100), (3, 32, 32), 100),
    "mnist": (lambda root: write_mnist(root), (1, 28, 28), 10),
    "fashion_mnist": (lambda root: write_mnist(root, folder="FashionMNIST", gz=False), (1, 28, 28), 10),
}


def image_task(root, option="cifar10", *over, dtype=torch.float64):
    return build_task(typed(f"data={option}", f"data.root={root}", "engine.device=cpu", *over), CPU, dtype)


def as_images(a: np.ndarray, shape) -> torch.Tensor:
    return torch.from_numpy(a.reshape(len(a), *shape))


# ---------------------------------------------------------------- reading the formats
@pytest.mark.parametrize("option", IMAGE_SETS)
def test_each_image_set_is_read_exactly_from_its_real_format(tmp_path, option):
    write, shape, classes = IMAGE_SETS[option]
    arrays = write(tmp_path)
    task = image_task(tmp_path, option, dtype=torch.float32)
    assert task.input_shape == shape and task.output_dim == classes
    assert task.train_x.dtype == torch.uint8 and task.train_y.dtype == torch.int64
    assert torch.equal(task.train_x, as_images(arrays["train_x"], shape))
    assert torch.equal(task.train_y, torch.from_numpy(arrays["train_y"]).long())
    x, y = task.eval_set()  # the whole test split, normalised with the training split's statistics
    assert x.shape == (len(arrays["test_y"]), *shape) and x.dtype == torch.float32
    assert torch.equal(y, torch.from_numpy(arrays["test_y"]).long())
    back = x.double() * task.std.double() + task.mean.double()
    torch.testing.assert_close(back, as_images(arrays["test_x"], shape).double(), rtol=0, atol=1e-3)
    xb, yb = task.sample(torch.Generator().manual_seed(0), 32)
    assert xb.shape == (32, *shape) and xb.dtype == torch.float32 and yb.shape == (32,) and yb.dtype == torch.int64
    assert 0 <= int(yb.min()) and int(yb.max()) < classes


def test_normalisation_is_per_channel_over_the_training_split(tmp_path):
    arrays = write_cifar(tmp_path)
    task = image_task(tmp_path)
    ref = arrays["train_x"].astype(np.float64)
    mean, std = channel_stats(task.train_x)
    np.testing.assert_allclose(mean.numpy(), ref.mean(axis=(0, 2, 3)), rtol=1e-12)
    np.testing.assert_allclose(std.numpy(), ref.std(axis=(0, 2, 3)), rtol=1e-12)
    assert mean[2] - mean[0] > 60  # the written channels differ: one global statistic would fail below
    z = task.normalise(task.train_x)
    torch.testing.assert_close(z.mean((0, 2, 3)), torch.zeros(3, dtype=torch.float64), rtol=0, atol=1e-9)
    torch.testing.assert_close(z.std((0, 2, 3), correction=0), torch.ones(3, dtype=torch.float64), rtol=0, atol=1e-9)


def test_a_batch_is_normalised_training_examples_with_their_labels(tmp_path):
    write_cifar(tmp_path)
    task = image_task(tmp_path)
    x, y = task.sample(torch.Generator().manual_seed(3), 64)
    every = task.normalise(task.train_x).flatten(1)  # (N, 3072)
    match = (x.flatten(1)[:, None, :] == every[None]).all(-1)  # (B, N)
    assert match.any(1).all()
    assert torch.equal(task.train_y[match.float().argmax(1)], y)


def test_batches_come_from_the_generator_alone(tmp_path):
    write_cifar(tmp_path)
    task = image_task(tmp_path, "cifar10", "data.augment=true")
    a = task.sample(torch.Generator().manual_seed(5), 16)
    b = task.sample(torch.Generator().manual_seed(5), 16)
    c = task.sample(torch.Generator().manual_seed(6), 16)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    assert not torch.equal(a[0], c[0])
    assert a[0].shape == (16, 3, 32, 32)


def test_subsets_are_fixed_random_and_bounded(tmp_path):
    arrays = write_cifar(tmp_path)
    t1 = image_task(tmp_path, "cifar10", "data.train_size=30", "data.eval_size=64")
    t2 = image_task(tmp_path, "cifar10", "data.train_size=30", "data.eval_size=64")
    t3 = image_task(tmp_path, "cifar10", "data.train_size=30", "data.seed=1")
    assert len(t1.train_y) == 30 and len(t1.eval_set()[1]) == 64
    assert torch.equal(t1.train_x, t2.train_x) and not torch.equal(t1.train_x, t3.train_x)
    full = as_images(arrays["train_x"], (3, 32, 32))
    rows = (t1.train_x.flatten(1)[:, None] == full.flatten(1)[None]).all(-1).float().argmax(1)
    assert len(set(rows.tolist())) == 30  # distinct training images, with their own labels
    assert torch.equal(t1.train_y, torch.from_numpy(arrays["train_y"])[rows])
    assert rows.tolist() != list(range(30))  # random, not the first 30
    # statistics are the dataset's, whatever the subset
    assert torch.equal(t1.mean, image_task(tmp_path).mean)
    with pytest.raises(DataError, match=r"data.train_size=101 but CIFAR-10 has 100 training images"):
        image_task(tmp_path, "cifar10", "data.train_size=101")


# ---------------------------------------------------------------- augmentation
def test_augmentation_is_a_padded_crop_and_maybe_a_flip_of_the_same_image():
    gen = torch.Generator().manual_seed(0)
    x = torch.randint(1, 256, (64, 3, 8, 8), dtype=torch.uint8, generator=gen)  # no zeros: padding shows
    out = augment(x, torch.Generator().manual_seed(1), pad=2, flip=True)
    assert out.shape == x.shape and out.dtype == torch.uint8
    padded = torch.nn.functional.pad(x, (2, 2, 2, 2))
    seen = set()
    for i in range(len(x)):
        hits = [
            (top, left, flip)
            for top in range(5)
            for left in range(5)
            for flip in (False, True)
            if torch.equal(out[i], (lambda c: c.flip(-1) if flip else c)(padded[i, :, top : top + 8, left : left + 8]))
        ]
        assert len(hits) == 1, i
        seen.add(hits[0])
    assert len({s[:2] for s in seen}) > 10 and {s[2] for s in seen} == {False, True}
    again = augment(x, torch.Generator().manual_seed(1), pad=2, flip=True)
    assert torch.equal(out, again)
    assert torch.equal(augment(x, gen, pad=0, flip=False), x)


# ---------------------------------------------------------------- files missing or wrong
def test_missing_files_say_where_they_were_looked_for_and_how_to_get_them(tmp_path):
    cfg = typed("data=cifar10", f"data.root={tmp_path}")
    with pytest.raises(DataError) as e:
        ensure_files(cfg.data)
    msg = str(e.value)
    assert "\n" not in msg and f"{tmp_path}/cifar-10-batches-py/" in msg
    assert "cifar-10-python.tar.gz" in msg and "data.download=true" in msg
    write_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DataError, match=r"no data_batch_3 in "):
        ensure_files(cfg.data)
    with pytest.raises(DataError, match=r"MNIST/raw/"):
        ensure_files(typed("data=mnist", f"data.root={tmp_path}").data)


def test_unreadable_files_are_named(tmp_path):
    write_cifar(tmp_path)
    folder = tmp_path / "cifar-10-batches-py"
    (folder / "data_batch_2").write_bytes(b"not a pickle")
    with pytest.raises(DataError, match=r"data_batch_2: not a readable CIFAR batch"):
        image_task(tmp_path)

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    (folder / "data_batch_2").write_bytes(pickle.dumps({"data": Evil()}, protocol=2))
    with pytest.raises(DataError, match=r"refusing to load (__builtin__|builtins).print"):
        image_task(tmp_path)

    write_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "t10k-labels-idx1-ubyte.gz").write_bytes(gzip.compress(b"\x08\x00\x00\x01"))
    with pytest.raises(DataError, match=r"t10k-labels-idx1-ubyte.gz: not an IDX file"):
        image_task(tmp_path, "mnist")


def test_download_is_asked_of_torchvision_only_when_files_are_missing(tmp_path, monkeypatch):
    calls = []

    class FakeCIFAR10:  # stands in for torchvision.datasets.CIFAR10
        def __init__(self, root, train, download):
            calls.append((root, train, download))
            write_cifar(tmp_path)

    fake = types.ModuleType("torchvision")
    fake.datasets = types.SimpleNamespace(CIFAR10=FakeCIFAR10)
    monkeypatch.setitem(sys.modules, "torchvision", fake)
    cfg = typed("data=cifar10", f"data.root={tmp_path}", "data.download=true")
    ensure_files(cfg.data)
    assert calls == [(str(tmp_path), True, True), (str(tmp_path), False, True)]
    ensure_files(cfg.data)
    assert len(calls) == 2  # files present: the network is left alone

    monkeypatch.setitem(sys.modules, "torchvision", None)  # not importable
    with pytest.raises(DataError, match=r"data.download=true needs torchvision.*lrtransfer\[vision\]"):
        ensure_files(typed("data=mnist", f"data.root={tmp_path}", "data.download=true").data)


def test_the_data_folder_is_not_part_of_a_jobs_identity():
    base = job_id(compose("data=cifar10", "data.root=/a"))
    assert job_id(compose("data=cifar10", "data.root=/b", "data.download=true")) == base
    assert job_id(compose("data=cifar10", "data.root=/a", "data.train_size=100")) != base
    assert job_id(compose("data=cifar100", "data.root=/a")) != base


@pytest.mark.parametrize(
    "over, fragment",
    [
        (["data=cifar10", "data.train_size=0"], "data.train_size must be positive"),
        (["data=mnist", "data.augment_pad=-1"], "data.augment_pad must be >= 0"),
        (["data=text", "data.seq_len=0"], "data.seq_len must be positive"),
    ],
)
def test_bad_data_values_are_refused(over, fragment):
    with pytest.raises(ConfigError, match=fragment):
        typed(*over)


# ---------------------------------------------------------------- the MLP reads images
def test_the_mlp_reads_an_image_as_its_flattened_vector():
    from lrtransfer.training.build import model as build_model
    from lrtransfer.training.build import parameterization as build_param

    cfg = typed("width=8", "depth=3")
    param = build_param(cfg)
    img = build_model(cfg, param, runs=2, input_shape=(3, 4, 4), output_dim=5)
    vec = build_model(cfg, param, runs=2, input_shape=(48,), output_dim=5)
    param.initialize(img, [0, 1])
    param.initialize(vec, [0, 1])
    x = torch.randn(2, 6, 3, 4, 4)  # (K, B, C, H, W): one batch per run
    torch.testing.assert_close(img(x), vec(x.flatten(2)), rtol=0, atol=0)
    torch.testing.assert_close(img(x[0]), vec(x[0].flatten(1)), rtol=0, atol=0)


# ---------------------------------------------------------------- text
TEXT = "The quick brown fox jumps over the lazy dog. " * 40 + "Ünïcode tail: ∑ ≈ π."


def bigram_config(path, *over):
    """A validated config for the text task with a minimal token model (logits = W[token], see `bigram`)."""
    from dataclasses import dataclass
    from typing import ClassVar

    from omegaconf import OmegaConf

    from lrtransfer.config import validate
    from lrtransfer.options.schema import TOKENS

    @dataclass
    class BigramConfig:
        READS: ClassVar[tuple[str, ...]] = (TOKENS,)
        name: str = "bigram_test"

    data = [f"data.path={path}"] if path else []
    cfg = OmegaConf.to_object(compose("data=text", *data, "engine.device=cpu", "engine.progress=false", *over))
    cfg.model = BigramConfig()
    return validate(cfg)


def text_task(path, *over, seq_len=16, eval_size=4):
    cfg = bigram_config(path, f"data.seq_len={seq_len}", f"data.eval_size={eval_size}", *over)
    return build_task(cfg, CPU, torch.float32)


def test_text_windows_predict_the_next_character(tmp_path):
    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    task = text_task(path)
    assert task.vocab == "".join(sorted(set(TEXT))) and task.output_dim == len(set(TEXT))
    assert task.input_shape == (16,)
    x, y = task.sample(torch.Generator().manual_seed(0), 32)
    assert x.shape == y.shape == (32, 16) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    n_train = len(TEXT) - (4 * 16 + 1)
    for row_x, row_y in zip(x, y):
        window = task.decode(row_x) + task.decode(row_y[-1:])
        assert window in TEXT[:n_train]
    # held out: the last 4 * 16 predictions of the text, in order, never trained on
    ex, ey = task.eval_set()
    assert ex.shape == ey.shape == (4, 16)
    assert "".join(task.decode(r) for r in ey) == TEXT[n_train + 1 :]
    assert task.decode(ex[0]) == TEXT[n_train : n_train + 16]
    assert torch.equal(task.sample(torch.Generator().manual_seed(0), 32)[0], x)


def test_text_errors_are_one_line(tmp_path):
    with pytest.raises(DataError, match=r"data.path=.*no such file"):
        ensure_files(bigram_config(tmp_path / "missing.txt").data)
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("caf\xe9 ".encode("latin-1") * 100)
    with pytest.raises(DataError, match=r"not UTF-8"):
        ensure_files(bigram_config(bad).data)
    short = tmp_path / "short.txt"
    short.write_text("abc" * 10)
    with pytest.raises(DataError, match=r"has 30 characters, too few for data.seq_len=128"):
        ensure_files(bigram_config(short).data)


def test_the_embedded_default_text_needs_no_file():
    cfg = bigram_config(None)
    assert cfg.data.path is None
    ensure_files(cfg.data)
    task = build_task(cfg, CPU, torch.float32)
    assert len(task.train_ids) > 100_000 and 60 < task.output_dim < 300
    assert "if" in task.decode(task.train_ids[:5000])


def test_losses_average_every_prediction_of_a_run():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 5, 7, generator=gen, dtype=torch.float64)  # (K, B, T, V)
    y = torch.randint(0, 7, (4, 5), generator=gen)
    expected = torch.stack([torch.nn.functional.cross_entropy(logits[k].reshape(-1, 7), y.reshape(-1)) for k in range(3)])
    torch.testing.assert_close(Task.losses(logits, y), expected)
    torch.testing.assert_close(Task.losses(logits, y.expand(3, 4, 5)), expected)
    correct = torch.stack([(logits[k].argmax(-1) == y).sum() for k in range(3)])
    assert torch.equal(Task.correct(logits, y), correct)


# ---------------------------------------------------------------- a token model trains through the engine
@pytest.fixture
def bigram(monkeypatch):
    from lrtransfer.nn import OUTPUT, Atom, Sequential

    class Bigram(Atom):
        def __init__(self, vocab: int, runs: int) -> None:
            super().__init__(vocab, vocab, role=OUTPUT, runs=runs)
            self.weight = torch.nn.Parameter(torch.empty(runs, vocab, vocab))

        def forward(self, x):  # (B, T) or (K, B, T) -> (K, B, T, V)
            if x.dim() == 2:
                return self.weight[:, x]
            return self.weight[torch.arange(len(self.weight))[:, None, None], x]

    module = types.ModuleType("lrtransfer.options.model.bigram_test")
    module.build = lambda options, param, *, width, depth, runs, input_shape, output_dim: Sequential([Bigram(output_dim, runs)])
    monkeypatch.setitem(sys.modules, "lrtransfer.options.model.bigram_test", module)


def test_a_token_model_trains_batched_as_one_run_at_a_time(tmp_path, bigram):
    from lrtransfer.training import engine
    from lrtransfer.training.runs import Run

    path = tmp_path / "t.txt"
    path.write_text(TEXT, encoding="utf-8")
    over = ["data.seq_len=16", "data.eval_size=4", "train.steps=20", "train.batch_size=8", "train.dtype=float64"]
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-6, -2)]
    batched = engine.train(build.job(bigram_config(path, *over)), runs)
    alone = engine.train(build.job(bigram_config(path, *over, "engine.batched=false")), runs)
    vocab = len(set(TEXT))
    for a, b in zip(batched, alone):
        assert a.initial_loss == pytest.approx(math.log(vocab), abs=0.1)  # near-uniform start
        assert a.final_loss == pytest.approx(b.final_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)
        assert a.eval_acc == b.eval_acc and 0 <= a.eval_acc <= 1
    assert batched[1].final_loss < batched[1].initial_loss - 1  # it learns


def test_the_default_text_study_runs_offline(bigram):
    from lrtransfer.training import engine
    from lrtransfer.training.runs import Run

    cfg = bigram_config(None, "data.seq_len=32", "data.eval_size=8", "train.steps=60", "train.batch_size=16")
    (res,) = engine.train(build.job(cfg), [Run(log2_lr=-3, seed=0)])
    assert not res.diverged and res.eval_loss < res.initial_loss - 1 and res.eval_acc > 0.1


# ---------------------------------------------------------------- images through the engine and the CLI
def test_image_runs_batched_equal_one_at_a_time_with_augmentation(tmp_path):
    from lrtransfer.training import engine
    from lrtransfer.training.runs import Run

    write_cifar(tmp_path)
    over = ["data=cifar10", f"data.root={tmp_path}", "data.augment=true", "data.eval_size=32", "width=16",
            "train.steps=15", "train.batch_size=8", "train.dtype=float64", "engine.device=cpu", "n_seeds=2"]  # fmt: skip
    runs = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-10, -6)]
    batched = engine.train(build.job(typed(*over)), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone):
        assert a.final_loss == pytest.approx(b.final_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9) and a.eval_acc == b.eval_acc


def test_sweep_on_cifar10_files_end_to_end_and_resume_from_another_root(cli, tmp_path):
    root = tmp_path / "datasets"
    write_cifar(root)
    args = ["sweep", "data=cifar10", f"data.root={root}", "model=mlp", "width=16,32", *TINY, f"results_dir={tmp_path}", "name=c"]
    code, out, err = cli(*args)
    assert code == 0, err
    records = [json.loads(p.read_text()) for p in sorted(tmp_path.glob("c/*/record.json"))]
    assert len(records) == 2 and all(r["status"] == "complete" for r in records)
    for rec in records:
        assert rec["config"]["data"]["name"] == "cifar10" and len(rec["runs"]) == 5
        for run in rec["runs"]:
            assert run["eval_loss"] is not None and 0 <= run["eval_acc"] <= 1
            assert run["initial_loss"] == pytest.approx(math.log(10), abs=1.0)
    code, out, _ = cli(*[a.replace(str(root), str(tmp_path / "moved")) for a in args])
    assert code == 0 and "0 job(s) ran, 2 already done" in out

"""Token data as language-model code keeps it: nanoGPT's .bin files and meta.pkl, .npy arrays
(data=tokens), and a `datasets` dataset saved to disk with a tokenizer trained here (data=hf_disk).
Nothing is downloaded."""

from __future__ import annotations

import json
import os
import pickle
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from lrtransfer.config import ConfigError
from lrtransfer.options.data import ensure_files
from lrtransfer.options.data.formats import DataError
from lrtransfer.options.data.tokenfiles import open_tokens
from lrtransfer.options.data.tokens import Stream, TokenTask, TokensOptions
from lrtransfer.store import job_id
from lrtransfer.training import build
from tests.conftest import compose, lrtransfer_cmd, typed
from tests.datafiles import token_stream, write_nanogpt
from tests.test_published import NANOGPT

CPU = torch.device("cpu")
SEQ = 8
SMALL = [f"data.seq_len={SEQ}", "data.eval_size=4", "width=16", "depth=1", "train.steps=4", "train.batch_size=4",
         "lr.log2_min=-8", "lr.log2_max=-7", "engine.device=cpu", "engine.progress=false"]


@pytest.fixture(scope="module")
def nano(tmp_path_factory):
    """nanoGPT's layout (vocabulary 40, said by meta.pkl), the same ids as .npy files, and the ids."""
    folder = tmp_path_factory.mktemp("shakespeare_char")
    ids = write_nanogpt(folder)
    np.save(folder / "train.npy", ids["train"].astype(">i4"))  # any integer width and byte order
    np.save(folder / "val.npy", ids["val"].astype(np.uint32))
    shutil.copy(folder / "train.npy", folder / "TRAIN.NPY")  # a .npy known by its header, whatever its name
    shutil.copy(folder / "val.npy", folder / "val_ids")
    return folder, ids


def tokens(folder, train="train.bin", val="val.bin"):
    return ["data=tokens", f"data.train_path={folder / train}", f"data.val_path={folder / val}"]


def task_of(*over):
    return build.task(typed("model=transformer", *SMALL, *over), CPU, torch.float32)


# ---------------------------------------------------------------- data=tokens
@pytest.mark.parametrize("train, val", [("train.bin", "val.bin"), ("train.npy", "val.npy"), ("TRAIN.NPY", "val_ids")])
def test_a_batch_is_windows_of_the_file_at_the_generators_starts(nano, train, val):
    folder, ids = nano
    task = task_of(*tokens(folder, train, val))
    assert task.input_shape == (SEQ,) and task.output_dim == 40  # the vocabulary meta.pkl says
    x, y = task.sample(torch.Generator().manual_seed(3), 32)
    starts = torch.randint(len(ids["train"]) - SEQ, (32,), generator=torch.Generator().manual_seed(3))
    windows = torch.from_numpy(ids["train"])[starts[:, None] + torch.arange(SEQ + 1)]  # (32, SEQ + 1)
    assert x.dtype == torch.int64 and torch.equal(x, windows[:, :-1]) and torch.equal(y, windows[:, 1:])
    ex, ey = task.eval_set()  # fixed windows spread over all of val: its first and its last
    val_ids = torch.from_numpy(ids["val"])
    assert ex.shape == (4, SEQ) and torch.equal(ex[0], val_ids[:SEQ]) and torch.equal(ey[-1], val_ids[-SEQ:])


def test_without_a_validation_file_the_last_windows_are_held_out(nano):
    folder, ids = nano
    task = task_of("data=tokens", f"data.train_path={folder / 'train.bin'}")
    held = 4 * SEQ + 1
    assert len(task.train.ids) == len(ids["train"]) - held  # training never reads the held-out end
    ex, ey = task.eval_set()
    end = torch.from_numpy(ids["train"][-held:])
    assert torch.equal(ex.reshape(-1), end[:-1]) and torch.equal(ey[-1], end[-SEQ:])  # consecutive windows, as data=text


def test_a_uint32_file_and_the_key_over_meta_pkl(nano, tmp_path):
    folder, ids = nano
    for split in ("train", "val"):
        (tmp_path / f"{split}.bin").write_bytes(ids[split].astype("<u4").tobytes())
    task = task_of(*tokens(tmp_path), "data.dtype=uint32", "data.vocab_size=50304")  # no meta.pkl there: the key says it (nanoGPT's padded GPT-2 vocabulary)
    assert task.output_dim == 50304
    assert torch.equal(task.sample(torch.Generator().manual_seed(0), 4)[0],
                       task_of(*tokens(folder)).sample(torch.Generator().manual_seed(0), 4)[0])


def test_a_token_model_gets_the_datas_vocabulary_and_context(nano, tmp_path):
    """The built-in transformer's embedding and readout, and nanoGPT's config, as from data=text."""
    folder, _ = nano
    cfg = typed("model=transformer", *SMALL, *tokens(folder))
    net = build.job(cfg).new_model(build.parameterization(cfg), 1)
    assert {tuple(p.shape[1:]) for n, p in net.named_parameters() if p.dim() == 3} >= {(40, 16), (SEQ, 16), (16, 40)}
    cfg = typed(*nanogpt(), *SMALL, *tokens(folder))
    config = build.job(cfg).new_model(build.parameterization(cfg), 1).net.config
    assert (config.vocab_size, config.block_size) == (40, SEQ)


def nanogpt():
    path = NANOGPT
    return ["model=custom", f"model.target={path}:GPT", f"model.config={path}:GPTConfig", "model.width_key=n_embd",
            "model.depth_key=n_layer", "model.config_kwargs={n_head: 2}"]


def test_an_id_past_the_vocabulary_met_in_training_is_one_line(tmp_path):
    """The sample checked before any job may miss one bad id; the batch that reads it says where."""
    ids = np.zeros(10_000, dtype=np.uint16)
    ids[7_000] = 99
    ids.tofile(tmp_path / "t.bin")
    stream = open_tokens(tmp_path / "t.bin", "uint16", "data.train_path=t.bin")
    task = TokenTask(Stream(stream, "data.train_path=t.bin"), Stream(stream.part(0, 100), "v"), 40, SEQ, 2, CPU)
    gen = torch.Generator().manual_seed(0)
    with pytest.raises(DataError, match=r"^data.train_path=t.bin: token id 99 at position 7000 is outside the "
                                        r"vocabulary of 40 \(ids 0..39\)"):
        for _ in range(1000):
            task.sample(gen, 64)


# ---------------------------------------------------------------- a job's identity
def test_a_data_file_is_in_a_jobs_identity_by_its_content_not_its_path(nano, tmp_path):
    folder, ids = nano
    moved = tmp_path / "elsewhere"
    shutil.copytree(folder, moved)
    base = ["model=transformer", *SMALL]
    first = job_id(compose(*base, *tokens(folder)))
    assert job_id(compose(*base, *tokens(moved))) == first  # moved: the same jobs
    big = tmp_path / "big"  # past 2 MiB: only the first and last MiB are hashed, with the size
    big.mkdir()
    stream = np.resize(ids["train"], 3 << 20).astype("<u2")
    for name, array in (("train.bin", stream), ("val.bin", ids["val"])):
        array.tofile(big / name)
    shutil.copy(folder / "meta.pkl", big)
    ref = job_id(compose(*base, *tokens(big)))
    assert ref != first
    changes = {"the first MiB": (lambda a: a.__setitem__(10, 7)), "the last MiB": (lambda a: a.__setitem__(-10, 7)),
               "the size": (lambda a: None)}
    for what, change in changes.items():
        edited = stream.copy() if what != "the size" else stream[:-1].copy()
        change(edited)
        edited.tofile(big / "train.bin")
        assert job_id(compose(*base, *tokens(big))) != ref, what
    stream.tofile(big / "train.bin")
    assert job_id(compose(*base, *tokens(big))) == ref
    with open(big / "meta.pkl", "wb") as f:  # the vocabulary beside it is part of it too
        pickle.dump({"vocab_size": 41}, f)
    assert job_id(compose(*base, *tokens(big))) != ref


def test_meta_pkl_is_in_a_jobs_identity_only_where_it_is_read(nano, tmp_path):
    """With data.vocab_size given, meta.pkl is not read: editing or deleting it retrained every job."""
    folder, _ = nano
    shutil.copytree(folder, tmp_path / "d")
    base = ["model=transformer", *SMALL, *tokens(tmp_path / "d")]
    given, read = job_id(compose(*base, "data.vocab_size=40")), job_id(compose(*base))
    with open(tmp_path / "d" / "meta.pkl", "wb") as f:
        pickle.dump({"vocab_size": 40, "stoi": {"a": 0}}, f)
    assert job_id(compose(*base, "data.vocab_size=40")) == given  # not read: the same job
    assert job_id(compose(*base)) != read  # read: another
    (tmp_path / "d" / "meta.pkl").unlink()
    assert job_id(compose(*base, "data.vocab_size=40")) == given


# ---------------------------------------------------------------- bad input
class RunsCode:
    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def bad_files(root: Path) -> Path:
    """A folder of broken token files, and a meta.pkl that would run code (touch a file) if unpickled."""
    root.mkdir(exist_ok=True)
    ids = token_stream(1000, 40, seed=0)
    ids.astype("<u2").tofile(root / "ok.bin")
    (root / "odd.bin").write_bytes(b"\x01\x02\x03")
    (root / "empty.bin").write_bytes(b"")
    ids[:5].astype("<u2").tofile(root / "short.bin")
    np.save(root / "objects.npy", np.array([1, "a"], dtype=object), allow_pickle=True)
    np.save(root / "floats.npy", ids.astype(np.float32))
    np.save(root / "fortran.npy", np.asfortranarray(ids[:900].reshape(30, 30)))
    np.save(root / "rows.npy", ids[:900].reshape(30, 30).astype(np.int32))
    np.save(root / "scalar.npy", np.int32(3))
    np.save(root / "ints.npy", ids.astype(np.int32))
    (root / "cut.npy").write_bytes((root / "ints.npy").read_bytes()[:-6])
    np.save(root / "negative.npy", -ids.astype(np.int32))
    (root / "not.npy").write_bytes(b"plain text, not numpy")
    code = root / "code"
    code.mkdir(exist_ok=True)
    shutil.copy(root / "ok.bin", code / "train.bin")
    marker = RunsCode()
    marker.marker = str(root / "RAN")
    (code / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 40, "hook": marker}))
    junk = root / "junk"
    junk.mkdir(exist_ok=True)
    shutil.copy(root / "ok.bin", junk / "train.bin")
    (junk / "meta.pkl").write_bytes(b"\x80\x04not a pickle")
    listed = root / "listed"
    listed.mkdir(exist_ok=True)
    shutil.copy(root / "ok.bin", listed / "train.bin")
    (listed / "meta.pkl").write_bytes(pickle.dumps({"stoi": {}}))
    huge = root / "huge"
    huge.mkdir(exist_ok=True)
    shutil.copy(root / "ok.bin", huge / "train.bin")
    (huge / "meta.pkl").write_bytes(pickle.dumps({"vocab_size": 10**30}))
    for name, meta in (("longint", {"vocab_size": 10**5000}), ("rawkeys", {"a\nb\x1b[31mRED": 1, "x" * 5000: 2})):
        (root / name).mkdir(exist_ok=True)
        shutil.copy(root / "ok.bin", root / name / "train.bin")
        (root / name / "meta.pkl").write_bytes(pickle.dumps(meta))
    (root / "metadir" / "meta.pkl").mkdir(parents=True, exist_ok=True)
    shutil.copy(root / "ok.bin", root / "metadir" / "train.bin")
    spread = token_stream(300_000, 40, seed=1)  # past the 64 sampled blocks of 4,096: gaps between them
    gap = int(np.linspace(0, len(spread) - 4096, 64)[1]) - 10  # just before the second block, in no block
    spread[gap] = 999
    spread.astype("<u2").tofile(root / "between.bin")
    if not (root / "fifo.bin").exists():
        os.mkfifo(root / "fifo.bin")
    return root


BAD_TOKENS = [  # (options, the one line's fragment); {d}: the folder
    (dict(train_path="{d}/missing.bin", vocab_size=40), "data.train_path={d}/missing.bin: no such file"),
    (dict(train_path="{d}", vocab_size=40), "data.train_path={d}: is a folder"),
    (dict(train_path="{d}/odd.bin", vocab_size=40), "3 bytes is not a whole number of uint16 ids (2 bytes each)"),
    (dict(train_path="{d}/empty.bin", vocab_size=40), "data.train_path={d}/empty.bin: the file is empty"),
    (dict(train_path="{d}/ok.bin"), "data.vocab_size is required: no meta.pkl beside data.train_path={d}/ok.bin"),
    (dict(train_path="{d}/ok.bin", vocab_size=10), "token id 39 at position 108 is outside the vocabulary of 10 (ids 0..9)"),
    (dict(train_path="{d}/ok.bin", val_path="{d}/ok.bin", vocab_size=40, eval_size=10**9),
     "data.eval_size=1000000000: data.val_path={d}/ok.bin holds 992 distinct windows of data.seq_len + 1 = 9 tokens; "
     "give data.eval_size=992 or fewer"),
    (dict(train_path="{d}/ok.bin", val_path="{d}/short.bin", vocab_size=40),
     "data.val_path={d}/short.bin: 5 tokens, too few for data.seq_len=8 (a window is seq_len + 1 = 9 tokens)"),
    (dict(train_path="{d}/ok.bin", vocab_size=40, eval_size=200), "1000 tokens, too few for data.seq_len=8 with "
     "data.eval_size=200 windows held out from it: it needs at least 1610 (or give data.val_path)"),
    (dict(train_path="{d}/objects.npy", vocab_size=40), "holds Python objects (dtype object), which only unpickling could read"),
    (dict(train_path="{d}/floats.npy", vocab_size=40), "holds float32 values; token ids are integers"),
    (dict(train_path="{d}/fortran.npy", vocab_size=40), "a 2-D array of shape (30, 30); a token file is one stream"),
    (dict(train_path="{d}/rows.npy", vocab_size=40), "a 2-D array of shape (30, 30); a token file is one stream of ids: "
     "save a 1-D array (np.ravel(ids) joins rows in order"),
    (dict(train_path="{d}/scalar.npy", vocab_size=40), "a 0-D array of shape ()"),
    (dict(train_path="{d}/cut.npy", vocab_size=40), "its header says 1000 ids of 4 bytes but the file holds 3994 bytes"),
    (dict(train_path="{d}/negative.npy", vocab_size=40), "is outside the vocabulary of 40"),
    (dict(train_path="{d}/not.npy", vocab_size=40), "data.train_path={d}/not.npy: not a readable .npy file"),
    (dict(train_path="{d}/code/train.bin"), "{d}/code/meta.pkl: refused, it names pathlib."),
    (dict(train_path="{d}/junk/train.bin"), "{d}/junk/meta.pkl: not a readable meta.pkl"),
    (dict(train_path="{d}/listed/train.bin"), "{d}/listed/meta.pkl: no positive integer vocab_size in it (found dict with stoi)"),
    (dict(train_path="{d}/huge/train.bin"), "{d}/huge/meta.pkl: vocab_size=1000000000000000000000000000000 is beyond the sane "
     "bound for a vocabulary (4,294,967,296: uint32 ids)"),
    (dict(train_path="{d}/longint/train.bin"), "vocab_size=<an integer of 16610 bits> is beyond the sane bound"),
    (dict(train_path="{d}/rawkeys/train.bin"), "found dict with 'a\\nb\\x1b[31mRED', xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx...)"),
    (dict(train_path="{d}/metadir/train.bin"), "{d}/metadir/meta.pkl: not a regular file (a folder)"),
    (dict(train_path="{d}/fifo.bin", vocab_size=40), "data.train_path={d}/fifo.bin: not a regular file (a FIFO)"),
    (dict(train_path="{d}/between.bin", vocab_size=40), "token id 999 at position 4686 is outside the vocabulary of 40"),
    (dict(train_path="{d}/ok.bin", val_path="{d}/fifo.bin", vocab_size=40),
     "data.val_path={d}/fifo.bin: not a regular file (a FIFO)"),
]


@pytest.mark.parametrize("given, fragment", BAD_TOKENS, ids=[f[1][:40] for f in BAD_TOKENS])
def test_each_bad_token_file_is_one_line_naming_it(tmp_path_factory, given, fragment):
    root = bad_files(tmp_path_factory.getbasetemp() / "bad_tokens")
    d = TokensOptions(**{"seq_len": SEQ, "eval_size": 4, **{k: v.format(d=root) if isinstance(v, str) else v
                                                           for k, v in given.items()}})
    with pytest.raises(DataError) as e:
        ensure_files(d)
    line = str(e.value)
    assert "\n" not in line and fragment.format(d=root) in line
    assert not (root / "RAN").exists()  # the meta.pkl's code never ran


@pytest.mark.parametrize("over, fragment", [
    (["data.train_path={d}/code/train.bin"], "refused, it names pathlib."),
    (["data.train_path={d}/ok.bin", "data.vocab_size=1099511627776"],
     "data.vocab_size=1099511627776 is beyond the sane bound for a vocabulary"),
    (["data.dtype=uint8", "data.train_path={d}/ok.bin"], "data.dtype: Invalid value 'uint8', expected one of [uint16, uint32]"),
    (["data.train_path={d}/fifo.bin", "data.vocab_size=40"], "not a regular file (a FIFO)"),  # not opened: no hang
    (["data.train_path={d}", "data.vocab_size=40"], "is a folder"),  # refused before the job's id would hash it
])
def test_a_sweep_on_a_bad_token_file_stops_before_anything_is_written(cli, tmp_path_factory, tmp_path, over, fragment,
                                                                      deadline):
    root = bad_files(tmp_path_factory.getbasetemp() / "bad_tokens")
    code, out, err = cli("sweep", "model=transformer", "data=tokens", *SMALL, *(o.format(d=root) for o in over),
                         f"results_dir={tmp_path / 'results'}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment in lines[0], err
    assert not (tmp_path / "results").exists() and not (root / "RAN").exists()


@pytest.mark.parametrize("over, fragment", [
    (["data.vocab_size=0"], "data.vocab_size must be positive, got 0"),
    (["data.train_path=null"], "data.train_path is required: the training token file (nanoGPT's train.bin, or a .npy)"),
    (["data.seq_len=0"], "data.seq_len must be positive, got 0"),
])
def test_bad_token_keys_are_one_line(over, fragment):
    with pytest.raises(ConfigError, match=re.escape(fragment)):
        typed("model=transformer", "data=tokens", "data.train_path=t.bin", *over)


def every_id(stream: Stream) -> np.ndarray:
    return stream.ids.windows([0], len(stream.ids))[0]


# ---------------------------------------------------------------- data=hf_disk
@pytest.fixture(scope="module")
def hf(tmp_path_factory):
    """A DatasetDict of text (paragraphs of the embedded default text), a BPE tokenizer of 300 tokens
    trained on it here, and a single Dataset of input_ids; nothing is downloaded."""
    datasets = pytest.importorskip("datasets")
    tokenizers = pytest.importorskip("tokenizers")
    from lrtransfer.options.data.text import default_text

    root = tmp_path_factory.mktemp("hf")
    rows = [p for p in default_text()[:60_000].split("\n\n") if p.strip()]
    tok = tokenizers.Tokenizer(tokenizers.models.BPE())
    tok.pre_tokenizer = tokenizers.pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.train_from_iterator(rows, tokenizers.trainers.BpeTrainer(
        vocab_size=300, special_tokens=["<|endoftext|>"], initial_alphabet=tokenizers.pre_tokenizers.ByteLevel.alphabet()))
    tok.save(str(root / "tokenizer.json"))
    cut = int(len(rows) * 0.9)
    datasets.disable_progress_bars()
    datasets.DatasetDict(train=datasets.Dataset.from_dict({"text": rows[:cut]}),
                         validation=datasets.Dataset.from_dict({"text": rows[cut:]})).save_to_disk(str(root / "text"))
    ids = [tok.encode(r).ids for r in rows]
    datasets.Dataset.from_dict({"input_ids": ids}).save_to_disk(str(root / "ids"))
    datasets.DatasetDict(train=datasets.Dataset.from_dict({"text": rows[:cut]}),
                         validation=datasets.Dataset.from_dict({"text": []})).save_to_disk(str(root / "empty_val"))
    datasets.enable_progress_bars()
    os.mkfifo(root / "fifo.json")  # never opened: reading it would wait for a writer
    (root / "file").write_text("not a folder")
    return root, tok, rows, cut


def hf_disk(root, *more, path="text"):
    return ["data=hf_disk", f"data.path={root / path}", f"data.cache={root / 'cache'}", *more]


def test_text_is_tokenized_once_into_a_cache_the_next_run_reuses(hf, monkeypatch):
    root, tok, rows, cut = hf
    over = hf_disk(root, f"data.tokenizer={root / 'tokenizer.json'}")
    task = task_of(*over)
    assert task.output_dim == tok.get_vocab_size(with_added_tokens=True) == 300
    train = np.concatenate([tok.encode(r).ids for r in rows[:cut]])
    val = np.concatenate([tok.encode(r).ids for r in rows[cut:]])
    assert np.array_equal(every_id(task.train), train)  # each row's ids, rows in order
    ex, ey = task.eval_set()
    assert torch.equal(ex[0], torch.from_numpy(val[:SEQ])) and torch.equal(ey[-1], torch.from_numpy(val[-SEQ:]))
    cached = sorted((root / "cache" / "tokens").glob("hf-*-uint16.bin"))
    assert len(cached) == 2 and not list((root / "text").rglob("hf-*"))  # beside nothing of the user's
    from lrtransfer.options.data import hf_disk as module

    monkeypatch.setattr(module, "token_batches", lambda *a: pytest.fail("tokenized again"))
    again = task_of(*over)  # a later run: read back from the cache
    assert np.array_equal(every_id(again.train), train)


def test_input_ids_are_used_as_they_are(hf):
    root, tok, rows, _ = hf
    task = task_of(*hf_disk(root, path="ids"), "data.val_split=null", "data.vocab_size=300")
    stream = np.concatenate([tok.encode(r).ids for r in rows])
    assert np.array_equal(every_id(task.train), stream[: len(stream) - (4 * SEQ + 1)])


def test_a_dataset_on_disk_is_in_a_jobs_identity_by_its_content(hf, tmp_path):
    root, *_ = hf
    over = ["model=transformer", *SMALL, "data.val_split=null", "data.vocab_size=300"]
    first = job_id(compose(*over, *hf_disk(root, path="ids")))
    shutil.copytree(root / "ids", tmp_path / "ids")
    assert job_id(compose(*over, *hf_disk(tmp_path, path="ids"))) == first
    info = tmp_path / "ids" / "dataset_info.json"
    info.write_text(info.read_text() + " ")
    assert job_id(compose(*over, *hf_disk(tmp_path, path="ids"))) != first


BAD_HF = [
    (["data.path=openwebtext"], "data.path=openwebtext: no such folder ({cwd}/openwebtext); data=hf_disk reads a dataset "
     "saved on disk with save_to_disk, never the Hugging Face Hub"),
    (["data.tokenizer=gpt2"], "data.tokenizer=gpt2: no such file ({cwd}/gpt2); a tokenizer.json on disk (nothing is downloaded)"),
    (["data.tokenizer={root}"], "data.tokenizer={root}: is a folder: give the tokenizer.json in it"),
    ([], "data.path={root}/text: column text holds text: give data.tokenizer=PATH/tokenizer.json to tokenize it"),
    (["data.tokenizer={root}/tokenizer.json", "data.val_split=test"],
     "data.val_split=test: data.path={root}/text has no such split; its splits: train, validation"),
    (["data.tokenizer={root}/tokenizer.json", "data.column=body"], "data.column=body: no such column; its columns: text"),
    (["data.path={root}/ids"], "data.path={root}/ids holds one Dataset, without splits: give data.val_split=null"),
    (["data.path={root}/ids", "data.val_split=null"], "data.vocab_size is required: no data.tokenizer says it"),
    (["data.path={root}/ids", "data.val_split=null", "data.vocab_size=100"], "is outside the vocabulary of 100 (ids 0..99)"),
    (["data.path={root}"], "data.path={root}: not a dataset saved with save_to_disk"),
    (["data.path={root}/empty_val"], "data.path={root}/empty_val: its validation split is empty, and datasets cannot "
     "load a DatasetDict with an empty split; save it without that split"),
    (["data.tokenizer={root}/text/dataset_dict.json"], "not a tokenizer.json the tokenizers library reads"),
    (["data.tokenizer={root}/fifo.json"], "data.tokenizer={root}/fifo.json: not a regular file (a FIFO); a tokenizer.json "
     "on disk"),  # as data=tokens says of a FIFO
    (["data.path={root}/fifo.json"], "data.path={root}/fifo.json: not a folder (a FIFO)"),
    (["data.tokenizer={root}/tokenizer.json", "data.cache={root}/file"],
     "data.cache={root}/file: cannot keep files in {root}/file/tokens ({root}/file is a regular file, not a folder); "
     "give data.cache=PATH, a folder you can write"),
    (["data.tokenizer={root}/tokenizer.json", "data.cache=/proc/forbidden"],
     "data.cache=/proc/forbidden: cannot keep files in /proc/forbidden/tokens (No such file or directory)"),
]


@pytest.mark.parametrize("over, fragment", BAD_HF, ids=[b[1][:40] for b in BAD_HF])
def test_each_bad_dataset_is_one_line(hf, over, fragment):
    root, *_ = hf
    cfg = typed("model=transformer", *SMALL, *hf_disk(root), *(o.format(root=root) for o in over))
    with pytest.raises(DataError) as e:
        ensure_files(cfg.data)
    assert "\n" not in str(e.value) and fragment.format(root=root, cwd=Path.cwd()) in str(e.value)
    assert not list((root / "cache").glob("tokens/.*.tmp"))


UNUSABLE_CACHES = [  # (data.cache, the one line's fragment); {root}: the hf fixture's folder
    ("/proc/forbidden", "data.cache=/proc/forbidden: cannot keep files in /proc/forbidden/tokens (No such file or directory)"),
    ("{root}/file", "data.cache={root}/file: cannot keep files in {root}/file/tokens ({root}/file is a regular file, not a folder)"),
    ("{root}/file/under", "({root}/file is a regular file, not a folder)"),
]


@pytest.mark.parametrize("plan", [True, False], ids=["plan", "sweep"])
@pytest.mark.parametrize("cache, fragment", UNUSABLE_CACHES, ids=[c[0] for c in UNUSABLE_CACHES])
def test_an_unusable_cache_is_one_line_in_a_sweep_and_a_plan(cli, hf, tmp_path, cache, fragment, plan):
    """Was an 89-line FileNotFoundError (or NotADirectoryError) traceback, exit 1, from the writer."""
    root, *_ = hf
    over = ["data=hf_disk", f"data.path={root / 'text'}", f"data.tokenizer={root / 'tokenizer.json'}",
            f"data.cache={cache.format(root=root)}"]
    code, out, err = cli("sweep", *(["--plan"] if plan else []), "model=transformer", *SMALL, *over,
                         f"results_dir={tmp_path / 'results'}")
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: ") and fragment.format(root=root) in lines[0], err
    assert "give data.cache=PATH, a folder you can write" in lines[0] and not (tmp_path / "results").exists()


def test_a_read_only_cache_is_one_line(hf, tmp_path, monkeypatch):
    """A read-only folder (here the system's refusal, simulated: root may write anywhere)."""
    import errno

    root, *_ = hf
    real = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.is_relative_to(tmp_path):
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    cfg = typed("model=transformer", *SMALL, *hf_disk(root, f"data.tokenizer={root / 'tokenizer.json'}"),
                f"data.cache={tmp_path / 'ro'}")
    with pytest.raises(DataError) as e:
        ensure_files(cfg.data)
    assert str(e.value) == (f"data.cache={tmp_path / 'ro'}: cannot keep files in {tmp_path / 'ro' / 'tokens'} (Read-only "
                            "file system); give data.cache=PATH, a folder you can write")


def test_a_full_disk_while_tokenizing_is_one_line_and_leaves_nothing_half_written(hf, tmp_path, monkeypatch):
    """The disk fills after the first 4 kB of a stream: one line (a Fault, exit 1), no file left that a
    later run would read; that run, with room again, makes the whole stream."""
    import errno

    from lrtransfer.errors import Fault
    from lrtransfer.options.data import cache

    root, tok, rows, cut = hf
    over = ["data=hf_disk", f"data.path={root / 'text'}", f"data.tokenizer={root / 'tokenizer.json'}",
            f"data.cache={tmp_path / 'c'}"]

    class Filling:
        def __init__(self, f):
            self.f, self.room = f, 4096

        def write(self, data):
            if len(data) > self.room:
                self.f.write(data[: self.room])  # as much as fits, then the error
                raise OSError(errno.ENOSPC, "No space left on device")
            self.room -= len(data)
            return self.f.write(data)

        def __getattr__(self, name):
            return getattr(self.f, name)

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            self.f.close()

    monkeypatch.setattr(cache, "open", lambda *a, **k: Filling(open(*a, **k)), raising=False)
    monkeypatch.setattr("lrtransfer.options.data.hf_disk.ROWS", 50)  # several writes a stream
    with pytest.raises(Fault) as e:
        task_of(*over)
    stream = tmp_path / "c" / "tokens"
    assert str(e.value).startswith(f"could not write {stream}/hf-") and "(No space left on device): nothing " \
        "half-written is kept" in str(e.value) and "\n" not in str(e.value)
    assert list(stream.iterdir()) == []  # no stream, no temporary file
    monkeypatch.undo()
    task = task_of(*over)
    assert np.array_equal(every_id(task.train), np.concatenate([tok.encode(r).ids for r in rows[:cut]]))


def test_a_plan_makes_no_token_cache_and_says_so(cli, hf, tmp_path):
    """The docs say a plan writes nothing: it checked the data, sized and timed the jobs, and left the
    cache unmade (the sweep makes it), saying so."""
    root, *_ = hf
    over = ["data=hf_disk", f"data.path={root / 'text'}", f"data.tokenizer={root / 'tokenizer.json'}",
            f"data.cache={tmp_path / 'cache'}"]
    code, out, err = cli("sweep", "--plan", "model=transformer", *SMALL, *over, f"results_dir={tmp_path / 'results'}")
    assert code == 0 and "1 missing" in out and "ms per run-step (timed" in out, (out, err)
    assert f"its token streams are not made yet; a plan writes nothing, so the sweep tokenizes it into " \
           f"{tmp_path / 'cache' / 'tokens'} before its first job" in out
    assert not (tmp_path / "cache").exists() and not (tmp_path / "results").exists()
    code, out, err = cli("sweep", "model=transformer", *SMALL, *over, f"results_dir={tmp_path / 'results'}")
    assert code == 0 and len(list((tmp_path / "cache" / "tokens").glob("hf-*.bin"))) == 2, err
    code, out, err = cli("sweep", "--plan", "model=transformer", *SMALL, *over, "width=32",
                         f"results_dir={tmp_path / 'results'}")
    assert code == 0 and "not made yet" not in out  # made: the plan reads it as the sweep will


def test_a_dataset_dict_too_deep_to_parse_is_one_line(tmp_path):
    pytest.importorskip("datasets")
    (tmp_path / "deep").mkdir()
    (tmp_path / "deep" / "dataset_dict.json").write_text('{"splits": ' + "[" * 100_000 + "]" * 100_000 + "}")
    cfg = typed("model=transformer", *SMALL, *hf_disk(tmp_path, "data.vocab_size=50", path="deep"))
    with pytest.raises(DataError) as e:
        ensure_files(cfg.data)
    assert "\n" not in str(e.value) and f"data.path={tmp_path / 'deep'}: not a dataset saved with save_to_disk" in str(e.value)


# ---------------------------------------------------------------- sweeps
@pytest.mark.parametrize("data", ["bin", "npy", "hf_disk"])
def test_a_sweep_of_the_transformer_and_nanogpt(cli, nano, request, tmp_path, data):
    """The built-in transformer and nanoGPT's GPT as published each sweep on each kind of data."""
    folder, _ = nano
    if data == "hf_disk":
        root = request.getfixturevalue("hf")[0]
        over = hf_disk(root, f"data.tokenizer={root / 'tokenizer.json'}")
    else:
        over = tokens(folder) if data == "bin" else tokens(folder, "train.npy", "val.npy")
    for model in (["model=transformer"], nanogpt()):
        code, out, err = cli("sweep", *SMALL, *model, *over, f"results_dir={tmp_path}", "name=s")
        assert code == 0, err
    records = [json.loads(p.read_text()) for p in (tmp_path / "s").glob("*/record.json")]
    assert len(records) == 2 and all(r["status"] == "complete" for r in records)
    assert all(run["final_loss"] is not None and run["eval_loss"] is not None for r in records for run in r["runs"])


# ---------------------------------------------------------------- memory
def peak_rss_since(reset: bool = False) -> int:
    """This process's peak resident memory (bytes) since the last reset (Linux: clear_refs 5)."""
    if reset:
        Path("/proc/self/clear_refs").write_text("5")
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmHWM:"))) << 10


def token_file(path: Path, size: int) -> Path:
    """A uint16 token file of `size` bytes: random ids in its first and last MiB, and (past 2 MiB)
    a sparse hole between them, which reads as id 0: its pages cost memory when touched, as a
    written file's would, but no disk."""
    rng = np.random.default_rng(0)
    edge = min(size // 2, 1 << 20)
    with open(path, "wb") as f:
        f.write(rng.integers(0, 40, edge // 2, dtype=np.uint16).tobytes())
        f.truncate(size - edge)
        f.seek(size - edge)
        f.write(rng.integers(0, 40, edge // 2, dtype=np.uint16).tobytes())
    return path


def resident() -> int:
    status = Path("/proc/self/status").read_text()
    return int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:"))) << 10


def test_reading_windows_keeps_none_of_the_files_pages(tmp_path):
    """However many windows a run reads, the process keeps none of the file's pages: a map kept open
    would hold every page a window touched (here 16,000 windows over 2 GB)."""
    stream = open_tokens(token_file(tmp_path / "big.bin", 2 << 30), "uint16", "t")
    task = TokenTask(Stream(stream, "t"), Stream(stream.part(0, 1000), "v"), 40, SEQ, 2, CPU)
    gen = torch.Generator().manual_seed(0)
    task.sample(gen, 64)
    before = resident()
    for _ in range(250):
        task.sample(gen, 64)
    assert resident() - before < 16 << 20


def test_memory_stays_flat_on_a_2_gb_token_file(cli, tmp_path):
    """The same sweep's peak memory on a 2 GB file as on a 2 MB one (within 100 MB): the file is
    memory-mapped; only the pages a batch, the held-out windows and the checks touch are read."""
    small, big = token_file(tmp_path / "small.bin", 2 << 20), token_file(tmp_path / "big.bin", 2 << 30)
    over = ["model=transformer", *SMALL, "train.steps=10", "data=tokens", "data.vocab_size=40",
            f"results_dir={tmp_path}"]
    assert cli("sweep", *over, f"data.train_path={small}", "name=warm")[0] == 0  # imports, allocator pools
    growth = {}
    for name, path in (("small", small), ("big", big)):
        before = peak_rss_since(reset=True)
        code, _, err = cli("sweep", *over, f"data.train_path={path}", f"name={name}")
        assert code == 0, err
        growth[name] = peak_rss_since() - before
    assert growth["big"] < growth["small"] + (100 << 20), growth


@pytest.mark.slow
def test_memory_stays_flat_on_a_2_gb_token_file_in_fresh_processes(tmp_path):
    """As above, each sweep in a process of its own: its peak resident memory, imports and all."""
    peaks = {}
    for name, size in (("small", 2 << 20), ("big", 2 << 30)):
        path = token_file(tmp_path / f"{name}.bin", size)
        script = ("import resource, subprocess, sys; subprocess.run(sys.argv[1:], check=True); "
                  "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
        args = [*lrtransfer_cmd(), "sweep", "model=transformer", *SMALL, "train.steps=200", "data=tokens",
                "data.vocab_size=40", f"data.train_path={path}", f"results_dir={tmp_path}", f"name={name}"]
        out = subprocess.run([sys.executable, "-c", script, *args], capture_output=True, text=True, check=True).stdout
        peaks[name] = int(out.split()[-1]) << 10
    assert peaks["big"] < peaks["small"] + (100 << 20), peaks

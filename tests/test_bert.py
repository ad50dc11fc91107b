"""BERT as published (`BertForMaskedLM` from a tiny local config, its dropout on): trained batched under
vmap with each run's dropout from its seed, the same losses as one run at a time; the error that
stopped vmap diagnosed as itself, never as a context that is not one; and a model without a causal
mask said to see its targets on next-token data."""

from __future__ import annotations

import os

import pytest
import torch

from lrtransfer.training import build, engine
from lrtransfer.training.engine import Ensemble, Run
from tests.conftest import typed
from tests.test_published import FAMILIES, NANOGPT, SMALL

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: configs are built here

# BERT's own config but for its size: hidden_dropout_prob and attention_probs_dropout_prob 0.1,
# type_vocab_size 2, pad_token_id 0 (its word table's padding row)
BERT = ["model=custom", "model.target=transformers:BertForMaskedLM", "model.config=transformers:BertConfig",
        "model.width_key={hidden_size: 1, intermediate_size: 4}", "model.depth_key=num_hidden_layers",
        "model.config_kwargs={num_attention_heads: 2}"]


@pytest.fixture(autouse=True)
def _transformers():
    pytest.importorskip("transformers", reason="transformers is in the hf extra")


def test_bert_as_published_trains_batched_with_its_dropout():
    """Dropout on, the runs under vmap (each seed's runs at once, each run's masks from its seed's
    stream): the losses one run at a time gives (float64), two seeds differing, one seed repeating.
    Before, its first forward stopped at vmap's randomness error, read as a context too short."""
    cfg = [*BERT, *SMALL, "width=32", "train.dtype=float64", "train.steps=3"]
    runs = [Run(log2_lr=-7, seed=0), Run(log2_lr=-7, seed=1), Run(log2_lr=-6, seed=1), Run(log2_lr=-7, seed=0)]
    ens = Ensemble(build.job(typed(*cfg)), runs)
    assert ens.model.batched and [m.p for m in ens.model.net.modules() if isinstance(m, torch.nn.Dropout)][0] == 0.1
    batched = engine.train(build.job(typed(*cfg)), runs)
    alone = engine.train(build.job(typed(*cfg, "engine.batched=false")), runs)
    for a, b in zip(batched, alone, strict=True):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-10)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-10)
    assert batched[0].history_loss != batched[1].history_loss  # seeds differ (init and masks)
    assert batched[0].history_loss == batched[3].history_loss  # a seed repeats
    no_dropout = "model.config_kwargs={num_attention_heads: 2, hidden_dropout_prob: 0.0, attention_probs_dropout_prob: 0.0}"
    off = engine.train(build.job(typed(*[no_dropout if o.startswith("model.config_kwargs") else o for o in cfg])), runs[:1])
    assert off[0].history_loss[1:] != batched[0].history_loss[1:]  # the dropout did draw


PADDED = """
from torch import nn

class Padded(nn.Module):  # a token table with a padding row, as BERT's word table
    def __init__(self, width, output_dim):
        super().__init__()
        self.wte = nn.Embedding(output_dim, width, padding_idx=0)
        self.head = nn.Linear(width, output_dim)

    def forward(self, idx):
        return self.head(self.wte(idx).cumsum(1))
"""


def test_a_padding_row_gets_no_gradient_in_any_run_under_vmap(tmp_path):
    """vmap's embedding backward (torch 2.13) holds the padding row of the first run only: every run's
    must get none, as one run at a time (and a plain loop) gives it."""
    (tmp_path / "padded.py").write_text(PADDED)
    cfg = ["model=custom", f"model.target={tmp_path / 'padded.py'}:Padded", *SMALL, "width=16", "train.dtype=float64",
           "train.steps=4", "train.batch_size=8"]
    runs = [Run(log2_lr=-6, seed=0), Run(log2_lr=-6, seed=1), Run(log2_lr=-5, seed=2)]
    batched = engine.train(build.job(typed(*cfg)), runs)
    alone = engine.train(build.job(typed(*cfg, "engine.batched=false")), runs)
    for a, b in zip(batched, alone, strict=True):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-12)
    ens = Ensemble(build.job(typed(*cfg)), runs)
    start = ens.model.layers["wte"].weight.detach()[:, 0].clone()
    for _ in range(4):
        ens.step()
    assert torch.equal(ens.model.layers["wte"].weight.detach()[:, 0], start)  # the padding row of every run


TYPED = """
import torch
from dataclasses import dataclass
from torch import nn

@dataclass
class TypedConfig:
    vocab_size: int = 96
    block_size: int = 32
    type_vocab_size: int = 2
    n_embd: int = 16

class Typed(nn.Module):  # its token-type table read by position: a fault of its own, not a short context
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte, self.wpe = nn.Embedding(config.vocab_size, config.n_embd), nn.Embedding(config.block_size, config.n_embd)
        self.token_type = nn.Embedding(config.type_vocab_size, config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab_size, bias=False)

    def forward(self, idx):
        pos = torch.arange(idx.shape[1])
        return self.head(self.wte(idx) + self.wpe(pos) + self.token_type(pos))
"""


def test_a_size_that_is_not_a_context_is_never_advised_as_one(cli, tmp_path):
    """A table of 2 rows (type_vocab_size=2) that fails on 8 tokens is not a context: the error is said as
    it is, without model.context_key (before: "its own is 2 (its config's type_vocab_size=2 ...): name the
    field that sets its context with model.context_key")."""
    (tmp_path / "typed.py").write_text(TYPED)
    over = ["model=custom", f"model.target={tmp_path / 'typed.py'}:Typed", f"model.config={tmp_path / 'typed.py'}:TypedConfig",
            "model.width_key=n_embd", "data=text", "data.seq_len=8", "width=16"]
    with pytest.raises(IndexError):
        cli("inspect", *over)
    _, _, err = cli("inspect", *over, "model.config_kwargs={type_vocab_size: 8}")  # a table long enough: it runs
    assert "context" not in err


def test_bert_sweeps_with_one_warning_that_it_sees_its_targets(cli, tmp_path):
    """BERT as published at width 32 on the text's 128-token context, one job of two seeds: trained, its dropout on,
    no advice about its context, and one `warning:` line that it has no causal mask."""
    code, out, err = cli("sweep", *BERT, "data=text", "data.eval_size=4", "train.batch_size=2", "depth=1", "width=32",
                         "n_seeds=2", "train.steps=2", "lr.log2_min=-8", "lr.log2_max=-7", "engine.device=cpu",
                         "engine.progress=false", f"results_dir={tmp_path}", "name=bert")
    assert code == 0, err
    assert "context_key" not in err + out and "randomness" not in err + out
    said = [line for line in err.splitlines() if "causal mask" in line]
    assert len(said) == 1 and said[0].startswith("warning: model.target=transformers:BertForMaskedLM has no causal mask: "
                                                 "its logits at a position change when a later token does"), err


@pytest.mark.parametrize("over", [
    [*BERT[:-1], "model.config_kwargs={num_attention_heads: 2, is_decoder: true}"],  # BERT as a decoder: causal
    *(["model=custom", *(o.format(path=NANOGPT) for o in FAMILIES[name])] for name in FAMILIES)],
    ids=["bert-decoder", *FAMILIES])
def test_a_causal_model_is_not_warned(cli, over):
    code, out, err = cli("inspect", *over, *SMALL, "width=16")
    assert code == 0, err
    assert "causal mask" not in out + err


def test_bert_is_said_to_read_ahead_in_inspect(cli):
    code, out, err = cli("inspect", *BERT, *SMALL, "width=16")
    assert code == 0, err
    assert out.count("note: model.target=transformers:BertForMaskedLM has no causal mask") == 1, out

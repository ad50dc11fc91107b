"""Published models as researchers have them, with no factory file: nanoGPT's GPT(config) (a stand-in
with its names, draws and interface: tests/nanogpt_standin.py), transformers' GPT2LMHeadModel and
LlamaForCausalLM from tiny local configs (skipped without transformers), each at two small
widths: roles, batched = one run at a time in float64, and a short sweep under standard and mup.
torchvision's resnet18 is in tests/test_torchvision.py."""

from __future__ import annotations

import json
import math
import os
import subprocess
from pathlib import Path

import pytest
import torch
from torch.overrides import TorchFunctionMode

from lrtransfer.options.schema import ConfigError
from lrtransfer.training import build, engine
from lrtransfer.training.engine import Run
from tests.conftest import lrtransfer_cmd, typed

os.environ["HF_HUB_OFFLINE"] = "1"  # nothing is downloaded: configs are built here

# nanoGPT's GPT(config): a stand-in written here with its names, draws and interface
# (tests/nanogpt_standin.py says what it keeps), or nanoGPT's own model.py where LRTRANSFER_NANOGPT names it.
NANOGPT = Path(os.environ.get("LRTRANSFER_NANOGPT") or Path(__file__).parent / "nanogpt_standin.py").resolve()

NO_DROPOUT = "resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0"
FAMILIES = {
    "nanogpt": ["model.target={path}:GPT", "model.config={path}:GPTConfig", "model.width_key=n_embd",
                "model.depth_key=n_layer", "model.config_kwargs={{n_head: 2}}"],
    "gpt2": ["model.target=transformers:GPT2LMHeadModel", "model.config=transformers:GPT2Config",
             "model.width_key=n_embd", "model.depth_key=n_layer", f"model.config_kwargs={{{{n_head: 2, {NO_DROPOUT}}}}}"],
    # Llama's MLP is intermediate_size wide: it grows with the width too (else its projections
    # would read as readouts), twice the width here
    "llama": ["model.target=transformers:LlamaForCausalLM", "model.config=transformers:LlamaConfig",
              "model.width_key={{hidden_size: 1, intermediate_size: 2}}", "model.depth_key=num_hidden_layers",
              "model.config_kwargs={{num_attention_heads: 2, num_key_value_heads: 2}}"],
}
SMALL = ["data=text", "data.seq_len=8", "data.eval_size=4", "train.batch_size=2", "depth=1", "engine.device=cpu",
         "engine.progress=false"]


@pytest.fixture(params=list(FAMILIES))
def family(request):
    """(name, the overrides that build it as model=custom)."""
    name = request.param
    if name != "nanogpt":
        pytest.importorskip("transformers", reason="transformers is in the hf extra")
    return name, ["model=custom", *(o.format(path=NANOGPT) for o in FAMILIES[name])]


def rows(cli, over, *more):
    code, out, err = cli("inspect", *over, *SMALL, *more, "--json")
    assert code == 0, err
    return json.loads(out)


def test_roles_in_inspect(family, cli):
    """The token table is an input (tied to the readout where the family ties it: one row, one init,
    one LR, the readout's 1/m on its readout use only), the attention and MLP matrices hidden
    (transformers' Conv1D included), and the readout found without naming it."""
    name, over = family
    doc = rows(cli, over, "param=mup", "param.base_width=16", "width=32")
    roles = {r["name"]: r["role"] for r in doc["tensors"] if len(r["shape"]) == 2}
    table, head = {"nanogpt": ("transformer.wte.weight", "lm_head.weight"),
                   "gpt2": ("transformer.wte.weight", "lm_head.weight"),
                   "llama": ("model.embed_tokens.weight", "lm_head.weight")}[name]
    if name == "llama":  # untied: its own readout
        assert roles.pop(table) == "input" and roles.pop(head) == "output (readout)"
    else:
        assert roles.pop(table) == f"input (tied readout {head})" and head not in roles
        tied = next(r for r in doc["tensors"] if r["name"] == table)
        assert (tied["forward_mult"], tied["readout_mult"], tied["lr_mult"]) == (1.0, 0.5, 1.0)
        assert any("tied to the readout" in n for n in doc["notes"])
    if name != "llama":  # learned positions (Llama's are rotary: a buffer)
        assert roles.pop(next(n for n in roles if "wpe" in n)) == "input"
    assert roles and set(roles.values()) == {"hidden"}, roles
    hidden = [r for r in doc["tensors"] if r["role"] == "hidden"]
    assert {r["lr_mult"] for r in hidden} == {0.5}  # Adam: 1/m at twice the base width


def test_attention_scale_reaches_inside(family, cli):
    """muP's 1/d: through transformers' `scaling` (GPT-2, Llama) or nanoGPT's default-scale SDPA calls."""
    name, over = family
    notes = " ".join(rows(cli, over, "param=mup", "param.base_width=16", "width=32")["notes"])
    assert "muP's 1/d attention scale applied through" in notes and "warning" not in notes
    assert "attention" not in " ".join(rows(cli, over, "param=standard", "width=32").get("notes", []))
    param, net = model_of(over, "param=mup", "param.base_width=16", "width=32")
    exposed = [m for m in net.net.modules() if hasattr(m, "scaling") and hasattr(m, "head_dim")]
    assert ("`scaling` of 1 attention modules" if exposed else "scaled_dot_product_attention calls") in notes
    for attn in exposed:
        assert attn.head_dim == 16 and attn.scaling == pytest.approx(math.sqrt(8) / 16)  # sqrt(d_base) / d
    if name == "nanogpt":  # what scaled_dot_product_attention is called with, seen from outside
        param.initialize(net, [0])
        with Recorder() as seen:
            net(torch.randint(0, 20, (2, 8)))
        assert seen.scales == [pytest.approx(math.sqrt(8) / 16)]


BERT = ["model=custom", "model.target=transformers:BertForMaskedLM", "model.config=transformers:BertConfig",
        "model.width_key={hidden_size: 1, intermediate_size: 2}", "model.depth_key=num_hidden_layers",
        "model.config_kwargs={num_attention_heads: 2, hidden_dropout_prob: 0.0, attention_probs_dropout_prob: 0.0}"]


def test_attention_scale_reaches_bert(cli):
    """BERT's attention keeps its head size as `attention_head_size` (not `head_dim`): muP's 1/d
    reaches its `scaling` all the same (a tiny local config)."""
    pytest.importorskip("transformers", reason="transformers is in the hf extra")
    notes = rows(cli, BERT, "param=mup", "param.base_width=16", "width=32")["notes"]
    assert any("`scaling` of 1 attention modules (bert.encoder.layer.0.attention.self (BertSelfAttention))" in n
               for n in notes) and not any(n.startswith("warning") for n in notes), notes
    _, net = model_of(BERT, "param=mup", "param.base_width=16", "width=32")
    (attn,) = [m for m in net.net.modules() if type(m).__name__ == "BertSelfAttention"]
    assert attn.attention_head_size == 16 and attn.scaling == pytest.approx(math.sqrt(8) / 16)  # sqrt(d_base) / d


class Recorder(TorchFunctionMode):
    def __enter__(self):
        self.scales = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func is torch.nn.functional.scaled_dot_product_attention:  # the scale it computes with (default 1/sqrt(d))
            self.scales.append((kwargs or {}).get("scale") or (args[0] if args else kwargs["query"]).shape[-1] ** -0.5)
        return func(*args, **(kwargs or {}))


def model_of(over, *more):
    cfg = typed(*over, *SMALL, *more)
    param = build.parameterization(cfg)
    return param, build.model(cfg, param, runs=1, input_shape=(8,), output_dim=20)


TWO_BY_TWO = [Run(log2_lr=e, seed=s) for s in (0, 1) for e in (-9, -6)]


def batched_equals_alone(*cfg) -> None:
    """Two seeds x two LRs trained batched and one run at a time: the same losses (float64, 1e-10)."""
    cfg = [*cfg, "train.dtype=float64", "train.steps=3"]
    batched = engine.train(build.job(typed(*cfg)), TWO_BY_TWO)
    alone = engine.train(build.job(typed(*cfg, "engine.batched=false")), TWO_BY_TWO)
    for a, b in zip(batched, alone, strict=True):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-10)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-10)
    assert batched[0].history_loss != batched[1].history_loss  # the LRs did differ


def test_batched_equals_one_at_a_time(family):
    """Under mup: every multiplier and the attention scale in play."""
    name, over = family
    batched_equals_alone(*over, *SMALL, "width=16", "param=mup", "param.base_width=8")


def test_a_short_sweep_under_standard_and_mup(family, cli, tmp_path):
    name, over = family
    code, _, err = cli("sweep", *over, *SMALL, "width=16,32", "param=standard,mup", "train.steps=4", "lr.log2_min=-8", "lr.log2_max=-7", f"results_dir={tmp_path}",
                       "name=published")
    assert code == 0, err
    records = [json.loads(p.read_text()) for p in (tmp_path / "published").glob("*/record.json")]
    assert len(records) == 4 and all(len(r["runs"]) == 2 for r in records)
    assert all(run["final_loss"] is not None for r in records for run in r["runs"])
    if name == "nanogpt":
        assert "returns a loss of its own: it is ignored" in err


def test_each_note_once_and_the_models_prints_in_its_log(tmp_path):
    """A sweep as a user runs it (its own process) of nanoGPT, two jobs of two ensembles each: its
    "loss of its own", a fact of the study, said once on the console and in each job's log, its
    "number of parameters" in each job's log and not on the console, PyTorch's missing-batching-rule
    warning (from nanoGPT's attention at the base width and from the rescaled call at twice it) once."""
    over = [o.format(path=NANOGPT) for o in FAMILIES["nanogpt"]]
    out = subprocess.run(lrtransfer_cmd() + ["sweep", "model=custom", *over, *SMALL, "width=16,32", "param=mup",
                                             "param.base_width=16", "train.steps=2", "lr.log2_min=-8", "lr.log2_max=-7",
                                             "engine.chunk=1", f"results_dir={tmp_path}", "name=n"],
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    console = out.stdout + out.stderr
    assert console.count("returns a loss of its own") == 1, console
    assert "number of parameters" not in console
    assert console.count("There is a performance drop") <= 1, console
    logs = [p.read_text() for p in (tmp_path / "n").glob("*/job.log")]
    assert len(logs) == 2 and all("printed: number of parameters" in log for log in logs)
    assert all(log.count("returns a loss of its own") == 1 for log in logs)


def test_inspect_says_each_note_once_a_width(cli, tmp_path):
    """As a note under each width's table, not as a warning besides (nor a log line)."""
    over = ["model=custom", *(o.format(path=NANOGPT) for o in FAMILIES["nanogpt"])]
    code, out, err = cli("inspect", *over, *SMALL, "width=16,32", "param=mup", "param.base_width=16")
    assert code == 0 and not err.strip(), err
    assert out.count("note: model.target=") == 2 and out.count("returns a loss of its own") == 2, out
    assert "number of parameters" not in out  # nor in --json's output: test_roles_in_inspect reads it as JSON


def test_a_width_the_heads_cannot_split_is_one_line(family, cli, tmp_path):
    _, over = family
    code, out, err = cli("sweep", *over, *SMALL, "width=15", "train.steps=2", f"results_dir={tmp_path}")
    assert code == 2 and not list(tmp_path.rglob("record.json"))
    line = next(line for line in err.splitlines() if line.startswith("error:"))
    assert "width=15" in line and "is not divisible by" in line and "2" in line


def test_a_base_width_the_heads_cannot_split_is_one_line(family, cli, tmp_path):
    """muP builds the model at its base width too (its own init there): a base width it refuses is said so."""
    _, over = family
    code, out, err = cli("sweep", *over, *SMALL, "width=16", "param=mup", "param.base_width=15", "train.steps=2",
                         f"results_dir={tmp_path}")
    assert code == 2 and not list(tmp_path.rglob("record.json"))
    line = next(line for line in err.splitlines() if line.startswith("error:"))
    assert line.startswith("error: param.base_width=15: the model is built at its base width too") and "width=15" in line


@pytest.mark.parametrize("given, line", [("vocab_size: 10", r"vocab_size=10 is smaller than the data's vocabulary \(20\)"),
                                         ("n_positions: 4", r"n_positions=4 is smaller than the data's context length \(8\)")])
def test_a_vocabulary_or_context_smaller_than_the_datas_is_one_line(given, line):
    pytest.importorskip("transformers")
    over = ["model=custom", "model.target=transformers:GPT2LMHeadModel", "model.config=transformers:GPT2Config",
            "model.width_key=n_embd", f"model.config_kwargs={{n_head: 2, {given}}}"]
    with pytest.raises(ConfigError, match=line):
        model_of(over, "width=16")


ODD = """
import torch
from dataclasses import dataclass
from torch import nn

@dataclass
class OddConfig:  # its vocabulary and context under names of its own
    vocab: int = 96
    ctx: int = 32
    n_embd: int = 16

class Odd(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.config = config
        self.wte, self.wpe = nn.Embedding(config.vocab, config.n_embd), nn.Embedding(config.ctx, config.n_embd)
        self.head = nn.Linear(config.n_embd, config.vocab, bias=False)

    def forward(self, idx):
        return self.head(self.wte(idx) + self.wpe(torch.arange(idx.shape[1])))

def odd(n_embd, vocab=96, ctx=32):  # the same as a factory taking keywords
    return Odd(OddConfig(vocab, ctx, n_embd))
"""


def test_vocab_key_and_context_key_name_a_configs_own_fields(cli, tmp_path):
    """A config whose fields are `vocab` and `ctx`: without the keys, one line naming both sizes and
    the key to set (not "no readout found", not an IndexError); with them, the data's sizes go there."""
    (tmp_path / "odd.py").write_text(ODD)
    over = ["model=custom", f"model.target={tmp_path / 'odd.py'}:Odd", f"model.config={tmp_path / 'odd.py'}:OddConfig",
            "model.width_key=n_embd", "data=text", "width=16"]
    code, out, err = cli("inspect", *over)
    assert code == 2 and err.count("\n") == 1, err
    assert "makes 96 logits (head.weight), fewer than the data's 103 tokens: name the field that sets its " \
           "vocabulary with model.vocab_key (its config's vocab=96), and lrtransfer sets it to 103" in err
    code, out, err = cli("inspect", *over, "model.vocab_key=vocab", "data.seq_len=64")
    assert code == 2 and err.count("\n") == 1, err
    assert "fails on the data's context of 64 tokens (data.seq_len; IndexError: index out of range in self): " \
           "its own is 32 (its config's ctx=32; wpe has 32 rows): name the field that sets its context with " \
           "model.context_key, and lrtransfer sets it to 64" in err
    keys = ["model.vocab_key=vocab", "model.context_key=ctx"]
    assert cli("inspect", *over, *keys, "data.seq_len=64")[0] == 0
    for built_by in (over[1:3], [f"model.target={tmp_path / 'odd.py'}:odd"]):  # a config class; a factory's keywords
        _, net = model_of(["model=custom", *built_by, *over[3:], *keys], "width=16")  # the data: 20 tokens, 8 a row
        assert (net.net.config.vocab, net.net.config.ctx) == (20, 8)


def test_a_context_longer_than_the_models_own_is_refused_before_any_job(cli, tmp_path):
    """Found at each job's first forward (exit 1 per job, its record a failure): the checks before
    training build the model on the meta device, where an index past a table is not checked. Now a
    sweep (and its plan) refuses it in one line, exit 2, before any job."""
    (tmp_path / "odd.py").write_text(ODD)
    over = ["model=custom", f"model.target={tmp_path / 'odd.py'}:Odd", f"model.config={tmp_path / 'odd.py'}:OddConfig",
            "model.width_key=n_embd", "model.vocab_key=vocab", "data=text", "data.seq_len=64", "width=16,32",
            "train.steps=2", "engine.progress=false", f"results_dir={tmp_path / 'r'}"]
    code, out, err = cli("sweep", *over)
    assert code == 2 and err.count("\n") == 1 and "fails on the data's context of 64 tokens (data.seq_len; IndexError: " \
        "index out of range in self): its own is 32 (its config's ctx=32; wpe has 32 rows)" in err, (out, err)
    assert not (tmp_path / "r").exists()
    code, out, err = cli("sweep", *over, "model.context_key=ctx")  # its context set to the data's: trains
    assert code == 0 and len(list((tmp_path / "r").rglob("record.json"))) == 2, err


KEYWORDS = """
from torch import nn

def net(hidden, blocks, input_shape, output_dim, sizes=None):
    w = sizes[0] if sizes else hidden  # a channel list, where given
    layers = [nn.Linear(input_shape[0], w), nn.ReLU()]
    for _ in range(blocks):
        layers += [nn.Linear(w, w), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(w, output_dim))
"""


@pytest.mark.parametrize("width_key, factor", [("hidden", 1), ("{hidden: 2}", 2), ("{hidden: 1, sizes: [3]}", 3)])
def test_width_and_depth_as_keyword_arguments(tmp_path, width_key, factor):
    """No config class: the width and depth go to the target under the names it takes them by
    (a multiple of the width, or a list of multiples, where the mapping says so)."""
    (tmp_path / "keywords.py").write_text(KEYWORDS)
    _, net = model_of(["model=custom", f"model.target={tmp_path / 'keywords.py'}:net", f"model.width_key={width_key}",
                       "model.depth_key=blocks", "data=teacher"], "width=8", "depth=2")
    fans = [(a.fan_in, a.fan_out, a.role) for a in net.atoms()]
    w = 8 * factor
    assert fans == [(8, w, "input"), (w, w, "hidden"), (w, w, "hidden"), (w, 20, "output")]


def test_a_channel_list_width_key_is_read_back(tmp_path, cli):
    """The documented list form (`{sizes: [3]}`) lands in each record as a list: every reader takes
    it as one value of the group's config (issue 40, case 1: it was an unhashable-list TypeError)."""
    from tests.conftest import TINY

    (tmp_path / "keywords.py").write_text(KEYWORDS)
    over = [*TINY, "model=custom", f"model.target={tmp_path / 'keywords.py'}:net", "model.width_key={hidden: 1, sizes: [3]}",
            "model.depth_key=blocks", "width=8,16", f"results_dir={tmp_path}", "name=s"]
    code, out, err = cli("sweep", *over)
    assert code == 0 and "Traceback" not in err, err
    for command in ("summary", "list", "report", "export"):  # report draws the figures plot draws
        code, out, err = cli(command, str(tmp_path))
        assert code == 0 and "Traceback" not in err, (command, err)
    import pandas as pd

    assert set(pd.read_csv(tmp_path / "runs.csv")["model.width_key.sizes"]) == {"[3]"}


OUTPUTS = """
from types import SimpleNamespace
import torch
from torch import nn

class Net(nn.Module):
    def __init__(self, width, input_shape, output_dim, form="tensor"):
        super().__init__()
        self.a, self.b, self.form = nn.Linear(input_shape[0], width), nn.Linear(width, output_dim), form

    def forward(self, x):
        y = self.b(torch.relu(self.a(x)))
        if self.form == "tuple":
            return y, y.sum()
        if self.form == "dict":
            return {"loss": None, "logits": y}
        if self.form == "object":
            return SimpleNamespace(scores=y, hidden=x)
        return y
"""


@pytest.mark.parametrize("form, output", [("tuple", ""), ("dict", ""), ("object", "scores"), ("tuple", "0")])
def test_logits_as_they_come(tmp_path, capsys, form, output):
    """A tuple's first element, a dict's logits, a named attribute: the same training as a tensor."""
    (tmp_path / "outputs.py").write_text(OUTPUTS)
    over = ["model=custom", f"model.target={tmp_path / 'outputs.py'}:Net", "width=8", "train.steps=5",
            "train.batch_size=4", "data.eval_size=8", "engine.device=cpu", "train.dtype=float64"]
    runs = [Run(log2_lr=e, seed=0) for e in (-8, -5)]
    plain = engine.train(build.job(typed(*over)), runs)
    shaped = engine.train(build.job(typed(*over, f"model.kwargs={{form: {form}}}", f"model.output={output}")), runs)
    assert [r.history_loss for r in shaped] == [r.history_loss for r in plain]
    assert ("returns a loss of its own: it is ignored" in capsys.readouterr().err) == (form == "tuple")


def test_logits_that_cannot_be_found_are_one_line(tmp_path):
    (tmp_path / "outputs.py").write_text(OUTPUTS)
    over = ["model=custom", f"model.target={tmp_path / 'outputs.py'}:Net", "width=8", "model.kwargs={form: object}",
            "engine.device=cpu"]
    with pytest.raises(ConfigError, match=r"returns a SimpleNamespace with scores, hidden: say where its logits are "
                                          r"with model.output=NAME"):
        engine.train(build.job(typed(*over)), [Run(log2_lr=-8, seed=0)])
    with pytest.raises(ConfigError, match=r"model.output=logits: .* returns a SimpleNamespace with scores, hidden, "
                                          r"which has no 'logits'"):
        engine.train(build.job(typed(*over, "model.output=logits")), [Run(log2_lr=-8, seed=0)])


def test_a_transformers_config_gets_no_cache_and_no_token_ids_past_the_vocabulary():
    """The data's 20 tokens replace GPT-2's 50257: its bos/eos id 50256 would name no token (and
    transformers warns of it at every build); a key/value cache serves generation, not training."""
    pytest.importorskip("transformers")
    over = ["model=custom", "model.target=transformers:GPT2LMHeadModel", "model.config=transformers:GPT2Config",
            "model.width_key=n_embd", "model.config_kwargs={n_head: 2}"]
    config = model_of(over, "width=16")[1].net.config
    assert (config.vocab_size, config.n_positions, config.use_cache) == (20, 8, False)
    assert config.bos_token_id is None and config.eos_token_id is None
    kept = model_of([*over[:-1], "model.config_kwargs={n_head: 2, use_cache: true, eos_token_id: 3}"], "width=16")
    assert (kept[1].net.config.use_cache, kept[1].net.config.eos_token_id) == (True, 3)


# ---------------------------------------------------------------- the model's own init (model.init)
QUERIES = {"nanogpt": "transformer.h.0.attn.c_attn (outputs 0..15 of 48)", "gpt2": "transformer.h.0.attn.c_attn (outputs 0..15 of 48)",
           "llama": "model.layers.0.self_attn.q_proj"}


def initial_loss(over, *more) -> float:
    runs = engine.train(build.job(typed(*over, *SMALL, *more, "train.steps=1")), [Run(log2_lr=-10, seed=0)])
    return runs[0].history_loss[0]


@pytest.mark.parametrize("param", ["standard", "mup"])
def test_the_initial_loss_is_near_ln_vocab(family, param):
    """As its authors start it (N(0, 0.02) tables, a zero readout under mup), a language model's
    first loss is near ln(vocabulary) at every width; PyTorch's N(0, 1) tables started GPT-2 at 18-20."""
    _, over = family
    vocab = build.task(typed(*over, *SMALL), torch.device("cpu"), torch.float32).output_dim
    for width in (32, 256):
        assert initial_loss(over, f"param={param}", f"width={width}") == pytest.approx(math.log(vocab), abs=0.5), width


def test_a_run_starts_as_the_module_built_under_its_seed(family):
    """Seeds differ, a seed repeats, and run k's tensors are `torch.manual_seed(seed); Model(config)`'s."""
    _, over = family
    cfg = typed(*over, *SMALL, "width=16")
    param = build.parameterization(cfg)
    net = build.model(cfg, param, runs=3, input_shape=(8,), output_dim=20)
    param.initialize(net, [0, 1, 0])
    ours = {a.user_names[n]: t for a in net.layers.values() for n, t in a.trained()}
    for seed in (0, 1):
        torch.manual_seed(seed)
        for n, p in type(net.net)(net.net.config).named_parameters():  # the class, called with its config
            assert torch.equal(ours[n][seed], p.detach()), (seed, n)
    drawn = [t for a in net.layers.values() for _, t in a.trained() if t[0].unique().numel() > 1]
    assert drawn and all(torch.equal(t[0], t[2]) and not torch.equal(t[0], t[1]) for t in drawn)


def test_mup_scales_the_models_own_init(family):
    """The family's own std, 0.02 (nanoGPT's and GPT-2's c_proj 0.02 / sqrt(2 n_layer)), at the base width
    128, times muP's rule: hidden weights / sqrt(m), tables x 1. Within 5%, or 4 standard errors of a
    draw of the base width's size (a table of 8 positions x 128 has 1024 entries)."""
    name, over = family
    for width in (32, 256):
        m = width / 128
        for r in rows_of(over, width):
            n, role = r["name"], r["role"].split()[0]  # "input (tied readout ...)": a table
            if role not in ("hidden", "input") or n.endswith(("c_attn.weight", "q_proj.weight")):  # (queries: zero)
                continue
            own = 0.02 / math.sqrt(2) if name != "llama" and n.endswith("c_proj.weight") else 0.02
            want = own / math.sqrt(m) if role == "hidden" else own
            at_base = math.prod(r["shape"]) / m ** (2 if role == "hidden" else 1)
            assert r["init_std"] == pytest.approx(want, rel=max(0.05, 4 / math.sqrt(2 * at_base))), (width, n)


def rows_of(over, width):
    from lrtransfer.diagnostics.inspect import tensors

    return tensors(typed(*over, *SMALL, "param=mup", f"width={width}"), (8,), 20)


def test_inspect_says_which_queries_start_at_zero(family, cli):
    name, over = family
    notes = " ".join(rows(cli, over, "param=mup", "param.base_width=16", "width=16")["notes"])
    assert f"the attention queries start at zero (muP's zero query): {QUERIES[name]}" in notes
    assert "queries keep their init" not in notes
    kept = " ".join(rows(cli, over, "param=mup", "param.zero_query=false", "width=16").get("notes", []))
    assert "start at zero" not in kept and "queries keep their init (muP's zero query is not applied)" in kept


TORCH_INIT = json.loads((Path(__file__).parent / "reference" / "torch_init.json").read_text())
# mup's conventions before model.init existed: the tied table x sqrt(m), one epsilon, the fused queries kept
OLD_MUP = ["param.tied_init=readout", "param.eps_by_width=false", "param.zero_query=false"]


@pytest.mark.parametrize("param", ["standard", "mup"])
def test_model_init_torch_trains_what_lrtransfer_trained_before_it(family, param):
    """Losses recorded by the code before model.init (scripts/make_torch_init_fixture.py, at b592ecf),
    float64: model.init=torch gives them again; and a standard job's identity is the old one."""
    name, over = family
    more = ["param.base_width=8", *OLD_MUP] if param == "mup" else []
    cfg = typed(*over, *SMALL, "width=16", f"param={param}", *more, "model.init=torch", "train.dtype=float64",
                "train.steps=3")
    runs = [Run(log2_lr=r["log2_lr"], seed=r["seed"]) for r in TORCH_INIT["cases"][f"{name} {param}"]]
    for ours, old in zip(engine.train(build.job(cfg), runs), TORCH_INIT["cases"][f"{name} {param}"], strict=True):
        assert ours.history_loss == pytest.approx(old["history_loss"], rel=1e-12, abs=0)
        assert ours.eval_loss == pytest.approx(old["eval_loss"], rel=1e-12, abs=0)
    own = typed(*over, *SMALL, "width=16", f"param={param}", *more, "train.dtype=float64", "train.steps=3")
    assert "init" not in semantic_of(cfg)["model"] and semantic_of(own)["model"]["init"] == "own"


def semantic_of(cfg) -> dict:
    from lrtransfer.diagnostics.inspect import config_dict

    return config_dict(cfg)

"""model=transformer: Modula's GPT targets, causality, independent runs, the embedding
atom under every parameterization, muP's attention rules, training and the CLI."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lrtransfer.training import build
from lrtransfer.training import engine
from lrtransfer.config import ConfigError
from lrtransfer.training.runs import Run
from lrtransfer.training.build import model as build_model
from lrtransfer.nn import Activation, Embedding, Gain, Linear
from lrtransfer.options.model.transformer import CausalSelfAttention
from lrtransfer.training.build import parameterization as build_param
from lrtransfer.options.param.modular import RowL2, targets
from tests.conftest import typed

PARAMS = ["standard", "equalized", "mup", "modular"]
VOCAB, T = 11, 6


def tiny(*over: str) -> list[str]:
    return ["engine.device=cpu", "engine.progress=false", "model=transformer", "data=text", "width=16",
            "model.heads=2", "depth=2", *over]


def built(*over, seeds=(0,), vocab=VOCAB, context=T, dtype=torch.float64):
    cfg = typed(*tiny(*over))
    param = build_param(cfg)
    model = build_model(cfg, param, runs=len(seeds), input_shape=(context,), output_dim=vocab).to(dtype)
    param.initialize(model, list(seeds))
    model.requires_grad_(False)
    return cfg, param, model


def ids(*shape, vocab=VOCAB, seed=0):
    return torch.randint(vocab, shape, generator=torch.Generator().manual_seed(seed))


def kinds(model):
    """The transformer's atoms by place: embeddings, head, and per block Q, K, V, O, MLP in/out."""
    atoms = [a for a in model.atoms() if not isinstance(a, Gain)]
    emb = [a for a in atoms if isinstance(a, Embedding)]
    head = atoms[-1]
    attn = [m for m in model.modules() if isinstance(m, CausalSelfAttention)]
    qkv = [lin for a in attn for lin in (a.q, a.k, a.v)]
    outs = [a.o for a in attn]
    mlp = [a for a in atoms if isinstance(a, Linear) and a not in qkv and a not in outs and a is not head]
    return emb, head, qkv, outs, mlp


# ---------------------------------------------------------------- Modula's GPT
@pytest.mark.parametrize("L", [2, 4, 8])
def test_gpt_target_vectors(L):
    """Notes, section 4: each embedding 1/7, head 1/7; Q, K, V 5/7; attention output 5/21;
    both MLP Linears 5/21 (the default activation under modular is Modula's ScaledGELU,
    sensitivity 1)."""
    cfg, param, model = built("param=modular", f"depth={L}")
    assert cfg.param.blocks_mass == 1.0  # the trunk's mass is the transformer's own (5), times 1
    assert {m.name for m in model.modules() if isinstance(m, Activation)} == {"scaled_gelu"}
    t = targets(model, 1.0)
    emb, head, qkv, outs, mlp = kinds(model)
    assert len(emb) == 2 and len(qkv) == 3 * L and len(outs) == L and len(mlp) == 2 * L
    for a in emb:
        assert t[a] == pytest.approx(1 / 7)
    assert t[head] == pytest.approx(1 / 7)
    for a in qkv:
        assert t[a] == pytest.approx(5 / 7)
    for a in outs + mlp:
        assert t[a] == pytest.approx(5 / 21)
    for a in model.atoms():  # LN gains: Modula's LayerNorm has no weights
        if isinstance(a, Gain):
            assert t[a] == 0.0
    assert model.sensitivity == pytest.approx(1.0)
    trunk = model.layers[1]
    assert trunk.mass == pytest.approx(5.0)
    assert {(r.skip, r.branch) for r in trunk.layers} == {(1 - 1 / (2 * L), 1 / (2 * L))}
    for s in param.slots(model):  # the slot shares follow the targets (bias_mass within an atom)
        if s.atom in emb:
            assert param.share(s) == pytest.approx(1 / 7)


def test_blocks_mass_scales_the_models_own_trunk_mass():
    cfg, param, model = built("param=modular", "param.blocks_mass=0.4")  # 5 x 0.4 = 2
    t = targets(model, 1.0)
    emb, head, qkv, outs, _ = kinds(model)
    assert t[head] == pytest.approx(1 / 4) and t[emb[0]] == pytest.approx(1 / 4)
    assert t[qkv[0]] == pytest.approx(3 * t[outs[0]])
    assert model.layers[1].mass == pytest.approx(2.0)


def test_attention_compound_rule_without_the_modula_third():
    """Under SP the attention compound has qkv_mult 1: sensitivity 3, and Q, K, V get the same
    target as O (the rule is stated, not guessed)."""
    _, _, model = built("model.activation=relu")
    attn = next(m for m in model.modules() if isinstance(m, CausalSelfAttention))
    assert attn.qkv_mult == 1.0 and attn.sensitivity == pytest.approx(3.0)
    t = targets(attn, 1.0)
    assert [t[m] for m in (attn.q, attn.k, attn.v, attn.o)] == pytest.approx([0.25] * 4)


# ---------------------------------------------------------------- the forward
def reference_attention(attn: CausalSelfAttention, z: torch.Tensor, k: int) -> torch.Tensor:
    """Run k's attention written out by hand: (B, T, width) -> (B, T, width)."""
    def lin(m, x):
        return x @ m.weight[k] * m.weight_mult + m.bias[k]

    B, Tn, W = z.shape
    H, D = attn.heads, attn.d_head
    q, kk, v = (attn.qkv_mult * lin(m, z).view(B, Tn, H, D).transpose(1, 2) for m in (attn.q, attn.k, attn.v))
    logits = (q @ kk.transpose(-1, -2)) * attn.scale
    mask = torch.ones(Tn, Tn, dtype=torch.bool).tril()
    y = logits.masked_fill(~mask, float("-inf")).softmax(-1) @ v
    return lin(attn.o, y.transpose(1, 2).reshape(B, Tn, W))


@pytest.mark.parametrize("param", ["standard", "mup", "modular"])
def test_attention_is_the_formula(param):
    over = ["param.zero_query=false"] if param == "mup" else []
    _, _, model = built(f"param={param}", *over, seeds=(0, 1))
    attn = next(m for m in model.modules() if isinstance(m, CausalSelfAttention))
    z = torch.randn(2, 3, T, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    out = attn(z)
    for k in range(2):
        torch.testing.assert_close(out[k], reference_attention(attn, z[k], k), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("param", PARAMS)
def test_causal_changing_token_t_changes_no_logit_before_t(param):
    over = ["param.zero_query=false", "param.readout_zero_init=false"] if param == "mup" else []
    _, _, model = built(f"param={param}", *over)
    x = ids(4, T)
    base = model(x)  # (K, B, T, V)
    for t in range(T):
        x2 = x.clone()
        x2[:, t] = (x2[:, t] + 1) % VOCAB
        y = model(x2)
        assert torch.equal(y[:, :, :t], base[:, :, :t]), t
        assert not torch.allclose(y[:, :, t], base[:, :, t])  # and token t does count at t


@pytest.mark.parametrize("param", PARAMS)
def test_runs_are_independent(param):
    """A 3-run ensemble computes what 3 single-run models compute, with shared and with per-run inputs."""
    _, _, ens = built(f"param={param}", seeds=(0, 1, 2))
    x = ids(4, T)
    xk = torch.stack([ids(4, T, seed=s) for s in (5, 6, 7)])  # (K, B, T)
    y, yk = ens(x), ens(xk)
    assert y.shape == (3, 4, T, VOCAB)
    for k, seed in enumerate((0, 1, 2)):
        _, _, one = built(f"param={param}", seeds=(seed,))
        torch.testing.assert_close(y[k], one(x)[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(yk[k], one(xk[k])[0], rtol=1e-12, atol=1e-12)


# ---------------------------------------------------------------- the embedding atom
def test_embedding_under_sp_equalized_and_mup():
    _, _, sp = built(seeds=(3,), vocab=200)
    tok = next(a for a in sp.atoms() if isinstance(a, Embedding))
    gen = torch.Generator().manual_seed(3)
    torch.testing.assert_close(tok.weight[0], torch.randn(200, 16, generator=gen, dtype=torch.float32).double())  # nn.Embedding: N(0, 1)
    assert tok.weight_mult == 1.0 and tok.role == "input"

    _, _, eq = built("param=equalized", "width=64", seeds=(3,))
    for a in eq.atoms():
        if isinstance(a, Embedding):  # seed 001's fan_in = prod(weight.shape[1:]) of (num, dim): the width
            assert a.weight_mult == pytest.approx(math.sqrt(2 / 64))
    _, mup, m = built("param=mup", "width=64", "param.base_width=16", "optim=sgd")
    for a in m.atoms():
        if isinstance(a, Embedding):  # an input weight: SGD LR x m, no multiplier
            assert mup.lr_multiplier(a, "weight") == pytest.approx(4.0) and a.weight_mult == 1.0
    _, mup_adam, _ = built("param=mup", "width=64", "param.base_width=16")
    assert mup_adam.lr_multiplier(next(a for a in m.atoms() if isinstance(a, Embedding)), "weight") == 1.0


@pytest.mark.parametrize("update", ["normalize", "dualize"])
def test_modular_embedding_rows_get_exactly_their_target(update):
    _, param, model = built("param=modular", f"param.update={update}", seeds=(0, 1, 2))
    emb = [a for a in model.atoms() if isinstance(a, Embedding)]
    for a in emb:
        rows = a.weight.norm(dim=-1)
        torch.testing.assert_close(rows, torch.ones_like(rows), rtol=1e-6, atol=1e-6)  # unit rows at init
        assert a.weight_mult == pytest.approx(4.0)  # sqrt(dim)
    slots = [s for s in param.slots(model) if s.atom in emb]
    gen = torch.Generator().manual_seed(0)
    dirs = [torch.randn(s.tensor.shape, generator=gen, dtype=torch.float64) for s in slots]
    dirs[0][1, 3] = 0  # a row no batch touched: stays zero
    lr = torch.tensor([0.5, 2.0**-5, 0.0], dtype=torch.float64)
    for s, u in zip(slots, param.updates(slots, dirs, lr)):
        rows = u.norm(dim=-1)  # (K, num)
        expected = (lr * param.share(s)).view(3, 1).expand_as(rows).clone()
        if s is slots[0]:
            expected[1, 3] = 0
        torch.testing.assert_close(rows, expected, rtol=1e-10, atol=1e-14)
        assert RowL2().value(u)[0] == pytest.approx(0.5 * param.share(s))


# ---------------------------------------------------------------- muP's attention
def test_mup_attention_scale_is_one_over_d_head_and_queries_start_at_zero():
    scales = {}
    for width in (16, 64):
        _, _, model = built("param=mup", f"width={width}", "param.base_width=16")
        attn = [m for m in model.modules() if isinstance(m, CausalSelfAttention)]
        d_head = width // 2
        scales[width] = attn[0].scale
        for a in attn:
            assert torch.count_nonzero(a.q.weight) == 0 and torch.count_nonzero(a.k.weight) > 0
    assert scales[16] == pytest.approx(1 / math.sqrt(8))  # SP's 1/sqrt(d_head) at the base width
    assert scales[64] * 32 == pytest.approx(scales[16] * 8)  # 1/d_head: x4 width, / 4 scale
    _, _, sp = built("width=64")
    assert next(m for m in sp.modules() if isinstance(m, CausalSelfAttention)).scale == pytest.approx(1 / math.sqrt(32))


def test_mup_is_sp_at_the_base_width():
    """With readout_zero_init=false and zero_query=false, muP at width == base_width is SP number for number."""
    _, _, mup = built("param=mup", "param.base_width=16", "param.readout_zero_init=false", "param.zero_query=false",
                      seeds=(2,))
    _, _, sp = built(seeds=(2,))
    x = ids(3, T)
    assert torch.equal(mup(x), sp(x))
    _, _, zq = built("param=mup", "param.base_width=16", "param.readout_zero_init=false", seeds=(2,))
    assert not torch.equal(zq(x), sp(x))  # the zero queries do change the function


# ---------------------------------------------------------------- training and the CLI
GOOD_LR = {"standard": -6, "equalized": -6, "mup": -6, "modular": -2}
TRAIN = ["width=32", "data.seq_len=16", "data.eval_size=8", "train.steps=30", "train.batch_size=8"]


@pytest.mark.parametrize("param", PARAMS)
def test_trains_under_each_parameterization(param):
    over = tiny(f"param={param}", *TRAIN) + (["param.base_width=32"] if param == "mup" else [])
    (res,) = engine.train(build.job(typed(*over)), [Run(log2_lr=GOOD_LR[param], seed=0)])
    assert not res.diverged
    assert res.final_loss < 0.85 * res.initial_loss, (res.initial_loss, res.final_loss)
    assert res.eval_loss is not None and math.isfinite(res.eval_loss)


def test_cli_sweep_writes_a_record(cli, tmp_path):
    code, out, err = cli("sweep", "model=transformer", "data=text", "width=32", "model.heads=2", "depth=1",
                         "data.seq_len=16", "data.eval_size=8", "train.steps=8", "train.batch_size=8",
                         "lr.log2_min=-7", "lr.log2_max=-6", "engine.progress=false",
                         f"results_dir={tmp_path}", "name=gpt")
    assert code == 0, err
    (record,) = tmp_path.glob("gpt/*/record.json")
    rec = json.loads(record.read_text())
    assert rec["status"] == "complete" and rec["config"]["model"]["name"] == "transformer"
    assert len(rec["runs"]) == 2 and all(math.isfinite(r["final_loss"]) for r in rec["runs"])


def test_width_not_divisible_by_heads_is_one_line():
    with pytest.raises(ConfigError) as e:
        typed(*tiny("width=30", "model.heads=4"))
    msg = str(e.value)
    assert "\n" not in msg
    assert "width=30 is not divisible by model.heads=4" in msg and "valid widths: multiples of 4" in msg
    with pytest.raises(ConfigError, match="model.heads must be positive, got 0"):
        typed(*tiny("model.heads=0"))


def test_cli_refuses_a_bad_width_in_one_line(cli, tmp_path):
    code, out, err = cli("sweep", "model=transformer", "data=text", "width=30", "model.heads=4",
                         f"results_dir={tmp_path}")
    assert code != 0
    assert "width=30 is not divisible by model.heads=4" in err and "Traceback" not in err


@pytest.mark.parametrize("param", PARAMS)
def test_batched_training_equals_one_run_at_a_time_in_float64(param):
    over = tiny(f"param={param}", *TRAIN, "train.steps=6", "n_seeds=2", "train.dtype=float64")
    over += ["param.base_width=32"] if param == "mup" else []
    runs = [Run(log2_lr=(GOOD_LR[param] + d), seed=s) for s in (0, 1) for d in (-1, 0)]
    batched = engine.train(build.job(typed(*over)), runs)
    alone = engine.train(build.job(typed(*over, "engine.batched=false")), runs)
    for a, b in zip(batched, alone):
        assert a.history_loss == pytest.approx(b.history_loss, rel=1e-9)
        assert a.eval_loss == pytest.approx(b.eval_loss, rel=1e-9)

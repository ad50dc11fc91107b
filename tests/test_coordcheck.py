"""The coordinate check tells SP from the width-stable parameterizations."""

from __future__ import annotations

import json

import pytest

from lrtransfer.diagnostics import coordcheck
from lrtransfer.diagnostics.compose import compose

WIDTHS = "width=64,128,256,512,1024"


def check(*over, log2_lr=None):
    cfgs = compose([WIDTHS, "engine.device=cpu", *over], default_widths=list(coordcheck.DEFAULT_WIDTHS))
    return coordcheck.measure(cfgs, steps=3, log2_lr=log2_lr, seeds=2)


def test_sp_hidden_activations_grow_with_width_after_a_step_and_mup_and_modular_do_not():
    """Adam, each at its grid's middle LR (SP and muP: 2^-9; modular: 2^-3), 3 steps.

    Thresholds: SP's hidden slope > 0.1 after one step and > 0.2 after three (it
    measures 0.17 -> 0.35: an update moves a hidden pre-activation by ~lr * width);
    muP's and the modular norm's input and hidden slopes stay within +-0.05 at every
    step. At init all three are flat (|slope| < 0.05)."""
    sp, mup, mod = check(), check("param=mup"), check("param=modular")
    assert sp.log2_lr == mup.log2_lr == -9 and mod.log2_lr == -3
    hidden = "1 hidden"
    assert sp.layers == mup.layers == mod.layers == ["0 input", hidden, "2 output"]
    s = sp.slopes()[hidden]
    assert abs(s[0]) < 0.05 and s[1] > 0.1 and s[3] > 0.2 and s[3] > s[1]
    for data in (mup, mod):
        for layer in ("0 input", hidden):
            assert all(abs(v) < 0.05 for v in data.slopes()[layer]), (data.title, layer, data.slopes()[layer])
    # SP's readout blows up outright; muP's stays flat (its zero readout has no slope at init)
    assert sp.slopes()["2 output"][3] > 0.7
    assert mup.slopes()["2 output"][0] is None and all(abs(v) < 0.05 for v in mup.slopes()["2 output"][1:])


def test_cli_writes_data_and_figure_and_prints_slopes(cli, tmp_path):
    code, out, err = cli("coord-check", "width=32,64", "depth=2", "--steps", "1", "--seeds", "1",
                         f"results_dir={tmp_path}", "param=mup", "engine.device=cpu")
    assert code == 0, err
    folder = tmp_path / "coord-check" / "mlp-mup-adam"
    doc = json.loads((folder / "coord.json").read_text())
    assert doc["widths"] == [32, 64] and doc["layers"] == ["0 input", "1 output"]
    assert len(doc["values"]["0 input"]) == 2 and len(doc["slopes"]["0 input"]) == 2
    assert (folder / "coord.png").exists() and (folder / "coord.pdf").exists()
    assert "step 0" in out and "0 input" in out and "wrote" in out


@pytest.mark.parametrize(
    "args, fragment",
    [
        (["param=mupp"], "unknown option 'mupp' for param (did you mean 'mup'?)"),
        (["depth=2,3"], "only width may list values, not 'depth=2,3'"),
        (["width=64"], "at least two widths"),
        (["width=64,0"], "width must be positive"),
        (["widht=64"], "unknown key 'widht'"),
        (["--steps", "0", "width=8,16"], "1 <= steps <= 10,000"),
        (["--steps", "100000000", "width=8,16"], "1 <= steps <= 10,000 and 1 <= seeds <= 1000"),
        (["--log2-lr", "2000", "width=8,16"], "--log2-lr must be finite and within -100 .. 100"),
        (["--out", "/dev/null", "width=8,16"], "--out /dev/null: cannot write there"),
    ],
)
def test_bad_input_is_one_line(cli, tmp_path, args, fragment):
    code, out, err = cli("coord-check", *args, f"results_dir={tmp_path}")
    assert code == 2
    assert fragment in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "coord-check").exists()


def test_the_figure_names_a_zero_layer_and_keeps_its_legend_off_the_lines():
    """Fabricated values: muP's readout is 0 at init, which a log axis cannot show."""
    import matplotlib.pyplot as plt

    data = coordcheck.CoordData(widths=[64, 128, 256], steps=2, log2_lr=-9, seeds=1, title="mlp mup adam",
                                layers=["0 input", "1 output"],
                                values={"0 input": [[1.0, 1.0, 1.0]] * 3, "1 output": [[0.0] * 3, [0.1] * 3, [0.2] * 3]})
    fig = coordcheck.coord_figure(data)
    notes = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_gid() == "zero-note"]
    assert notes == ["1 output: 0 at init (not drawn)"]
    (legend,) = fig.legends
    assert [t.get_text()[:10] for t in legend.get_texts()] == ["0 input (+", "1 output ("]  # slopes ~0
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    box = legend.get_window_extent(renderer)
    assert all(not box.overlaps(ax.get_window_extent(renderer)) for ax in fig.axes)
    plt.close(fig)


def small(*over, seeds=1):
    cfgs = compose(["width=32,64", "depth=3", "engine.device=cpu", *over], default_widths=list(coordcheck.DEFAULT_WIDTHS))
    return coordcheck.measure(cfgs, steps=2, seeds=seeds).values


def test_each_width_is_the_mean_over_its_seeds_at_a_constant_lr_whatever_the_schedule():
    """Seeds 0 and 1 measured together are the mean of each measured alone (one run per seed, each
    value a mean over the run's batch and units); a schedule and warmup in the config change nothing,
    the check's LR being constant."""
    together, first, second = small(seeds=2), small(), small("seed=1")
    assert first != second
    # every layer, at every step (the initial one and 2 after), at both widths: nothing left unchecked
    assert list(together) == list(first) and all(len(together[k]) == len(first[k]) == 3 for k in first)
    assert all(len(v) == 2 for steps in together.values() for v in steps)
    for layer, steps in together.items():
        for t, values in enumerate(steps):
            want = [(a + b) / 2 for a, b in zip(first[layer][t], second[layer][t], strict=True)]
            assert values == pytest.approx(want, rel=1e-5), (layer, t)
    assert small("train.schedule=cosine", "train.warmup_steps=2", "train.steps=3") == first


# ---------------------------------------------------------------- a user's or a published model: its own modules
def published(name: str) -> list[str]:
    from tests.test_published import FAMILIES, NANOGPT

    if name == "custom":  # a model of one's own: its blocks in a ModuleList
        return ["model=custom", "model.target=examples/mynets.py:LayerNormMLP", "depth=4"]
    if name != "nanogpt":
        pytest.importorskip("transformers", reason="transformers is in the hf extra")
    return ["model=custom", *(o.format(path=NANOGPT) for o in FAMILIES[name]), "data=text", "data.seq_len=8",
            "train.batch_size=2", "depth=2"]


ROWS = {  # the rows a coordinate check of each shows: the blocks' modules, the embeddings, the final norm, the readout
    "nanogpt": ["transformer.wte", "transformer.wpe", *(f"transformer.h.{i}.{m}" for i in (0, 1)
                                                      for m in ("ln_1", "attn", "ln_2", "mlp")),
                "transformer.ln_f", "lm_head", "output"],
    "gpt2": ["transformer.wte", "transformer.wpe", *(f"transformer.h.{i}.{m}" for i in (0, 1)
                                                   for m in ("ln_1", "attn", "ln_2", "mlp")),
             "transformer.ln_f", "lm_head", "output"],
    "custom": ["embed", "blocks.0.0", "blocks.0.1", "blocks.1.0", "blocks.1.1", "head", "output"],
}


@pytest.mark.parametrize("name", list(ROWS))
def test_a_published_or_custom_model_has_a_row_per_module(name, cli, tmp_path):
    """Before, the check of a model=custom saw only its logits: one row, `output`."""
    code, out, err = cli("coord-check", *published(name), "width=16,32", "--steps", "1", "--seeds", "1",
                         "engine.device=cpu", "engine.progress=false", "--out", str(tmp_path))
    assert code == 0, err
    doc = json.loads((tmp_path / "coord.json").read_text())
    assert doc["layers"] == ROWS[name]
    row, group = ("blocks.1.1", "blocks.*.1") if name == "custom" else ("transformer.h.1.attn", "transformer.h.*.attn")
    assert doc["groups"][row] == group and f"{group} (2 blocks)" in out  # the table: a row per group
    assert all(v > 0 for layer in doc["layers"] for v in doc["values"][layer][0])


def test_a_models_rows_are_each_runs_own_batched_or_one_at_a_time():
    """Each run's mean |output| of each module, read inside the vmapped forward: the numbers a forward of
    one run at a time reads (float64), and the readout's (lm_head) the logits' (the data's vocabulary is
    the model's)."""
    over = [*published("nanogpt"), "width=16,32", "train.dtype=float64", "engine.device=cpu"]
    batched = coordcheck.measure(compose(over, default_widths=None), steps=2, seeds=2)
    alone = coordcheck.measure(compose([*over, "engine.batched=false"], default_widths=None), steps=2, seeds=2)
    assert batched.layers == alone.layers == ROWS["nanogpt"]
    for layer in batched.layers:
        assert batched.values[layer] == [pytest.approx(v, rel=1e-10) for v in alone.values[layer]], layer
    assert batched.values["lm_head"] == [pytest.approx(v, rel=1e-12) for v in batched.values["output"]]
    assert batched.values["transformer.h.0.attn"] != batched.values["transformer.h.1.attn"]  # each block its own


@pytest.mark.slow
@pytest.mark.parametrize("name", list(ROWS))
def test_a_models_blocks_grow_under_sp_and_stay_flat_under_mup(name):
    """Widths 64..512, 3 steps of Adam at each grid's middle LR (2^-9), 2 seeds; on the text (context 32,
    batch 16) for nanoGPT and GPT-2, the default data for the custom model. Measured at the full text's
    context (docs/parameterizations.md): SP's attention and MLP outputs +1.3..+2.0 after 3 steps (their
    own N(0, 0.02) init grows them from the start), muP's every block row within +-0.09; the custom
    model's readout +0.56 under SP, -0.02 under muP."""
    over = [*published(name), "width=64,128,256,512", "engine.device=cpu"]
    over = [o.replace("data.seq_len=8", "data.seq_len=32").replace("train.batch_size=2", "train.batch_size=16")
            for o in over]
    sp, mup = (coordcheck.measure(compose([*over, f"param={p}"], default_widths=None), steps=3, seeds=2)
               for p in ("standard", "mup"))
    blocks = [layer for layer in mup.layers if layer in mup.groups and layer != mup.groups[layer]]
    assert blocks and all(abs(s) < 0.2 for layer in blocks for s in mup.slopes()[layer]), mup.slopes()
    if name == "custom":
        assert sp.slopes()["head"][3] > 0.3 and abs(mup.slopes()["head"][3]) < 0.1
    else:
        grown = [sp.slopes()[layer][3] for layer in blocks if layer.endswith((".attn", ".mlp"))]
        assert len(grown) == 4 and min(grown) > 0.5, sp.slopes()

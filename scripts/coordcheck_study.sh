#!/usr/bin/env bash
# The coordinate check of a published and a custom model (docs/parameterizations.md, "A published or a
# custom model"): karpathy's nanoGPT (its model.py, read from NANOGPT_DIR, nothing of it copied) and
# transformers' GPT-2, 2 layers of 4 heads, on the embedded text; examples/mynets.py:LayerNormMLP (depth 4)
# on the default data; widths 64..512, params standard and mup, 3 steps of Adam at each grid's middle LR,
# 2 seeds, one thread each. Needs `pip install "lrtransfer[hf]"`. Nothing is downloaded.
#   NANOGPT_DIR=/path/to/nanoGPT scripts/coordcheck_study.sh [OUT]
# Writes OUT/<model>-<param>/coord.json, coord.png and the slope table (OUT/<model>-<param>.txt).
set -euo pipefail
OUT=${1:-results/coord-check-study}
NANO=${NANOGPT_DIR:?set NANOGPT_DIR to a checkout of karpathy/nanoGPT}/model.py
LRT=${LRT:-lrtransfer}
export HF_HUB_OFFLINE=1
mkdir -p "$OUT"
WIDTHS=(width=64,128,256,512 engine.threads=1)
for p in standard mup; do
  $LRT coord-check model=custom model.target="$NANO:GPT" model.config="$NANO:GPTConfig" model.width_key=n_embd \
    model.depth_key=n_layer 'model.config_kwargs={n_head: 4}' data=text depth=2 "${WIDTHS[@]}" param=$p \
    --out "$OUT/nanogpt-$p" | tee "$OUT/nanogpt-$p.txt"
  $LRT coord-check model=custom model.target=transformers:GPT2LMHeadModel model.config=transformers:GPT2Config \
    model.width_key=n_embd model.depth_key=n_layer \
    'model.config_kwargs={n_head: 4, resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}' data=text depth=2 \
    "${WIDTHS[@]}" param=$p --out "$OUT/gpt2-$p" | tee "$OUT/gpt2-$p.txt"
  $LRT coord-check model=custom model.target=examples/mynets.py:LayerNormMLP depth=4 "${WIDTHS[@]}" param=$p \
    --out "$OUT/custom-$p" | tee "$OUT/custom-$p.txt"
done

#!/usr/bin/env bash
# The GPT-2 width studies: transformers' GPT2LMHeadModel as published (its own init per seed), 2 layers of
# 4 heads, batch 16, params standard and mup, seeds 0, 1, 2; two worker processes of one thread (needs
# `pip install "lrtransfer[hf,joblib]"`). Nothing is downloaded. Their times are in the docs.
#   scripts/gpt2_study.sh [RESULTS_DIR]             docs/published-models.md: the embedded text's characters
#       (context 64), widths 32..256, 300 steps of Adam over 8 LRs (2^-12 .. 2^-5)
#   scripts/gpt2_study.sh [RESULTS_DIR] subword     docs/datasets.md: 4,096 BPE tokens of the same text
#       (scripts/subword_tokens.py; also needs the lm extra), widths 32..256, 200 steps over 7 LRs (2^-12 .. 2^-6)
# Further arguments are overrides for the sweep.
set -euo pipefail
RESULTS=${1:-results}
shift || true
STUDY=characters
if [ "${1:-}" = subword ]; then STUDY=subword; shift; fi
LRT=${LRT:-lrtransfer}
PY=${PY:-python}
export HF_HUB_OFFLINE=1
start=$(date +%s)

if [ "$STUDY" = subword ]; then
  TOKENS="$RESULTS/subword-data"
  [ -f "$TOKENS/train.bin" ] || $PY scripts/subword_tokens.py "$TOKENS" --vocab 4096 --seq-len 64 --eval-size 256
  NAME=gpt2-subword
  RUN=(data=tokens data.train_path="$TOKENS/train.bin" data.val_path="$TOKENS/val.bin" data.eval_size=64
       train.steps=200 lr.log2_min=-12 lr.log2_max=-6)
else
  NAME=gpt2_width
  RUN=(data=text data.eval_size=128 train.steps=300 lr.log2_min=-12 lr.log2_max=-5)
fi
$LRT sweep model=custom model.target=transformers:GPT2LMHeadModel \
  model.config=transformers:GPT2Config model.width_key=n_embd model.depth_key=n_layer \
  model.config_kwargs='{n_head: 4, activation_function: gelu_pytorch_tanh, resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}' \
  "${RUN[@]}" data.seq_len=64 depth=2 width=32,64,128,256 param=standard,mup seed=0,1,2 train.batch_size=16 \
  engine.threads=1 hydra/launcher=parallel hydra.launcher.n_jobs=2 name=$NAME results_dir="$RESULTS" "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/$NAME"
$LRT plot "$RESULTS/$NAME"

#!/usr/bin/env bash
# The GPT-2 width study of docs/published-models.md: transformers' GPT2LMHeadModel as published (its own
# init per seed), 2 layers of 4 heads, widths 32, 64, 128, 256 on the embedded text (characters, context 64,
# batch 16), 300 steps of Adam over 8 LRs (2^-12 .. 2^-5), params standard and mup, seeds 0, 1, 2; two
# worker processes of one thread (needs `pip install "lrtransfer[hf,joblib]"`). Nothing is downloaded.
# Its time is in docs/published-models.md. Usage: scripts/gpt2_study.sh [RESULTS_DIR] [extra overrides...]
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
export HF_HUB_OFFLINE=1
start=$(date +%s)

$LRT sweep model=custom model.target=transformers:GPT2LMHeadModel \
  model.config=transformers:GPT2Config model.width_key=n_embd model.depth_key=n_layer \
  model.config_kwargs='{n_head: 4, activation_function: gelu_pytorch_tanh, resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}' \
  data=text data.seq_len=64 data.eval_size=128 depth=2 width=32,64,128,256 \
  param=standard,mup seed=0,1,2 train.steps=300 train.batch_size=16 \
  lr.log2_min=-12 lr.log2_max=-5 engine.threads=1 hydra/launcher=parallel hydra.launcher.n_jobs=2 \
  name=gpt2_width results_dir="$RESULTS" "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/gpt2_width"
$LRT plot "$RESULTS/gpt2_width"

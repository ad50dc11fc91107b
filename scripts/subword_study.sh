#!/usr/bin/env bash
# The subword study of docs/datasets.md: model=transformer (2 blocks of 4 heads, context 64, batch 16,
# 200 steps of Adam over log2 LR -12..-3) at widths 32, 64, 128 on the embedded text, twice: as byte-level
# BPE tokens (a vocabulary of 4,096 trained here by `tokenizers`: scripts/subword_tokens.py writes
# nanoGPT's train.bin, val.bin and meta.pkl) and as characters (data=text, 103), params standard and
# mup, seeds 0, 1, 2 as separate jobs; both held out on the same last 16,385 characters. Two worker
# processes of one thread (needs `pip install "lrtransfer[lm,joblib]"`). Nothing is downloaded.
# Usage: scripts/subword_study.sh [RESULTS_DIR] [extra overrides...]
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
PY=${PY:-python}
DATA="$RESULTS/subword-data"
start=$(date +%s)

$PY scripts/subword_tokens.py "$DATA" --vocab 4096 --seq-len 64 --eval-size 256
COMMON=(model=transformer depth=2 model.heads=4 width=32,64,128 data.seq_len=64 train.batch_size=16
        train.steps=200 param=standard,mup seed=0,1,2 lr.log2_min=-12 lr.log2_max=-3 engine.threads=1
        hydra/launcher=parallel hydra.launcher.n_jobs=2 results_dir="$RESULTS")
# the vocabulary comes from meta.pkl; 64 held-out windows of 64 predictions spread over val.bin's 3,835 tokens
$LRT sweep "${COMMON[@]}" data=tokens data.train_path="$DATA/train.bin" data.val_path="$DATA/val.bin" \
  data.eval_size=64 name=subword "$@"
echo "== subword: $(( $(date +%s) - start )) s"
$LRT sweep "${COMMON[@]}" data=text name=characters "$@"  # 256 held-out windows of 64: the last 16,385 characters
echo "== both: $(( $(date +%s) - start )) s"
for study in subword characters; do
  $LRT summary "$RESULTS/$study"
  $LRT plot "$RESULTS/$study"
done

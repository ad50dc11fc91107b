#!/usr/bin/env bash
# A small width study of model=transformer on the embedded text (CPython's pydoc
# topics, character level): widths 32..256, 2 blocks of 4 heads, context 64, batch
# 16, 200 steps of Adam, params standard, mup, modular, one seed; two worker
# processes of one thread (hydra/launcher=parallel, needs `pip install "lrtransfer[joblib]"`).
# Small enough for a 2-core CPU (15 minutes measured); the trend, not a paper's result.
# Usage: scripts/transformer_study.sh [RESULTS_DIR] [extra overrides...]
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
start=$(date +%s)

$LRT sweep model=transformer data=text width=32,64,128,256 depth=2 model.heads=4 \
  data.seq_len=64 train.batch_size=16 train.steps=200 param=standard,mup,modular \
  hydra/launcher=parallel hydra.launcher.n_jobs=2 \
  name=transformer results_dir="$RESULTS" "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/transformer"
$LRT plot "$RESULTS/transformer"

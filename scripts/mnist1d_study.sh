#!/usr/bin/env bash
# The MNIST-1D width study (study=mnist1d): model cnn1d and mlp, widths 16, 32, 64,
# params standard, mup, modular, 3 seeds per job, Adam, 150 steps of batch 32.
# SP and muP share an Adam grid of 2^-9..2^-3, the modular norm's target norms
# 2^-6..2^0 (7 points each). Two worker processes of one thread
# (hydra/launcher=parallel, needs `pip install "lrtransfer[joblib,mnist1d]"`), nice 5.
# Usage: scripts/mnist1d_study.sh [RESULTS_DIR] [extra overrides...]
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
start=$(date +%s)
common=(study=mnist1d results_dir="$RESULTS" hydra/launcher=parallel hydra.launcher.n_jobs=2 engine.threads=1)

nice -n 5 $LRT sweep "${common[@]}" param=standard,mup lr.log2_min=-9 lr.log2_max=-3 "$@"
nice -n 5 $LRT sweep "${common[@]}" param=modular lr.log2_min=-6 lr.log2_max=0 "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/mnist1d"
$LRT summary "$RESULTS/mnist1d" --metric eval_acc
$LRT summary "$RESULTS/mnist1d" --json > "$RESULTS/mnist1d/summary.json"
$LRT plot "$RESULTS/mnist1d"

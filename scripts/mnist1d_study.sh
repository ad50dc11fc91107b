#!/usr/bin/env bash
# The MNIST-1D width study (study=mnist1d): model cnn1d and mlp, widths 16, 32, 64,
# params standard, mup, modular, 3 seeds per job, Adam, 150 steps of batch 32.
# Each (param, model) gets a 7-point grid around its optimum: SP 2^-9..2^-3; muP
# 2^-9..2^-3 (mlp), 2^-12..2^-6 (cnn1d); the modular norm's target norms 2^-6..2^0
# (mlp), 2^-3..2^3 (cnn1d) (a first run on the mlp grids put muP's and the modular
# norm's cnn1d optima on the grid edge). Two worker processes of one thread
# (hydra/launcher=parallel, needs `pip install "lrtransfer[joblib,mnist1d]"`), nice 5.
# Usage: scripts/mnist1d_study.sh [RESULTS_DIR] [extra overrides...]
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
start=$(date +%s)
common=(study=mnist1d results_dir="$RESULTS" hydra/launcher=parallel hydra.launcher.n_jobs=2 engine.threads=1)
grid() { echo "lr.log2_min=$1 lr.log2_max=$2"; }

nice -n 5 $LRT sweep "${common[@]}" param=standard model=cnn1d,mlp $(grid -9 -3) "$@"
nice -n 5 $LRT sweep "${common[@]}" param=mup model=mlp $(grid -9 -3) "$@"
nice -n 5 $LRT sweep "${common[@]}" param=mup model=cnn1d $(grid -12 -6) "$@"
nice -n 5 $LRT sweep "${common[@]}" param=modular model=mlp $(grid -6 0) "$@"
nice -n 5 $LRT sweep "${common[@]}" param=modular model=cnn1d $(grid -3 3) "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/mnist1d"
$LRT summary "$RESULTS/mnist1d" --metric eval_acc
$LRT summary "$RESULTS/mnist1d" --json > "$RESULTS/mnist1d/summary.json"
$LRT plot "$RESULTS/mnist1d"

#!/usr/bin/env bash
# The depth study (issue 4's done criterion), measured: model=resnet (ResNet-S),
# width 128, depth 2, 4, 8, 16 residual blocks x param standard, modular x seeds
# 0, 1, 2; Adam, the default data, each parameterization's LR grid at half-octave
# steps. Then its summary (depth drift with a 95% interval, verdict) and figures.
#
# Expected: the modular norm's optimum stays (within +-0.25 octave per doubling of
# depth: its convex residual rule 1/L with tared block masses); the seed's plain
# ResNet-S under SP (branch multiplier 1) moves its optimum, or its deep models diverge.
# Usage: scripts/depth_study.sh [RESULTS_DIR] [extra overrides...]
# Extra overrides replace the script's (`param=standard` runs only SP; compare
# residual rules under one parameterization with `model.residual=one,sqrt_depth,convex`).
# Re-running resumes: finished jobs are skipped. One torch thread per job.
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
start=$(date +%s)

# study=depth: model=resnet width=128 depth=2,4,8,16, name=depth (conf/study/depth.yaml)
$LRT sweep study=depth param=standard,modular seed=0,1,2 lr.log2_step=0.5 \
  results_dir="$RESULTS" engine.threads=1 "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/depth"
$LRT summary "$RESULTS/depth" --json > "$RESULTS/depth/summary.json"
$LRT plot "$RESULTS/depth"
echo "== total: $(( $(date +%s) - start )) s"

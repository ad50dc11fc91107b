#!/usr/bin/env bash
# The two matrix-aware studies of docs/optimizers.md and docs/parameterizations.md, measured on the default MLP and data, one seed:
# - param=spectral (Adam, its own grid) at widths 64, 256, 1024 (study folder `default`
#   unless name= is given: pass name=spectral to keep it apart);
# - optim=muon under SP with optim.scale=jordan,spectral, and under muP (jordan), at widths
#   64..1024 (study folders `muon`, `muon-mup`). On a 2-core CPU a width-1024 Muon job (11 runs'
#   1024 x 1024 Newton-Schulz iterations, 300 steps) takes about 25 minutes with one thread.
# Then the summaries and figures. Re-running resumes: finished jobs are skipped.
# Usage: scripts/matrix_study.sh [RESULTS_DIR]
set -euo pipefail
RESULTS=${1:-results}
LRT=${LRT:-lrtransfer}
start=$(date +%s)
$LRT sweep width=64,256,1024 param=spectral name=spectral results_dir="$RESULTS" engine.threads=1
$LRT sweep optim=muon optim.scale=jordan,spectral width=64,128,256,512,1024 param=standard name=muon \
  results_dir="$RESULTS" engine.threads=1
$LRT sweep optim=muon width=64,128,256,512,1024 param=mup name=muon-mup results_dir="$RESULTS" engine.threads=1
echo "== sweeps: $(( $(date +%s) - start )) s"
for study in spectral muon muon-mup; do
  $LRT summary "$RESULTS/$study"
  $LRT plot "$RESULTS/$study"
done

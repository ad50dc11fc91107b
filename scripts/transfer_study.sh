#!/usr/bin/env bash
# The four-parameterization width study (issue 3's done criterion), measured, with u-muP beside them (issue 55):
# widths 64..1024 x param standard, equalized, mup, modular, umup x seeds 0, 1, 2; Adam,
# the default data, each parameterization's default LR grid. Then its summary
# (sub-grid optima, drift with a 95% interval, verdict), its figures (a panel per
# parameterization, the transfer plot) and each parameterization's coordinate check.
#
# Expected: SP's optimum falls (drift <= -0.5 octave per doubling of width); muP's
# and the modular norm's stay (within +-0.25).
# Usage: scripts/transfer_study.sh [RESULTS_DIR] [extra overrides...]
# Re-running resumes: finished jobs are skipped. One torch thread per job (a shared
# machine slows two threads down far more than it slows one).
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
start=$(date +%s)

$LRT sweep width=64,128,256,512,1024 param=standard,equalized,mup,modular,umup seed=0,1,2 \
  name=transfer results_dir="$RESULTS" engine.threads=1 "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/transfer"
$LRT summary "$RESULTS/transfer" --json > "$RESULTS/transfer/summary.json"
$LRT plot "$RESULTS/transfer"

for p in standard equalized mup modular umup; do
  $LRT coord-check param=$p results_dir="$RESULTS" engine.threads=1 "$@"
done
echo "== total: $(( $(date +%s) - start )) s"

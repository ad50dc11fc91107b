#!/usr/bin/env bash
# u-muP beside muP (width) and beside muP and CompleteP (depth), on the built-in transformer on the
# embedded text (characters; 4 heads, context 64, batch 16, Adam), 3 seeds a job (n_seeds=3), each
# parameterization on an 8-point octave grid around its own optimum:
#   width: widths 32, 64, 128, 256 at depth 2, 200 steps: param=umup (log2 LR -6..1), param=mup
#          (-11..-4, its default base width 128);
#   depth: depths 2, 4, 8, 16 at width 32, 150 steps: param=umup, param=mup (no depth rule) and
#          param=completep (base depth 2, alpha 1), both base width 32.
# Cheapest stage first (width 32, 64; depth 2, 4; width 128; depth 8; width 256; depth 16), each
# stage's parameterizations side by side (one process of one thread each), so that a study cut
# short has every parameterization at the scales it reached. Re-running skips what is recorded and
# resumes what was interrupted.
# Usage: scripts/umup_study.sh [RESULTS_DIR] [STAGE...]   (stages: w32 w64 d2 d4 w128 d8 w256 d16;
#        default all; run it under nice -n 10 on a shared machine)
set -euo pipefail
RESULTS=${1:-results}
shift || true
STAGES=${*:-w32 w64 d2 d4 w128 d8 w256 d16}
LRT=${LRT:-lrtransfer}
common=(model=transformer data=text model.heads=4 data.seq_len=64 train.batch_size=16 n_seeds=3
  engine.threads=1 engine.progress=false results_dir="$RESULTS")
umup="param=umup lr.log2_min=-6 lr.log2_max=1"
mup="lr.log2_min=-11 lr.log2_max=-4"

side_by_side() {  # each argument: one sweep's overrides, as one string; all run at once
  local pids=()
  for over in "$@"; do
    # shellcheck disable=SC2086
    $LRT sweep "${common[@]}" $over > /dev/null & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

start=$(date +%s); uptime
for stage in $STAGES; do
  n=${stage:1}
  case $stage in
    w*) side_by_side "name=umup_width width=$n depth=2 train.steps=200 $umup" \
                     "name=umup_width width=$n depth=2 train.steps=200 param=mup $mup" ;;
    d*) side_by_side "name=umup_depth width=32 depth=$n train.steps=150 $umup" \
                     "name=umup_depth width=32 depth=$n train.steps=150 param=mup param.base_width=32 $mup" \
                     "name=umup_depth width=32 depth=$n train.steps=150 param=completep param.base_width=32 $mup" ;;
  esac
  echo "== $stage: $(( $(date +%s) - start )) s"; uptime
done
for study in umup_width umup_depth; do
  if [[ -d $RESULTS/$study ]]; then $LRT summary "$RESULTS/$study"; $LRT plot "$RESULTS/$study"; fi
done

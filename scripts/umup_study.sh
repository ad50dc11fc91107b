#!/usr/bin/env bash
# u-muP beside muP (width) and beside muP and CompleteP (depth), on the built-in transformer on the
# embedded text (characters; 4 heads, context 64, batch 16, Adam), 3 seeds a job (n_seeds=3), each
# parameterization on an 8-point octave grid around its own optimum:
#   width: widths 32, 64, 128, 256 at depth 2, 200 steps: param=umup (log2 LR -6..1), param=mup
#          (-11..-4, its default base width 128);
#   depth: depths 2, 4, 8, 16 at width 64, 150 steps: param=umup, param=mup (no depth rule) and
#          param=completep (base depth 2, alpha 1), both base width 64.
# One scale at a time, smallest first, its parameterizations' jobs side by side (one thread each), so
# that a study cut short has every parameterization at the scales it reached. Re-running it skips the
# jobs already recorded.
# Usage: scripts/umup_study.sh [RESULTS_DIR] [width|depth|both]   (run it under nice -n 10 on a shared machine)
set -euo pipefail
RESULTS=${1:-results}
WHICH=${2:-both}
LRT=${LRT:-lrtransfer}
common=(model=transformer data=text model.heads=4 data.seq_len=64 train.batch_size=16 n_seeds=3
  engine.threads=1 engine.progress=false results_dir="$RESULTS")
umup=(param=umup lr.log2_min=-6 lr.log2_max=1)
mup=(lr.log2_min=-11 lr.log2_max=-4)

side_by_side() {  # each argument: one sweep's overrides, as one string; all run at once
  local pids=()
  for over in "$@"; do
    # shellcheck disable=SC2086
    $LRT sweep "${common[@]}" $over > /dev/null & pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}

if [[ $WHICH == width || $WHICH == both ]]; then
  start=$(date +%s); uptime
  for w in 32 64 128 256; do
    side_by_side "name=umup_width width=$w depth=2 train.steps=200 ${umup[*]}" \
                 "name=umup_width width=$w depth=2 train.steps=200 param=mup ${mup[*]}"
    echo "== width $w: $(( $(date +%s) - start )) s"; uptime
  done
  $LRT summary "$RESULTS/umup_width"
  $LRT plot "$RESULTS/umup_width"
fi
if [[ $WHICH == depth || $WHICH == both ]]; then
  start=$(date +%s); uptime
  for d in 2 4 8 16; do
    side_by_side "name=umup_depth width=64 depth=$d train.steps=150 ${umup[*]}" \
                 "name=umup_depth width=64 depth=$d train.steps=150 param=mup param.base_width=64 ${mup[*]}" \
                 "name=umup_depth width=64 depth=$d train.steps=150 param=completep param.base_width=64 ${mup[*]}"
    echo "== depth $d: $(( $(date +%s) - start )) s"; uptime
  done
  $LRT summary "$RESULTS/umup_depth"
  $LRT plot "$RESULTS/umup_depth"
fi

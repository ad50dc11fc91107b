#!/usr/bin/env bash
# The horizon and batch-size studies (issues 18 and 53), measured: the default MLP (width 128,
# SP, Adam, the teacher task) at train.steps 75..1200 (batch 64), and at train.batch_size
# 16..256 (300 steps), 3 seeds inside each job. Then each study's summary (drift per doubling
# of the axis, 95% interval, verdict) and figures, and docs/<study>-study.png: the loss-vs-LR
# and transfer figures side by side.
#
# With `rule` as the first argument, issue 53's studies of the SDE rule (param.sde_rule, base:
# 300 steps of batch 64), each beside its plain twin in the same study folder:
#   horizon         75..1200 steps under sde and under the exponent the plain study measures
#                   (e = minus its drift per doubling of train.steps);
#   batch           16..256 at 300 steps (kappa = 1: the rule changes nothing there) under sde;
#   batch_examples  16..256 at 19,200 examples (study=batch_examples: batch x 2, steps / 2),
#                   plain and under sde;
#   transformer     the built-in transformer on the embedded text under completep (width 64, 2
#                   blocks, context 32): 100 and 400 steps at batch 16 (sde_transformer_horizon),
#                   batch 8 and 16 at 100 and at 400 steps (sde_transformer_batch), plain and sde.
# Then each study's summary.json, and docs/sde-horizon.png, sde-batch_examples.png, sde-transformer-horizon.png,
# sde-transformer-batch.png.
# Usage: scripts/axes_study.sh [rule] [RESULTS_DIR] [extra overrides...]
# Re-running resumes: finished jobs are skipped. One torch thread per job.
set -euo pipefail
RULE=0
if [ "${1:-}" = rule ]; then RULE=1; shift; fi
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
PY=${PY:-python}
start=$(date +%s)

side_by_side() {  # side_by_side FIGURES_DIR OUT.png [NAME_PART]: the loss-vs-LR and transfer figures, side by side
  $PY - "$@" <<'PYEOF'
import sys
from pathlib import Path

from PIL import Image

figures, out = Path(sys.argv[1]), sys.argv[2]
part = sys.argv[3] if len(sys.argv) > 3 else ""
lr, transfer = (Image.open(next(p for p in sorted(figures.glob(f"*-{kind}-train_loss.png")) if part in p.name))
                for kind in ("lr", "transfer"))
side = Image.new("RGB", (lr.width + transfer.width, max(lr.height, transfer.height)), "white")
side.paste(lr, (0, 0))
side.paste(transfer, (lr.width, 0))
side.save(out)
print(f"wrote {out}")
PYEOF
}

report() {  # report STUDY [PNG]: summary, its JSON, figures
  $LRT summary "$RESULTS/$1"
  $LRT summary "$RESULTS/$1" --json > "$RESULTS/$1/summary.json"
  $LRT plot "$RESULTS/$1"
  if [ -n "${2:-}" ]; then side_by_side "$RESULTS/$1/figures" "$2"; fi
}

sweep() {  # sweep OVERRIDES...: 3 seeds a job, one thread
  $LRT sweep n_seeds=3 results_dir="$RESULTS" engine.threads=1 "$@" "${EXTRA[@]}"
  echo "== $*: $(( $(date +%s) - start )) s (load: $(cut -d' ' -f1-3 /proc/loadavg))"
}
EXTRA=("$@")

if [ $RULE = 0 ]; then
  for study in horizon batch; do
    sweep study=$study
    report $study "docs/$study-study.png"
  done
  echo "== total: $(( $(date +%s) - start )) s"
  exit 0
fi

# the plain twins (the horizon one's drift sets the exponent e)
sweep study=horizon
E=$($LRT summary "$RESULTS/horizon" --json | $PY -c '
import json, sys
groups = json.load(sys.stdin)["groups"]
plain = [g for g in groups if g["fixed"].get("param.sde_rule", "none") == "none"]
drift = plain[0]["drift"]
print(f"{-drift:.2f}")')
echo "== the plain horizon study drifts $(printf %s "-$E") octaves per doubling of train.steps: e = $E"
sweep study=horizon param.sde_rule=sde,"$E"
report horizon docs/sde-horizon.png
sweep study=batch param.sde_rule=none,sde
report batch  # kappa = 1 at every batch: the same numbers as the plain twin
sweep study=batch_examples param.sde_rule=none,sde
report batch_examples docs/sde-batch_examples.png

# the built-in transformer under completep, plain and with the rule (base: 200 steps of batch 16)
T=(model=transformer data=text param=completep param.base_width=64 param.base_depth=2 width=64 depth=2
   model.heads=4 data.seq_len=32 lr.log2_min=-13 lr.log2_max=-5 param.base_batch_size=16 param.base_steps=200
   param.sde_rule=none,sde)
sweep "${T[@]}" train.batch_size=16 train.steps=100,400 name=sde_transformer_horizon
report sde_transformer_horizon docs/sde-transformer-horizon.png
sweep "${T[@]}" train.batch_size=8,16 train.steps=100,400 name=sde_transformer_batch
report sde_transformer_batch docs/sde-transformer-batch.png
echo "== total: $(( $(date +%s) - start )) s"

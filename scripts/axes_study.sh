#!/usr/bin/env bash
# The horizon and batch-size studies (issue 18), measured: the default MLP (width 128,
# SP, Adam, the teacher task) at train.steps 75..1200 (batch 64), and at
# train.batch_size 16..256 (300 steps), 3 seeds inside each job. Then each study's
# summary (drift per doubling of the axis, 95% interval, verdict) and figures, and
# docs/<study>-study.png: the loss-vs-LR and transfer figures side by side.
# Usage: scripts/axes_study.sh [RESULTS_DIR] [extra overrides...]
# Re-running resumes: finished jobs are skipped. One torch thread per job.
set -euo pipefail
RESULTS=${1:-results}
shift || true
LRT=${LRT:-lrtransfer}
PY=${PY:-python}
start=$(date +%s)
for study in horizon batch; do
  $LRT sweep study=$study n_seeds=3 results_dir="$RESULTS" engine.threads=1 "$@"
  echo "== $study sweep: $(( $(date +%s) - start )) s"
  $LRT summary "$RESULTS/$study"
  $LRT summary "$RESULTS/$study" --json > "$RESULTS/$study/summary.json"
  $LRT plot "$RESULTS/$study"
  $PY - "$RESULTS/$study/figures" "docs/$study-study.png" <<'PYEOF'
import sys
from pathlib import Path

from PIL import Image

figures, out = Path(sys.argv[1]), sys.argv[2]
lr, transfer = (Image.open(next(figures.glob(f"*-{kind}-train_loss.png"))) for kind in ("lr", "transfer"))
side = Image.new("RGB", (lr.width + transfer.width, max(lr.height, transfer.height)), "white")
side.paste(lr, (0, 0))
side.paste(transfer, (lr.width, 0))
side.save(out)
print(f"wrote {out}")
PYEOF
done
echo "== total: $(( $(date +%s) - start )) s"

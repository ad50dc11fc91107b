#!/usr/bin/env bash
# The transformer depth study of docs/parameterizations.md (CompleteP): nanoGPT's model.py as published
# (karpathy/nanoGPT, its path given: nothing of it is copied), width 64 (4 heads of 16), depth 2, 4, 8, 16
# (n_layer) on the embedded text (characters, context 64, batch 16), 150 steps of Adam over 8 LRs at octave
# steps (2^-11..2^-4; 2^-13, 2^-12 added where mup's optimum was at the low edge), seeds 0, 1, 2, under
#   mup (base width 64: no width rule in play; no depth rule),
#   mup param.depth_exponent=0.5 (depth-muP's branch multiplier, L = 2 n_layer branches, no LR rule),
#   completep (base width 64, base depth 2, alpha 1: branches x (n_layer/2)^-1, LR and epsilon inside them),
#   and at alpha 0.5 (branches x (n_layer/2)^-0.5, its LR and epsilon corrections);
# two worker processes of one thread (needs `pip install "lrtransfer[joblib]"`). Then the summary and figures.
# Usage: scripts/completep_depth_study.sh NANOGPT_DIR [RESULTS_DIR] [extra overrides...]
# Re-running resumes: finished jobs are skipped.
set -euo pipefail
NANOGPT=${1:?usage: scripts/completep_depth_study.sh NANOGPT_DIR [RESULTS_DIR] [overrides...]}
RESULTS=${2:-results}
shift 2 || shift || true
LRT=${LRT:-lrtransfer}
MODEL="$NANOGPT/model.py"
start=$(date +%s)

common=(model=custom "model.target=$MODEL:GPT" "model.config=$MODEL:GPTConfig" model.width_key=n_embd
  model.depth_key=n_layer "model.config_kwargs={n_head: 4, dropout: 0.0}"
  data=text data.seq_len=64 data.eval_size=128 width=64 param.base_width=64
  seed=0,1,2 train.steps=150 train.batch_size=16
  engine.threads=1 hydra/launcher=parallel hydra.launcher.n_jobs=2 name=completep_depth results_dir="$RESULTS")
grid=(depth=2,4,8,16 lr.log2_min=-11 lr.log2_max=-4)
$LRT sweep "${common[@]}" "${grid[@]}" param=mup param.depth_exponent=0,0.5 "$@"
$LRT sweep "${common[@]}" "${grid[@]}" param=completep param.base_depth=2 param.alpha=1,0.5 "$@"
# mup without a depth rule found its depth-16 optimum at the grid's low edge (2^-11): two more LRs below it
$LRT sweep "${common[@]}" depth=16 lr.log2_min=-13 lr.log2_max=-12 param=mup param.depth_exponent=0 "$@"
echo "== sweep: $(( $(date +%s) - start )) s"
$LRT summary "$RESULTS/completep_depth"
$LRT summary "$RESULTS/completep_depth" --json > "$RESULTS/completep_depth/summary.json"
$LRT plot "$RESULTS/completep_depth"
echo "== total: $(( $(date +%s) - start )) s"

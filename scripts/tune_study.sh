#!/usr/bin/env bash
# The per-module hyperparameter studies of docs/tuning.md: a search at the base scale (width 64, depth 2), then
# its transfer check at widths 128, 256 and at depths 4, 8, for the built-in transformer and for nanoGPT's
# model.py as published (karpathy/nanoGPT, its path given: nothing of it is copied), each under completep and
# under standard, on the embedded text's characters (context 32, batch 8, 100 steps of Adam, one thread).
# Searched: the global LR, the LR multiplier of the embeddings, the hidden matrices and the vectors (biases and
# norms), the hidden matrices' init multiplier, the Adam epsilon multiplier of the hidden matrices and of the
# embeddings, the weight decay (per step: decay_scaling independent) and the readout's forward multiplier
# (param.output_mult).
# Trust-region search, 3 rounds of 32 points (its LR-only twin as many), the bests confirmed at 3 fresh seeds;
# the checks at 2 seeds.
# Usage: scripts/tune_study.sh NANOGPT_DIR [RESULTS_DIR] [which...]   which: transformer-completep,
#   transformer-standard, nanogpt-completep, nanogpt-standard (default: all four, in that order)
# Re-running resumes: finished rounds and jobs are replayed from their records.
set -euo pipefail
NANOGPT=${1:?usage: scripts/tune_study.sh NANOGPT_DIR [RESULTS_DIR] [which...]}
RESULTS=${2:-results}
shift 2 || shift || true
WHICH=${*:-transformer-completep transformer-standard nanogpt-completep nanogpt-standard}
LRT=${LRT:-lrtransfer}
MODEL="$NANOGPT/model.py"
EXTRA=${EXTRA:-}  # more search ranges (EXTRA="search.hp.hidden.beta2=[0.9,0.999]")

data=(data=text data.seq_len=32 data.eval_size=128 train.batch_size=8 train.steps=100 engine.threads=1
  engine.progress=false results_dir="$RESULTS")
transformer=(model=transformer model.heads=4)
nanogpt=(model=custom "model.target=$MODEL:GPT" "model.config=$MODEL:GPTConfig" model.width_key=n_embd
  model.depth_key=n_layer "model.config_kwargs={n_head: 4, dropout: 0.0}")
completep=(param=completep param.base_width=64 param.base_depth=2)
standard=(param=standard)
ranges=("search.lr=[0.000244140625,0.0625]" "search.hp.embedding.lr_mult=[0.125,8]" "search.hp.hidden.lr_mult=[0.125,8]"
  "search.hp.vector.lr_mult=[0.125,8]" "search.hp.hidden.init_mult=[0.25,4]"
  "search.hp.hidden.eps_mult=[0.0625,16]" "search.hp.embedding.eps_mult=[0.0625,16]" "search.optim.weight_decay=[0.00001,0.01]"
  "search.param.output_mult=[0.125,8]" search.policy=trust_region search.round_size=32 search.seeds=3)

for w in $WHICH; do
  model=${w%-*} param=${w#*-}
  declare -n m=$model p=$param
  name="tune_${model}_${param}"
  start=$(date +%s)
  # shellcheck disable=SC2086
  $LRT tune "${data[@]}" "${m[@]}" "${p[@]}" width=64 depth=2 "${ranges[@]}" $EXTRA name="$name" --budget 9600
  echo "== $name: tune $(( $(date +%s) - start )) s"
  $LRT sweep --transfer-from "$RESULTS/$name" width=128,256 search.seeds=2 engine.threads=1 engine.progress=false \
    name="${name}_width"
  echo "== $name: width check $(( $(date +%s) - start )) s"
  $LRT sweep --transfer-from "$RESULTS/$name" depth=4,8 search.seeds=2 engine.threads=1 engine.progress=false \
    name="${name}_depth"
  echo "== $name: depth check $(( $(date +%s) - start )) s"
  unset -n m p
done
$LRT summary "$RESULTS"
$LRT summary "$RESULTS" --json > "$RESULTS/tune-summary.json"
$LRT plot "$RESULTS"

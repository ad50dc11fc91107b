#!/usr/bin/env bash
# karpathy's nanoGPT train.py, unchanged, as a trainer=command study on a CPU (docs/own-trainer.md):
# widths 32, 64, 128 at 2 layers, 100 iterations, 11 LRs (2^-13 .. 2^-3), 2 seeds, on the embedded
# text's characters; then the same study with --until-decided.
#
#   scripts/nanogpt_command_study.sh NANOGPT_CHECKOUT [RESULTS_DIR] [fixed|adaptive|both|launchers] [EXTRA OVERRIDES...]
#
# `launchers` (after `fixed`) runs the fixed study again through hydra/launcher=processes and, where
# a SLURM cluster answers `sinfo` (scripts/cluster_check.sh start slurm), hydra/launcher=slurm, and
# checks that every record's runs equal the in-process study's.
#
# It copies train.py, model.py and configurator.py from the checkout into a scratch folder
# ($NANOGPT_SCRATCH, default /tmp/lrtransfer-nanogpt: nothing of nanoGPT enters this repository),
# writes the embedded text there as nanoGPT's data/lrt_char/ (scripts/char_tokens.py) and a config
# file, seeded.py, that gives each run its own seed (below), then sweeps, summarises, plots and
# reports. EXTRA OVERRIDES go to both sweeps (hydra/launcher=processes, trainer.parallel=1, ...).
#
# Seeds: train.py has no --seed (it seeds torch.manual_seed(1337 + seed_offset), and seed_offset
# is set after the command line is read), so the script is not edited: seeded.py, a config file
# train.py runs before its --key=value settings, wraps torch.manual_seed to add $NANOGPT_SEED,
# which trainer.env sets to each run's {seed}: both the initialisation and the batches follow it.
set -euo pipefail
cd "$(dirname "$0")/.."

NANOGPT=${1:?usage: $0 NANOGPT_CHECKOUT [RESULTS_DIR] [fixed|adaptive|both|launchers] [EXTRA OVERRIDES...]}
RESULTS=${2:-results}
WHICH=${3:-both}
shift $(( $# < 3 ? $# : 3 ))
PY=$(pwd)/.venv/bin/python
LRT=$(pwd)/.venv/bin/lrtransfer
SCRATCH=${NANOGPT_SCRATCH:-/tmp/lrtransfer-nanogpt}

for f in train.py model.py configurator.py; do
    [ -f "$NANOGPT/$f" ] || { echo "error: $NANOGPT/$f not found: give a checkout of karpathy/nanoGPT" >&2; exit 2; }
done
mkdir -p "$SCRATCH"
cp "$NANOGPT"/{train.py,model.py,configurator.py} "$SCRATCH"/
[ -f "$SCRATCH/data/lrt_char/meta.pkl" ] || "$PY" scripts/char_tokens.py "$SCRATCH/data/lrt_char"
cat > "$SCRATCH/seeded.py" <<'EOF'
# nanoGPT config file: each run's seed without editing train.py (scripts/nanogpt_command_study.sh).
import os as _os, torch as _torch
_seed, _manual_seed = int(_os.environ.get("NANOGPT_SEED", "0")), _torch.manual_seed
_torch.manual_seed = lambda s: _manual_seed(s + _seed)
EOF

COMMAND="$PY train.py seeded.py --dataset=lrt_char --device=cpu --compile=False --dtype=float32
 --n_layer={depth} --n_head={width//32} --n_embd={width} --block_size=64 --batch_size={train.batch_size}
 --gradient_accumulation_steps=1 --max_iters={train.steps} --lr_decay_iters={train.steps} --warmup_iters=10
 --learning_rate={lr} --min_lr={lr/10} --eval_interval={train.steps} --eval_iters=10 --log_interval=1
 --dropout=0.0 --out_dir={run_dir} --always_save_checkpoint=False"
COMMAND=$(echo $COMMAND)  # one line
STUDY=(
    trainer=command "trainer.command='$COMMAND'" "trainer.cwd=$SCRATCH" "trainer.label='nanoGPT (SP)'"
    "trainer.sources=[model.py,configurator.py,seeded.py,data/lrt_char]"
    "+trainer.env.NANOGPT_SEED='{seed}'" +trainer.env.OMP_NUM_THREADS=1 trainer.parallel=2
    # nanoGPT prints `iter N: loss X, time ...` every iteration and `step N: train loss X, val loss Y` at
    # each eval: the loss from the former, the held-out loss from the latter
    "trainer.loss_pattern='iter (?P<step>\\d+): loss (?P<loss>[^,]+),|val loss (?P<eval_loss>\\S+)'"
    width=32,64,128 depth=2 train.steps=100 train.batch_size=8 lr.log2_min=-13 lr.log2_max=-3 lr.log2_step=1
)

run() {  # NAME ARGS...: sweep, then what every study gets
    local name=$1; shift
    uptime
    /usr/bin/time -f "sweep wall %e s" "$LRT" sweep "${STUDY[@]}" results_dir="$RESULTS" name="$name" "$@"
    find "$RESULTS/$name" -name ckpt.pt -delete  # nanoGPT's checkpoints: the records say what the study needs
    "$LRT" summary "$RESULTS/$name"
    "$LRT" plot "$RESULTS/$name"
    "$LRT" report "$RESULTS/$name"
}

same_records() {  # NAME: its records' runs equal the fixed study's, job by job (the same ids under every launcher)
    "$PY" - "$RESULTS/nanogpt" "$RESULTS/$1" <<'EOF'
import json, sys
from pathlib import Path
def runs(root):
    return {p.parent.name: json.loads(p.read_text()).get("runs") for p in Path(root).glob("*/record.json")}
ref, other = runs(sys.argv[1]), runs(sys.argv[2])
same = [j for j in ref if other.get(j) == ref[j]]
print(f"{sys.argv[2]}: {len(other)} records, {len(same)} of the {len(ref)} in-process ones with the same runs, bit for bit")
sys.exit(0 if other and len(same) == len(ref) == len(other) else 1)
EOF
}

launchers() {  # the fixed study again through hydra/launcher=processes, and SLURM where `sinfo` answers
    run nanogpt_processes "$@" n_seeds=2 hydra/launcher=processes
    same_records nanogpt_processes
    if sinfo >/dev/null 2>&1; then
        run nanogpt_slurm "$@" n_seeds=2 hydra/launcher=slurm hydra.launcher.partition=debug \
            hydra.launcher.cpus_per_task=1 hydra.launcher.mem_gb=2 hydra.launcher.timeout_min=120
        same_records nanogpt_slurm
    else
        echo "no SLURM cluster answers sinfo here (scripts/cluster_check.sh start slurm starts one): SLURM skipped" >&2
    fi
}

case $WHICH in
    fixed) run nanogpt "$@" n_seeds=2 ;;
    adaptive) run nanogpt_adaptive --until-decided "$@" ;;
    both) run nanogpt "$@" n_seeds=2; run nanogpt_adaptive --until-decided "$@" ;;
    launchers) launchers "$@" ;;
    *) echo "error: unknown part '$WHICH'; valid: fixed, adaptive, both, launchers" >&2; exit 2 ;;
esac

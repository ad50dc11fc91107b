#!/usr/bin/env bash
# The GPU checks of docs/performance.md, in parts that each fit a 10-minute run on
# a lent GPU machine whose image has PyTorch (CUDA) but not Hydra, and no package registry.
#
#   scripts/gpu_session.sh wheels       # here, with the registries: Hydra's wheels into .gpu-wheels/
#   scripts/gpu_session.sh tests  OUT   # there (carry .gpu-wheels): install, then the cuda tests
#   scripts/gpu_session.sh suite  OUT   # there: the whole suite, 8 workers (optional extras missing there skip)
#   scripts/gpu_session.sh bench  OUT   # there: bench_engine on the GPU, float32, TF32 and bf16, widths 64..8192
#   scripts/gpu_session.sh study  OUT [OVERRIDES]  # there: the transformer width study, 128..2048,
#                                       # 3 seeds; re-running resumes, finished jobs are skipped
#   NANOGPT_DIR=DIR scripts/gpu_session.sh published OUT  # there: GPT-2 and nanoGPT as published
#
# Every part but `wheels` installs first (seconds once installed) and writes its logs and
# records under OUT. PYTHON (default python3) is the interpreter that holds the CUDA torch.
set -euo pipefail
part=${1:?usage: scripts/gpu_session.sh wheels|tests|suite|bench|study|published [OUT]}
OUT=${2:-gpu-out}
PY=${PYTHON:-python3}
WHEELS=.gpu-wheels
# Hydra and what it pins, none of them in the GPU image; pure Python, any interpreter.
NEEDED=("hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" "antlr4-python3-runtime==4.9.*" "hydra-joblib-launcher>=1.2.0")

install() {
  if ! "$PY" -c "import hydra, lrtransfer" 2>/dev/null; then
    "$PY" -m pip install -q --no-index --find-links "$WHEELS" --no-build-isolation "${NEEDED[@]}"
    "$PY" -m pip install -q --no-deps --no-build-isolation -e .
  fi
  "$PY" - <<'EOF'
import torch
assert torch.cuda.is_available(), "no CUDA device visible to this torch"
print(f"torch {torch.__version__} on {torch.cuda.get_device_name()}")
EOF
  mkdir -p "$OUT"
}

case $part in
  wheels)
    "$PY" -m pip download -q --no-deps -d "$WHEELS" "${NEEDED[@]}"
    # antlr4's runtime is an sdist: built into a wheel here, where setuptools is at hand
    for sdist in "$WHEELS"/*.tar.gz; do
      [ -e "$sdist" ] && "$PY" -m pip wheel -q --no-deps -w "$WHEELS" "$sdist" && rm "$sdist"
    done
    ls "$WHEELS"
    ;;
  tests)
    install
    "$PY" -m pytest -q -rs -n 4 -m cuda tests/test_cuda.py 2>&1 | tee "$OUT/cuda-tests.log"
    ;;
  suite)
    install
    "$PY" -m pytest -q -rf -n 8 -m "not cuda" 2>&1 | tail -n 40 | tee "$OUT/suite.log" || true
    ;;
  bench)
    install
    # the bf16/fp32 matmul ratio, bf16 against float32, then batched against one run at a time
    "$PY" scripts/bench_engine.py --device cuda --widths 64,256,1024,4096,8192 --bf16-widths 1024,4096 \
      --transformer-width 1024 --dtype float32,tf32,bf16 --rounds 5 "${@:3}" 2>&1 | tee "$OUT/bench.log"
    # wide and compute-bound: at batch 64 a wide step is the optimizer's pass over memory, not products
    "$PY" scripts/bench_engine.py --device cuda --only 2 --widths 4096,8192 --batch 4096 --dtype tf32,bf16 \
      --rounds 5 2>&1 | tee "$OUT/bench-batch4096.log"
    ;;
  study)
    install
    # bf16 and ensembles sized to 60 GiB of the GPU's memory; later overrides win
    "$PY" -m lrtransfer.cli.app sweep model=transformer data=text width=128,256,512,1024,2048 depth=2 \
      model.heads=4 data.seq_len=64 train.batch_size=32 train.steps=500 n_seeds=3 \
      param=standard,mup,modular engine.device=cuda train.dtype=bf16 engine.max_memory_gb=60 \
      name=transformer-gpu results_dir="$OUT" "${@:3}" 2>&1 | tail -n 60 | tee "$OUT/study.log"
    ;;
  published)
    # docs/published-models.md's GPU studies, side by side on the one GPU (three sweeps of 4 jobs at a time, TF32,
    # 15 GiB each): GPT-2 as published (transformers, its own init) at widths 128..2048 under standard
    # and mup, and nanoGPT as published (NANOGPT_DIR/model.py, not part of this project) at depths
    # 2..16 under mup and completep, 500 steps. Records (no checkpoints) end up in OUT/published.tar.gz;
    # re-running with that tarball unpacked in OUT resumes, finished jobs skipped. ONLY=gpt2 or depth
    # runs one study alone (side by side, 337 s on an H200 finished 22 of GPT-2's 30 jobs and 18 of 24).
    install
    export HF_HUB_OFFLINE=1
    NANOGPT=${NANOGPT_DIR:?set NANOGPT_DIR to the folder of nanoGPT model.py}
    LIMIT=${LIMIT:-520}
    gpu=(engine.device=cuda train.dtype=tf32 engine.max_memory_gb=15 hydra/launcher=parallel
         hydra.launcher.n_jobs=4 data=text data.seq_len=64 data.eval_size=256 train.batch_size=32
         train.steps=500 seed=0,1,2 results_dir="$OUT/published")
    ONLY=${ONLY:-both}  # gpt2 | depth | both: one study gets the GPU to itself
    start=$(date +%s)
    [ "$ONLY" = depth ] || timeout "$LIMIT" "$PY" -m lrtransfer.cli.app sweep model=custom model.target=transformers:GPT2LMHeadModel \
      model.config=transformers:GPT2Config model.width_key=n_embd model.depth_key=n_layer \
      model.config_kwargs='{n_head: 4, activation_function: gelu_pytorch_tanh, resid_pdrop: 0.0, embd_pdrop: 0.0, attn_pdrop: 0.0}' \
      depth=2 width=128,256,512,1024,2048 param=standard,mup lr.log2_min=-15 lr.log2_max=-7 \
      name=gpt2-gpu "${gpu[@]}" >"$OUT/gpt2.log" 2>&1 &
    [ "$ONLY" = gpt2 ] || timeout "$LIMIT" "$PY" -m lrtransfer.cli.app sweep model=custom "model.target=$NANOGPT/model.py:GPT" \
      "model.config=$NANOGPT/model.py:GPTConfig" model.width_key=n_embd model.depth_key=n_layer \
      "model.config_kwargs={n_head: 4, dropout: 0.0}" width=256 param.base_width=256 depth=2,4,8,16 \
      param=completep param.base_depth=2 lr.log2_min=-13 lr.log2_max=-6 name=depth-gpu "${gpu[@]}" \
      >"$OUT/depth-completep.log" 2>&1 &
    [ "$ONLY" = gpt2 ] || timeout "$LIMIT" "$PY" -m lrtransfer.cli.app sweep model=custom "model.target=$NANOGPT/model.py:GPT" \
      "model.config=$NANOGPT/model.py:GPTConfig" model.width_key=n_embd model.depth_key=n_layer \
      "model.config_kwargs={n_head: 4, dropout: 0.0}" width=256 param.base_width=256 depth=2,4,8,16 \
      param=mup lr.log2_min=-13 lr.log2_max=-6 name=depth-gpu "${gpu[@]}" >"$OUT/depth-mup.log" 2>&1 &
    wait || true
    echo "== studies: $(( $(date +%s) - start )) s"
    # the records alone come back (a device returns files of at most 16 MiB)
    (cd "$OUT" && find published -name record.json -o -name multirun.yaml | tar -czf published.tar.gz -T -)
    rm -rf "$OUT/published"
    tail -n 5 "$OUT"/*.log 2>/dev/null || true
    ;;
  *)
    echo "unknown part '$part'; valid: wheels, tests, suite, bench, study, published" >&2
    exit 2
    ;;
esac

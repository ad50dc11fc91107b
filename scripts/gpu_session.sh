#!/usr/bin/env bash
# The GPU checks of docs/performance.md, in parts that each fit a 10-minute run on
# a lent GPU machine whose image has PyTorch (CUDA) but not Hydra, and no package registry.
#
#   scripts/gpu_session.sh wheels       # here, with the registries: Hydra's wheels into .gpu-wheels/
#   scripts/gpu_session.sh tests  OUT   # there (carry .gpu-wheels): install, the cuda tests, then the suite
#   scripts/gpu_session.sh bench  OUT   # there: bench_engine on the GPU, float32 and bf16, widths 64..8192
#   scripts/gpu_session.sh study  OUT [OVERRIDES]  # there: the transformer width study, 128..2048,
#                                       # 3 seeds; re-running resumes, finished jobs are skipped
#
# Every part but `wheels` installs first (seconds once installed) and writes its logs and
# records under OUT. PYTHON (default python3) is the interpreter that holds the CUDA torch.
set -euo pipefail
part=${1:?usage: scripts/gpu_session.sh wheels|tests|bench|study [OUT]}
OUT=${2:-gpu-out}
PY=${PYTHON:-python3}
WHEELS=.gpu-wheels
# Hydra and what it pins, none of them in the GPU image; pure Python, any interpreter.
NEEDED=("hydra-core>=1.3.2,<1.4" "omegaconf>=2.3,<2.4" "antlr4-python3-runtime==4.9.*")

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
    ls "$WHEELS"
    ;;
  tests)
    install
    "$PY" -m pytest -q -rs -m cuda tests/test_cuda.py 2>&1 | tee "$OUT/cuda-tests.log"
    # the rest of the suite as the GPU image can run it (optional extras missing there skip)
    "$PY" -m pytest -q -rf 2>&1 | tail -n 40 >"$OUT/suite.log" || true
    tail -n 3 "$OUT/suite.log"
    ;;
  bench)
    install
    # the bf16/fp32 matmul ratio, bf16 against float32, then batched against one run at a time
    "$PY" scripts/bench_engine.py --device cuda --widths 64,256,1024,4096,8192 --bf16-widths 1024,4096 \
      --transformer-width 1024 2>&1 | tee "$OUT/bench.log"
    ;;
  study)
    install
    # bf16 and ensembles sized to 60 GiB of the GPU's memory; later overrides win
    "$PY" -m lrtransfer.cli.app sweep model=transformer data=text width=128,256,512,1024,2048 depth=2 \
      model.heads=4 data.seq_len=64 train.batch_size=32 train.steps=500 n_seeds=3 \
      param=standard,mup,modular engine.device=cuda train.dtype=bf16 engine.max_memory_gb=60 \
      name=transformer-gpu results_dir="$OUT" "${@:3}" 2>&1 | tail -n 60 | tee "$OUT/study.log"
    ;;
  *)
    echo "unknown part '$part'; valid: wheels, tests, bench, study" >&2
    exit 2
    ;;
esac

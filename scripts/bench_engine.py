"""How fast does a job's LR grid train? Prints run-steps/s and GFLOP/s per width.

Compares, on the same job (one width, the default LR grid, Adam, the teacher data):
  (a) one process per run, as a per-LR Hydra job or a bash loop would do
      (measured on two runs, extrapolated per run);
  (b) one run at a time in this process (engine.batched=false, the reference path);
  (c) the batched engine (the whole grid as one ensemble);
and the machine's torch.mm rate over the matrix products of one training step (the
forward, input-gradient and weight-gradient products of every layer, each timed on
its own): the rate the step would reach if it were nothing but its matmuls.
GFLOP/s counts 6 x parameters x batch per run-step (forward + backward).

    python scripts/bench_engine.py                      # widths 64..2048, depth 3
    python scripts/bench_engine.py --widths 64,256 --steps 50 --skip-processes
    python scripts/bench_engine.py --profile 512      # where a steady-state step's time goes
    python scripts/bench_engine.py --compile 64       # the step with the model under torch.compile
    python scripts/bench_engine.py --custom --widths 64 --skip-processes  # the same MLP as model=custom
    python scripts/bench_engine.py --device cuda --dtype bf16_autocast --widths 64,512,4096,8192

`--custom` trains the same MLP given as a user's module (`model=custom`,
examples/mynets.py:build): one run at a time is a plain functional_call per step, the
batched path functional_call under torch.func.vmap over the runs.

`--device cuda` runs every mode on the GPU (timings end with the results copied back, so the
GPU has finished); `--dtype` is train.dtype, and the matmul rate is measured in its numerics:
bfloat16 operands for bf16_autocast, TF32 allowed for tf32, float32 otherwise.

Timings on a shared or throttled machine vary by +-20%: run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import typed  # noqa: E402  (composes configs through Hydra)

from lrtransfer.training import build, engine, memory  # noqa: E402
from lrtransfer.sweeps.job import runs_of  # noqa: E402

CUSTOM = ["model=custom", f"model.target={Path(__file__).resolve().parents[1] / 'examples' / 'mynets.py'}:build"]


def params_of(cfg, input_dim: int, classes: int) -> int:
    w, d = cfg.width, cfg.depth
    return (input_dim * w + w) + (d - 2) * (w * w + w) + (w * classes + classes)


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def mm_gflops(shapes: list[tuple[int, int, int]], device: torch.device, dtype: str, seconds: float = 0.3) -> float:
    """The device's torch.mm rate over a training step's matrix products, in the numerics of
    train.dtype `dtype`: total flops over total time for the (m, k, n) shapes given, each timed
    on its own."""
    element = torch.bfloat16 if dtype == "bf16_autocast" else torch.float64 if dtype == "float64" else torch.float32
    tf32 = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
    flops = total = 0.0
    try:
        for m, k, n in shapes:
            a = torch.randn(m, k, device=device, dtype=element)
            b = torch.randn(k, n, device=device, dtype=element)
            for _ in range(3):
                a @ b
            sync(device)
            reps, t0 = 0, time.perf_counter()
            while time.perf_counter() - t0 < seconds:
                for _ in range(10):
                    a @ b
                sync(device)
                reps += 10
            total += (time.perf_counter() - t0) / reps
            flops += 2 * m * k * n
    finally:
        torch.backends.cuda.matmul.allow_tf32 = tf32
    return flops / total / 1e9


def step_shapes(cfg, input_dim: int, classes: int, batch: int) -> list[tuple[int, int, int]]:
    """The products of one run's training step on the MLP: per layer a -> b, the forward
    x @ W (B, a, b), the weight gradient x^T @ g (a, B, b) and, except for the first
    layer, the input gradient g @ W^T (B, b, a)."""
    dims = [input_dim] + [cfg.width] * (cfg.depth - 1) + [classes]
    out = []
    for i, (a, b) in enumerate(zip(dims[:-1], dims[1:])):
        out += [(batch, a, b), (a, batch, b)] + ([(batch, b, a)] if i > 0 else [])
    return out


def one_process_per_run(overrides: list[str], log2_lrs: list[float], results: Path) -> float:
    """Seconds per run when each run is its own `lrtransfer sweep` process (two runs measured)."""
    exe = Path(sys.executable).with_name("lrtransfer")
    total = 0.0
    for log2 in log2_lrs[:2]:
        cmd = [str(exe), "sweep", *overrides, f"lr.log2_min={log2}", f"lr.log2_max={log2}",
               "engine.progress=false", f"results_dir={results}", "--rerun"]
        total += timed(lambda: subprocess.run(cmd, check=True, capture_output=True))
    return total / 2


def steady_ensemble(width: int, depth: int, batch: int, device: str = "cpu"):
    """The first ensemble the engine would train for the default grid at `width`, warmed up."""
    cfg = typed(f"width={width}", f"depth={depth}", f"train.batch_size={batch}", "train.steps=1000",
                f"engine.device={device}", "engine.progress=false")
    built = build.job(cfg)
    runs = runs_of(cfg)
    K = memory.chunk_size(built, len(runs))
    return cfg, engine.Ensemble(built, runs[:K]), K


def ms_per_step(ens, n: int = 30) -> float:
    for _ in range(5):
        ens.step()
    sync(ens.device)
    return timed(lambda: ([ens.step() for _ in range(n)], sync(ens.device))) / n * 1e3


def profile(width: int, depth: int, batch: int, device: str) -> None:
    """Time a steady-state step and print torch's profile of it (top operations by own time)."""
    cfg, ens, K = steady_ensemble(width, depth, batch, device)
    t = ms_per_step(ens)
    flop = 6 * params_of(cfg, cfg.data.input_dim, cfg.data.classes) * batch * K
    print(f"width {width}, ensembles of {K} runs: {t:.2f} ms per step, {flop / t / 1e6:.1f} GFLOP/s")
    with torch.profiler.profile() as prof:
        for _ in range(10):
            ens.step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


def compiled(width: int, depth: int, batch: int, device: str) -> None:
    """A steady-state step eager, then with the model under torch.compile (and its compile time)."""
    _, ens, K = steady_ensemble(width, depth, batch, device)
    print(f"width {width}, ensembles of {K} runs: eager {ms_per_step(ens, 200):.2f} ms per step")
    _, ens, _ = steady_ensemble(width, depth, batch, device)
    ens.model = torch.compile(ens.model)
    print(f"compilation (first step): {timed(ens.step):.1f} s")
    print(f"compiled model: {ms_per_step(ens, 200):.2f} ms per step")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--widths", default="64,128,256,512,1024,2048")
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--steps", type=int, default=100)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--skip-processes", action="store_true", help="skip (a), the slowest to measure")
    ap.add_argument("--results", default="/tmp/lrtransfer-bench")
    ap.add_argument("--custom", action="store_true", help="the MLP as a user's nn.Module (model=custom)")
    ap.add_argument("--profile", type=int, metavar="WIDTH", help="profile a steady-state step at WIDTH instead")
    ap.add_argument("--compile", type=int, metavar="WIDTH", help="time a step eager and under torch.compile instead")
    ap.add_argument("--device", default="cpu", help="engine.device: cpu, cuda, cuda:N")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bf16_autocast", "tf32"], help="train.dtype")
    args = ap.parse_args()
    try:
        device = build.select_device(args.device)
    except build.DeviceError as e:
        ap.error(str(e))
    if args.profile:
        profile(args.profile, args.depth, args.batch, args.device)
        return
    if args.compile:
        compiled(args.compile, args.depth, args.batch, args.device)
        return

    where = torch.cuda.get_device_name(device) if device.type == "cuda" else f"{torch.get_num_threads()} threads"
    print(f"torch {torch.__version__}, {where}, {args.dtype}, steps {args.steps}, batch {args.batch}, "
          f"depth {args.depth}, model {'custom (examples/mynets.py:build)' if args.custom else 'mlp'}")
    header = (f"{'width':>6} {'K':>3} {'(a) proc/run':>12} {'(b) seq':>9} {'(c) batched':>11} "
              f"{'c/a':>6} {'c/b':>6} {'GFLOP/s b':>9} {'GFLOP/s c':>9} {'mm GFLOP/s':>10} {'c/mm':>6}")
    print("run-steps/s per mode; GFLOP/s = 6 x params x batch x run-steps/s")
    print(header)
    for width in [int(w) for w in args.widths.split(",")]:
        over = [f"width={width}", f"depth={args.depth}", f"train.steps={args.steps}", f"train.batch_size={args.batch}",
                f"engine.device={args.device}", f"train.dtype={args.dtype}", "engine.progress=false",
                *(CUSTOM if args.custom else [])]
        cfg = typed(*over)
        runs = runs_of(cfg)
        K, steps = len(runs), args.steps
        n_params = params_of(cfg, cfg.data.input_dim, cfg.data.classes)
        flop_per_run_step = 6 * n_params * args.batch

        engine.train(build.job(typed(*over, "train.steps=3")), runs[:2])  # warm-up: allocator, kernels
        t_c = timed(lambda: engine.train(build.job(cfg), runs))
        t_b = timed(lambda: engine.train(build.job(typed(*over, "engine.batched=false")), runs))
        rate_c, rate_b = K * steps / t_c, K * steps / t_b
        if args.skip_processes:
            rate_a = float("nan")
        else:
            per_run = one_process_per_run(over, [r.log2_lr for r in runs], Path(args.results))
            rate_a = steps / per_run
        mm = mm_gflops(step_shapes(cfg, cfg.data.input_dim, cfg.data.classes, args.batch), device, args.dtype)
        g_b, g_c = rate_b * flop_per_run_step / 1e9, rate_c * flop_per_run_step / 1e9
        print(f"{width:>6} {K:>3} {rate_a:>12.0f} {rate_b:>9.0f} {rate_c:>11.0f} "
              f"{rate_c / rate_a:>6.1f} {rate_c / rate_b:>6.2f} {g_b:>9.1f} {g_c:>9.1f} {mm:>10.1f} {g_c / mm:>6.0%}")
        sys.stdout.flush()
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    main()

"""How fast does a job's LR grid train? Prints the comparisons docs/performance.md reports.

Every comparison is measured in this one process, its modes interleaved (a few steps of
each in turn, several rounds) and summarised by medians, so that a machine shared with
other work slows every mode alike: the ratios hold where absolute figures do not. A ratio is
also given as the median of the rounds' own ratios with their quartiles: two modes of one
round ran side by side, so that spread is what the machine's changing load leaves of it.
Steady-state steps are timed (after warm-up), not a job's set-up or evaluation; runs that
diverge are frozen at the checks, as in a job.

  0. The machine: what computes bf16 matrix products (AMX, AVX-512 BF16, tensor cores, or
     "no bf16 matrix unit") and the bf16/fp32 torch.mm ratio at 1024^3 (one thread on a CPU).
  1. bf16 against float32 (`train.dtype=bf16`): the MLP (depth 3, batch 64) with K = 11
     runs at --bf16-widths, and the built-in transformer (2 blocks, context 64, batch 16) at
     --transformer-width; run-steps/s and their ratio. Then where a step's time goes in each
     dtype (its forward and backward, its optimizer pass, each timed alone) and what that
     allows: bf16's speed-up were its optimizer pass as cheap as float32's (the masters and
     moments are float32 in both), and, on the MLP, were nothing left but its products
     (torch.bmm in bf16 on the step's shapes for the K runs) and that pass.
  2. float32 (or --dtype): the batched engine (the ensembles `memory.chunk_size` chooses for
     the default grid of 11 LRs) against one run at a time (eager, as a plain loop runs it; on a GPU
     also the batched engine eager, and whether its step replays as a CUDA graph), at --widths; and the batched
     step's rate, GFLOP/s = a step's matrix-product flops x run-steps/s (the forward, the weight
     gradient and, past the first layer, the input gradient of every layer: what a step computes),
     as a share of torch.mm's rate on the same products, each timed on its own, in the same
     numerics, measured in the same rounds; and as a share of torch.bmm's on the same products
     for K different runs at once (what the ensemble's products are: K weights, not one). On a
     CPU also the batched step's optimizer pass and the share of torch.mm's rate a step could
     reach with nothing but its products at the bmm rate and that pass.
  3. Adam's settings per tensor and per run, at --settings-widths (the MLP, K = 11 runs): the
     step and its optimizer pass with one beta1, beta2 and epsilon for every tensor (the
     default, param.sde_rule=none), with each tensor's own (param.sde_rule=sde at kappa 4: the
     fused kernel still takes each setting whole) and with one per run (grid.optim.beta2: small
     tensors go run by run, as the large ones always do); each as a ratio to the first.

    python scripts/bench_engine.py                      # all of it, one thread (~10 min)
    python scripts/bench_engine.py --only 2 --widths 64,256 --processes
    python scripts/bench_engine.py --profile 512      # where a steady-state step's time goes
    python scripts/bench_engine.py --compile 64       # the step with the model under torch.compile
    python scripts/bench_engine.py --custom --only 2 --widths 64  # the same MLP as model=custom
    python scripts/bench_engine.py --device cuda --widths 64,512,4096,8192
    python scripts/bench_engine.py --only 3 --settings-widths 64,512 # per-tensor and per-run betas

`--processes` adds, to 2, one process per run (each run its own `lrtransfer sweep`, as a
per-LR Hydra job or a bash loop: two runs measured, whole processes). `--custom` trains
the same MLP given as a user's module (`model=custom`, examples/mynets.py:build).
`--device cuda` runs every mode on the GPU (each timing ends with a synchronisation).
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import torch

# The threads the user's shell asked for, read before tests.conftest (imported next) sets
# OMP_NUM_THREADS for the test suite: that setting is the suite's, not this run's.
THREADS_ASKED = os.environ.get("OMP_NUM_THREADS")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from tests.conftest import typed  # noqa: E402  (composes configs through Hydra)

from lrtransfer.sweeps.job import runs_of  # noqa: E402
from lrtransfer.training import build  # noqa: E402
from lrtransfer.training.allocator import keep_freed_memory  # noqa: E402
from lrtransfer.training.ensemble import Ensemble  # noqa: E402
from lrtransfer.training.precision import bf16_unit  # noqa: E402

from bench_steps import ensemble, gradients, optimizer_pass, stepper  # noqa: E402
from bench_timing import (cpu_model, each_round, interleaved, medians, per_call, ratios, repeated,  # noqa: E402
                          spread, sync, timed)

CUSTOM = ["model=custom", f"model.target={Path(__file__).resolve().parents[1] / 'examples' / 'mynets.py'}:build"]
MLP = ["depth=3", "train.batch_size=64"]
TRANSFORMER = ["model=transformer", "data=text", "depth=2", "model.heads=4", "data.seq_len=64", "train.batch_size=16"]


def element(dtype: str) -> torch.dtype:
    return {"bf16": torch.bfloat16, "bf16_autocast": torch.bfloat16, "float64": torch.float64}.get(dtype, torch.float32)


def mm_calls(shapes: list[tuple[int, int, int]], device: torch.device, dtype: str, runs: int = 1):
    """(flops, a call doing torch.mm once on each (m, k, n) of `shapes`) in the numerics of train.dtype
    `dtype` (TF32 allowed for tf32 only); with runs K > 1, torch.bmm on K different pairs of each
    shape at once, as an ensemble's step multiplies K runs' different weights."""
    lead = (runs,) if runs > 1 else ()
    pairs = [(torch.randn(*lead, m, k, device=device, dtype=element(dtype)),
              torch.randn(*lead, k, n, device=device, dtype=element(dtype))) for m, k, n in shapes]

    def call() -> None:
        tf32 = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = dtype == "tf32"
        try:
            for a, b in pairs:
                a @ b
        finally:
            torch.backends.cuda.matmul.allow_tf32 = tf32

    return runs * sum(2 * m * k * n for m, k, n in shapes), call


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


# ---------------------------------------------------------------- the sections
def machine(device: torch.device, rounds: int) -> float | None:
    """Section 0: what computes bf16 products here, and the bf16/fp32 torch.mm ratio at 1024^3."""
    if device.type == "cuda":
        where = torch.cuda.get_device_name(device)
    else:
        kept = "freed memory kept" if keep_freed_memory() else "the C library's allocator as it is"
        where = f"{cpu_model()}, {torch.get_num_threads()} thread(s), {kept}"
    print(f"torch {torch.__version__}, {device}: {where}; load average {os.getloadavg()[0]:.1f} at the start")
    unit = bf16_unit(device)
    calls = {d: mm_calls([(1024, 1024, 1024)] * 4, device, d)[1] for d in ("float32", "bf16")}
    s = interleaved(calls, device, rounds)
    ratio = s["float32"] / s["bf16"]
    flops = 2 * 1024**3 * 4
    said = "no bf16 matrix unit" if unit is None else unit.name + (
        " (a bf16 matrix unit)" if unit.matrix else " instructions (no bf16 matrix unit)")
    print(f"0. bf16 products: {said}; torch.mm 1024^3: float32 "
          f"{flops / s['float32'] / 1e9:.0f} GFLOP/s, bf16 {flops / s['bf16'] / 1e9:.0f} GFLOP/s, "
          f"bf16/fp32 {ratio:.2f}x" + ("" if unit else " (no bf16 matrix unit: no speed-up to expect)"))
    if device.type == "cuda":  # the GPU's own ceiling: a product large enough to fill it
        n = 8192
        peak = {d: mm_calls([(n, n, n)], device, d)[1] for d in ("float32", "tf32", "bf16")}
        s = interleaved(peak, device, rounds)
        PEAK.update({d: 2 * n**3 / s[d] / 1e9 for d in peak})
        print(f"   torch.mm {n}^3 (the GPU's measured matmul rate): "
              + ", ".join(f"{d} {PEAK[d] / 1e3:.0f} TFLOP/s" for d in peak))
    return ratio


PEAK: dict[str, float] = {}  # GFLOP/s of torch.mm at 8192^3 per train.dtype (section 0, on a GPU)


def bf16_against_float32(widths: list[int], transformer_width: int, device: str, rounds: int) -> None:
    """Section 1: bf16 against float32, MLP with K = 11 at each width, then the transformer; and
    where a step's time goes in each dtype, with the ceilings that sets on bf16's speed-up."""
    print("1. bf16 against float32, run-steps/s (ensembles of 11 runs); bf16/fp32: the median of the rounds' "
          "ratios [their quartiles]")
    print(f"   {'model':<12} {'width':>6} {'float32':>9} {'bf16':>9}  bf16/fp32")
    cases = [("mlp", w, MLP) for w in widths] + [("transformer", transformer_width, TRANSFORMER)]
    for name, width, over in cases:
        modes, K = {}, {}
        for dtype in ("float32", "bf16"):
            dtype_over = [f"width={width}", *over, f"train.dtype={dtype}", f"engine.device={device}"]
            cfg, ens = ensemble(dtype_over, K=11)
            modes[dtype], K[dtype] = stepper(ens), ens.K
            modes[f"fb {dtype}"] = repeated(gradients(ens), ens.device, 0.1)
            modes[f"opt {dtype}"] = optimizer_pass(dtype_over)
        if name == "mlp":  # the bf16 products alone, for K different weights (the ensemble's own products)
            flop, bmm = mm_calls(step_shapes(cfg, cfg.data.input_dim, cfg.data.classes, cfg.train.batch_size),
                                 torch.device(device), "bf16", runs=11)
            modes["bmm bf16"] = repeated(bmm, torch.device(device), 0.1)
        t = each_round(modes, torch.device(device), rounds)
        step = {d: per_call(t[d], modes[d]) for d in ("float32", "bf16")}  # seconds per step
        ms = {m: per_call(t[m], modes[m]) * 1e3 for m in modes if m not in step}
        print(f"   {name:<12} {width:>6} {K['float32'] / step['float32']:>9.1f} {K['bf16'] / step['bf16']:>9.1f}  "
              f"{spread(ratios(t, modes, 'bf16', 'float32'))}")
        print(f"   {'':<19} a step, ms: float32 {step['float32'] * 1e3:.2f} (forward+backward {ms['fb float32']:.2f}, "
              f"optimizer {ms['opt float32']:.2f}); bf16 {step['bf16'] * 1e3:.2f} ({ms['fb bf16']:.2f}, "
              f"{ms['opt bf16']:.2f})")
        ceiling = f"{step['float32'] * 1e3 / (ms['fb bf16'] + ms['opt float32']):.2f}x with an optimizer pass as float32's"
        if "bmm bf16" in ms:
            ceiling += (f", {step['float32'] * 1e3 / (ms['bmm bf16'] + ms['opt float32']):.2f}x with nothing but its "
                        f"products ({ms['bmm bf16']:.2f} ms, {flop / ms['bmm bf16'] / 1e6:.0f} GFLOP/s) and that pass")
        print(f"   {'':<19} bf16 at most {ceiling}")
        sys.stdout.flush()


def batched_against_one_at_a_time(args, device: torch.device, dtype: str) -> None:
    """Section 2: the engine's chosen ensembles against one run at a time, and the share of torch.mm's rate."""
    peak = PEAK.get("bf16" if dtype in ("bf16", "bf16_autocast") else dtype)
    print(f"2. {dtype}: the batched engine (its chosen ensembles of K runs) against one run at a time, "
          "run-steps/s; GFLOP/s = a step's matrix-product flops x run-steps/s")
    cpu = device.type == "cpu"
    if cpu:
        print("   b/one [q1, q3]: the median of the rounds' ratios [their quartiles]; opt ms: the batched step's "
              "optimizer pass; max b/mm: the share of mm a step could reach with nothing but its products at "
              "the bmm rate and that pass")
    print(f"   {'width':>6} {'K':>3} " + (f"{'proc/run':>9} " if args.processes else "")
          + f"{'one':>9} {'batched':>9} {'b/one':>6} {'GFLOP/s':>8} {'mm GFLOP/s':>10} {'b/mm':>5} "
          + f"{'bmm GFLOP/s':>11} {'b/bmm':>6}" + (f" {'b/peak':>6}" if peak else "")
          + (f" {'eager':>9} {'graphed':>7}" if device.type == "cuda" else "")
          + (f" {'b/one [q1, q3]':>20} {'opt ms':>7} {'max b/mm':>8}" if cpu else ""))
    for width in args.widths:
        over = [f"width={width}", f"depth={args.depth}", f"train.batch_size={args.batch}", f"train.dtype={dtype}",
                f"engine.device={args.device}", *(CUSTOM if args.custom else [])]
        cfg, batched = ensemble(over)
        _, alone = ensemble([*over, "engine.graphs=never"], K=1)  # one run at a time, as a plain loop runs it
        eager = ensemble([*over, "engine.graphs=never"])[1] if device.type == "cuda" else None
        shapes = step_shapes(cfg, cfg.data.input_dim, cfg.data.classes, args.batch)
        flop, mm = mm_calls(shapes, device, dtype)
        bflop, bmm = mm_calls(shapes, device, dtype, runs=batched.K)  # the ensemble's K weights, not one
        reps = max(1, round(0.1 / max(timed(mm), 1e-6)))
        breps = max(1, round(0.1 / max(timed(bmm), 1e-6)))
        modes = {"batched": stepper(batched), "one": stepper(alone), "mm": lambda: [mm() for _ in range(reps)],
                 "bmm": lambda: [bmm() for _ in range(breps)]}
        if eager is not None:
            modes["eager"] = stepper(eager)
        if cpu:
            modes["opt"] = optimizer_pass(over, batched.K)
        t = each_round(modes, device, args.rounds)
        seconds = medians(t)
        rate = {m: (1 if m == "one" else batched.K) * modes[m].steps / seconds[m]
                for m in ("batched", "one", "eager") if m in modes}
        mm_rate = flop * reps / seconds["mm"] / 1e9
        bmm_rate = bflop * breps / seconds["bmm"] / 1e9
        procs = ""
        if args.processes:
            per_run = one_process_per_run([*over, f"train.steps={args.steps}"], [r.log2_lr for r in runs_of(cfg)],
                                          Path(args.results))
            procs = f"{args.steps / per_run:>9.1f} "
        g = rate["batched"] * flop / 1e9
        if cpu:  # a step of K runs: its products at the bmm rate, and its optimizer pass
            opt = per_call(t["opt"], modes["opt"])
            ceiling = (bflop / mm_rate) / (bflop / bmm_rate + opt * 1e9)
        print(f"   {width:>6} {batched.K:>3} {procs}{rate['one']:>9.1f} {rate['batched']:>9.1f} "
              f"{rate['batched'] / rate['one']:>6.2f} {g:>8.1f} {mm_rate:>10.1f} {g / mm_rate:>5.0%} "
              f"{bmm_rate:>11.1f} {g / bmm_rate:>6.0%}" + (f" {g / peak:>6.0%}" if peak else "")
              + (f" {rate['eager']:>9.1f} {'yes' if batched.graphed else 'no':>7}" if eager is not None else "")
              + (f" {spread(ratios(t, modes, 'batched', 'one', batched.K)):>20} {opt * 1e3:>7.2f} {ceiling:>8.0%}"
                 if cpu else ""))
        sys.stdout.flush()


def settings_cost(args, device: torch.device) -> None:
    """Section 3: a step and its optimizer pass with Adam's settings shared, per tensor, per run."""
    print("3. Adam's beta1, beta2, eps: one for every tensor (none), each tensor's own (sde, kappa 4), one per run "
          "(grid.optim.beta2); K = 11, run-steps/s and the optimizer pass alone; x: the rounds' median ratio to none "
          "[quartiles]")
    print(f"   {'width':>6} {'none':>9} {'sde':>9} {'per run':>9} {'sde x':>18} {'per run x':>18} "
          f"{'opt ms none':>11} {'sde':>6} {'per run':>7}")
    for width in args.settings_widths:
        over = [f"width={width}", f"depth={args.depth}", f"train.batch_size={args.batch}", f"engine.device={args.device}"]
        kinds = {"none": [], "sde": ["param.sde_rule=sde", "param.base_steps=400000"],
                 "per run": ["grid.optim.beta2=[0.99,0.999]"]}
        modes: dict[str, Callable[[], None]] = {}
        for name, extra in kinds.items():
            cfg = typed(*over, *extra, "train.steps=100000", "engine.progress=false")
            runs = runs_of(cfg)[::2][:11] if extra and extra[0].startswith("grid") else runs_of(cfg)[:11]
            ens = Ensemble(build.job(cfg), runs)
            modes[name] = stepper(ens)
            grads = gradients(ens)()
            opt_ens = Ensemble(build.job(cfg), runs)  # its own: the repeated pass moves its weights

            def opt_call(e=opt_ens, g=grads) -> None:
                with torch.no_grad():
                    e._update(g, 1.0, True)

            modes[f"opt {name}"] = repeated(opt_call, device, 0.1)
        t = each_round(modes, device, args.rounds)
        sec = medians(t)
        rate = {n: 11 * modes[n].steps / sec[n] for n in kinds}
        opt = {n: per_call(t[f"opt {n}"], modes[f"opt {n}"]) * 1e3 for n in kinds}
        print(f"   {width:>6} {rate['none']:>9.1f} {rate['sde']:>9.1f} {rate['per run']:>9.1f} "
              f"{spread(ratios(t, modes, 'sde', 'none')):>18} {spread(ratios(t, modes, 'per run', 'none')):>18} "
              f"{opt['none']:>11.3f} {opt['sde']:>6.3f} {opt['per run']:>7.3f}")
        sys.stdout.flush()


# ---------------------------------------------------------------- other views
def profile(width: int, depth: int, batch: int, device: str, dtype: str) -> None:
    """Time a steady-state step and print torch's profile of it (top operations by own time)."""
    cfg, ens = ensemble([f"width={width}", f"depth={depth}", f"train.batch_size={batch}", f"engine.device={device}",
                         f"train.dtype={dtype}"])
    call = stepper(ens)
    t = interleaved({"step": call}, ens.device, 5)["step"] / call.steps * 1e3
    flop = mm_calls(step_shapes(cfg, cfg.data.input_dim, cfg.data.classes, batch), ens.device, dtype)[0] * ens.K
    print(f"width {width}, ensembles of {ens.K} runs: {t:.2f} ms per step, {flop / t / 1e6:.1f} GFLOP/s")
    cuda = ens.device.type == "cuda"
    acts = [torch.profiler.ProfilerActivity.CPU] + ([torch.profiler.ProfilerActivity.CUDA] if cuda else [])
    with torch.profiler.profile(activities=acts) as prof:
        for _ in range(10):
            ens.step()
        sync(ens.device)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))
    if cuda:  # the GPU's side: how long its kernels run, against the host's time to launch them
        print(prof.key_averages().table(sort_by="self_device_time_total", row_limit=12))


def compiled(width: int, depth: int, batch: int, device: str) -> None:
    """A steady-state step eager, then with the model under torch.compile (and its compile time)."""
    over = [f"width={width}", f"depth={depth}", f"train.batch_size={batch}", f"engine.device={device}"]
    _, eager = ensemble(over)
    _, comp = ensemble(over)
    comp.model = torch.compile(comp.model)
    print(f"compilation (first step): {timed(comp.step):.1f} s")
    modes = {"eager": stepper(eager), "compiled": stepper(comp)}
    s = interleaved(modes, eager.device, 5)
    print(f"width {width}, ensembles of {eager.K} runs: "
          + ", ".join(f"{m} {s[m] / modes[m].steps * 1e3:.2f} ms per step" for m in modes))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", type=int, choices=[0, 1, 2, 3], help="one section (0: the machine alone)")
    ap.add_argument("--widths", default="64,128,256,512,1024,2048", help="section 2's widths")
    ap.add_argument("--bf16-widths", default="256,512,1024", help="section 1's MLP widths")
    ap.add_argument("--settings-widths", default="64,512", help="section 3's MLP widths")
    ap.add_argument("--transformer-width", type=int, default=256)
    ap.add_argument("--depth", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=7, help="rounds of interleaved timing per comparison")
    ap.add_argument("--processes", action="store_true", help="section 2: also one process per run (slow)")
    ap.add_argument("--steps", type=int, default=100, help="steps of each run of --processes")
    ap.add_argument("--results", default="/tmp/lrtransfer-bench", help="where --processes writes")
    ap.add_argument("--custom", action="store_true", help="section 2 on the MLP as a user's nn.Module (model=custom)")
    ap.add_argument("--profile", type=int, metavar="WIDTH", help="profile a steady-state step at WIDTH instead")
    ap.add_argument("--compile", type=int, metavar="WIDTH", help="time a step eager and under torch.compile instead")
    ap.add_argument("--device", default="cpu", help="engine.device: cpu, cuda, cuda:N")
    ap.add_argument("--dtype", default="float32", help="section 2's train.dtype, or several: float32,tf32,bf16")
    ap.add_argument("--skip-processes", action="store_true", help=argparse.SUPPRESS)  # the default now
    args = ap.parse_args()
    args.widths = [int(w) for w in args.widths.split(",")]
    args.settings_widths = [int(w) for w in args.settings_widths.split(",") if w]
    args.dtypes = args.dtype.split(",")
    if args.rounds < 1:
        ap.error(f"--rounds {args.rounds}: at least 1 (each ratio is taken over the rounds)")
    if bad := [d for d in args.dtypes if d not in ("float32", "tf32", "bf16")]:
        ap.error(f"--dtype {bad[0]!r}: valid are float32, tf32, bf16")
    try:
        device = build.select_device(args.device)
    except build.DeviceError as e:
        ap.error(str(e))
    if device.type == "cpu":  # as a job's process: OMP_NUM_THREADS, else one (engine.threads=0); memory reused
        torch.set_num_threads(int(THREADS_ASKED or 1))
        keep_freed_memory()
    if args.profile:
        profile(args.profile, args.depth, args.batch, args.device, args.dtypes[0])
        return
    if args.compile:
        compiled(args.compile, args.depth, args.batch, args.device)
        return
    machine(device, args.rounds)
    if args.only in (None, 1):
        bf16_against_float32([int(w) for w in args.bf16_widths.split(",") if w], args.transformer_width, args.device,
                             args.rounds)
    if args.only in (None, 2):
        for dtype in args.dtypes:
            batched_against_one_at_a_time(args, device, dtype)
    if args.only in (None, 3):
        settings_cost(args, device)
    print(f"peak RSS of this process: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB; "
          f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    os.environ.setdefault("HYDRA_FULL_ERROR", "1")
    main()

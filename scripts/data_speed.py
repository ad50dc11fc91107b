"""How long the real-dataset tasks take to load and to draw a batch, at full size.

Writes full-size stand-ins for CIFAR-10 (50,000 + 10,000 images, in the real
pickled format) and MNIST (60,000 + 10,000, gzipped IDX) into a temporary folder,
then times `build_task` and `sample` on the CPU; likewise a nanoGPT-style token file
of `--tokens` random uint16 ids (data=tokens: memory-mapped, so loading reads only the
checks' sample and the held-out windows; a batch is B windows of 1024 + 1 ids). Run
from the repository root:

    python scripts/data_speed.py [--device cpu] [--batch 128] [--tokens 100000000]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from lrtransfer.training.build import task as build_task  # noqa: E402
from tests.conftest import typed  # noqa: E402
from tests.datafiles import write_cifar, write_mnist  # noqa: E402


def timed(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=100_000_000)
    args = ap.parse_args()
    device = torch.device(args.device)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        write_cifar(root, per_batch=10_000, n_test=10_000)
        write_mnist(root, n_train=60_000, n_test=10_000)
        for option in ("cifar10", "mnist"):
            for augment in ("false", "true"):
                cfg = typed(f"data={option}", f"data.root={root}", f"data.augment={augment}", f"engine.device={args.device}")
                load = timed(lambda: build_task(cfg, device, torch.float32), 3)
                task = build_task(cfg, device, torch.float32)
                gen = torch.Generator().manual_seed(0)  # the engine draws on the CPU (Task.sample)
                step = timed(lambda: task.sample(gen, args.batch), 200)
                print(f"{option:8s} augment={augment:5s} load {load:6.2f} s   sample(B={args.batch}) {step * 1e3:6.3f} ms")
        ids = root / "train.bin"
        with open(ids, "wb") as f:  # written in pieces: the file is larger than is worth holding
            rng = np.random.default_rng(0)
            for start in range(0, args.tokens, 1 << 24):
                f.write(rng.integers(0, 50257, min(1 << 24, args.tokens - start), dtype=np.uint16).tobytes())
        cfg = typed("model=transformer", "data=tokens", f"data.train_path={ids}", "data.vocab_size=50257",
                    "data.seq_len=1024", "data.eval_size=64", f"engine.device={args.device}")
        load = timed(lambda: build_task(cfg, device, torch.float32), 3)
        task = build_task(cfg, device, torch.float32)
        gen = torch.Generator().manual_seed(0)
        step = timed(lambda: task.sample(gen, args.batch), 200)
        print(f"tokens   {args.tokens:,} ids   load {load * 1e3:6.2f} ms   sample(B={args.batch}, T=1024) {step * 1e3:6.3f} ms")


if __name__ == "__main__":
    main()

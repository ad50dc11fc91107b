"""Architectures. `conf/model/<name>.yaml` is implemented by `lrtransfer/model/<name>.py`,
which provides `build(cfg, param, *, runs, input_shape, output_dim) -> Module`.

`input_shape` is one example's shape: (d,) for vectors, (C, H, W) for images, (C, L)
for signals, (T,) for token ids in [0, output_dim). Which kinds a model reads is declared by its
schema (`READS` in config.py) and checked before any job starts. A model takes
inputs with or without a leading run axis: (B, *input_shape) or (K, B, *input_shape).
"""

from __future__ import annotations

import importlib

from lrtransfer.model.layers import Module


def build_model(cfg, param, *, runs: int, input_shape: tuple[int, ...], output_dim: int) -> Module:
    """The model of `cfg.model` for `runs` runs, with `param`'s multipliers set (not yet initialised)."""
    module = importlib.import_module(f"lrtransfer.model.{cfg.model.name}")
    model = module.build(cfg, param, runs=runs, input_shape=tuple(input_shape), output_dim=output_dim)
    param.prepare(model)
    return model

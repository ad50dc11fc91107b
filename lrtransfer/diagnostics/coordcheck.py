"""The coordinate check: is every layer's activation scale independent of width?

The check researchers use to validate a parameterization (Tensor Programs V; the
`mup` package's `get_coord_data`): at several widths, train a few steps at one
learning rate and record, at each step, the mean |activation| of every atom's
output. Plotted against width on log-log axes (a panel per step), a correct
parameterization gives flat lines; lines that rise with width after step 0 show
SP's blow-up (each update moves a hidden pre-activation by ~lr * width under Adam).
The number that says it is the least-squares slope of log mean|activation| against
log width, per layer and step: ~0 is width-stable, ~+1 grows like the width.

Step t is the forward pass after t updates (step 0: at initialisation), on that
step's training batch; a width's value is the mean over `seeds` runs trained
together by the engine's own `Ensemble` (one run per seed, a constant LR).
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch

from lrtransfer.config import Schedule
from lrtransfer.config.validate import MAX_ABS_LOG2_LR
from lrtransfer.errors import UserError

DEFAULT_WIDTHS = (64, 128, 256, 512, 1024)


@dataclass
class CoordData:
    """mean |activation|[layer][step][width index]; slopes[layer][step] (None if undefined)."""

    widths: list[int]
    steps: int
    log2_lr: float
    seeds: int
    title: str
    layers: list[str]
    values: dict[str, list[list[float]]] = field(default_factory=dict)

    def slope(self, layer: str, step: int) -> float | None:
        """Least-squares slope of log mean|act| against log width; None when a value is 0 or not finite."""
        v = np.asarray(self.values[layer][step], dtype=float)
        if len(self.widths) < 2 or not np.all(np.isfinite(v) & (v > 0)):
            return None
        return float(np.polyfit(np.log2(self.widths), np.log2(v), 1)[0])

    def slopes(self) -> dict[str, list[float | None]]:
        return {layer: [self.slope(layer, t) for t in range(self.steps + 1)] for layer in self.layers}

    def to_json(self) -> dict:
        return {**dataclasses.asdict(self), "slopes": self.slopes()}


def output_dir(cfg) -> Path:
    """<results_dir>/coord-check/<name>, where an unnamed study is named by its model, param and optimizer."""
    name = cfg.name if cfg.name != "default" else f"{cfg.model.name}-{cfg.param.name}-{cfg.optim.name}"
    return Path(cfg.results_dir) / "coord-check" / name


# ---------------------------------------------------------------- measuring
MAX_STEPS, MAX_SEEDS = 10_000, 1_000  # activations are kept for every step of every run


def measure(cfgs, *, steps: int = 3, log2_lr: float | None = None, seeds: int = 2) -> CoordData:
    """Train each config (one per width) `steps` steps; record mean |activation| per atom and step.

    log2_lr defaults to the middle of the config's LR grid, which each optimizer
    and parameterization centres on its typical learning rates.
    """
    from lrtransfer.training import build
    from lrtransfer.training.engine import Ensemble, Run

    if not (1 <= steps <= MAX_STEPS and 1 <= seeds <= MAX_SEEDS):
        raise UserError(f"coord-check needs 1 <= steps <= {MAX_STEPS:,} and 1 <= seeds <= {MAX_SEEDS} (a few steps "
                        f"of a few runs), got steps={steps}, seeds={seeds}")
    first = cfgs[0]
    if log2_lr is None:
        log2_lr = (first.lr.log2_min + first.lr.log2_max) / 2
    if not (math.isfinite(log2_lr) and abs(log2_lr) <= MAX_ABS_LOG2_LR):
        raise UserError(f"--log2-lr must be finite and within -{MAX_ABS_LOG2_LR} .. {MAX_ABS_LOG2_LR} (as the LR "
                        f"grid's keys), got {log2_lr:g}")
    data = CoordData(
        widths=[c.width for c in cfgs], steps=steps, log2_lr=log2_lr, seeds=seeds,
        title=f"{first.model.name} {first.param.name} {first.optim.name} depth={first.depth}", layers=[],
    )
    device = build.select_device(first.engine.device)
    for i, cfg in enumerate(cfgs):
        # The engine's own ensemble, one run per seed, at a constant LR. Step t's forward
        # pass sees the network after t updates; the last step's update is never looked at.
        train = dataclasses.replace(cfg.train, steps=steps + 1, schedule=Schedule.constant, warmup_steps=0)
        cfg = dataclasses.replace(cfg, train=train)
        runs = [Run(log2_lr=log2_lr, seed=s) for s in range(cfg.seed, cfg.seed + seeds)]
        ens = Ensemble(build.job(cfg, device), runs)
        recorded: dict[str, torch.Tensor] = {}
        modules = [(f"{j} {a.role}", a) for j, a in enumerate(ens.model.atoms())] + [("output", ens.model)]
        hooks = [m.register_forward_hook(_recorder(recorded, name)) for name, m in modules]
        try:
            for t in range(steps + 1):
                recorded.clear()
                ens.step()
                out = recorded.pop("output")
                if all(out is not v for v in recorded.values()):  # the network ends in a bond
                    recorded["output"] = out
                if not data.layers:
                    data.layers = list(recorded)
                    data.values = {n: [[math.nan] * len(cfgs) for _ in range(steps + 1)] for n in data.layers}
                if list(recorded) != data.layers:
                    raise UserError("coord-check: the model's layers differ between widths")
                for n, v in recorded.items():
                    data.values[n][t][i] = float(v.detach().abs().mean())  # over runs, batch and units
        finally:
            for h in hooks:
                h.remove()
    return data


def _recorder(into: dict, name: str):
    def hook(module, inputs, output) -> None:
        into[name] = output

    return hook


# ---------------------------------------------------------------- reporting
def slope_table(data: CoordData) -> str:
    head = f"{'layer':<12}" + "".join(f"{f'step {t}':>9}" for t in range(data.steps + 1))
    rows = [head]
    for layer, slopes in data.slopes().items():
        rows.append(f"{layer:<12}" + "".join(f"{_signed(s):>9}" for s in slopes))
    return "\n".join(rows)


def _signed(slope: float | None) -> str:
    return "-" if slope is None else format(slope, "+.2f")


def save(data: CoordData, folder: Path) -> list[Path]:
    """coord.json and the figure (coord.png, coord.pdf) in `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "coord.json").write_text(json.dumps(data.to_json(), indent=1))
    return [folder / "coord.json", *figure(data, folder / "coord")]


def figure(data: CoordData, stem: Path) -> list[Path]:
    """The coordinate check's figure as `stem`.png and .pdf."""
    from lrtransfer.reporting.style import save

    return save(coord_figure(data), stem)


def coord_figure(data: CoordData):
    """Mean |activation| against width, log-log, a panel per step, a line per layer.

    A value of 0 (muP's zero-initialised readout at init) has no place on a log
    axis: the panel says so in a note instead of dropping the line silently.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from lrtransfer.reporting.style import STYLE

    n = data.steps + 1
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, n, figsize=(1.9 * n + 1.2, 2.3), sharey=True, squeeze=False, layout="constrained")
        colors = plt.get_cmap("viridis")(np.linspace(0.0, 0.9, len(data.layers)))
        for t, ax in enumerate(axes[0]):
            zero = []
            for layer, color in zip(data.layers, colors):
                v = np.asarray(data.values[layer][t], dtype=float)
                ok = np.isfinite(v) & (v > 0)
                ax.plot(np.asarray(data.widths)[ok], v[ok], "o-", ms=2.5, color=color)
                if (v == 0).any():
                    zero.append(layer)
            if zero:
                when = "at init" if t == 0 else "here"
                ax.text(0.03, 0.03, "\n".join(f"{layer}: 0 {when} (not drawn)" for layer in zero), transform=ax.transAxes,
                        fontsize=6, color="dimgrey", va="bottom", gid="zero-note")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title("init" if t == 0 else f"after {t} step{'s' * (t > 1)}")
            ax.set_xlabel("width")
        last = data.steps
        handles = [Line2D([], [], marker="o", ms=2.5, color=color, label=f"{layer} ({_signed(data.slope(layer, last))})")
                   for layer, color in zip(data.layers, colors)]
        fig.legend(handles=handles, title=f"layer (slope after {last} step{'s' * (last > 1)})", loc="outside right center",
                   frameon=False)
        axes[0][0].set_ylabel("mean |activation|")
        fig.suptitle(f"coordinate check: {data.title}, log2 LR {data.log2_lr:g}, {data.seeds} seeds")
    return fig

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

A user's or a published model (`model=custom`) runs as a whole under vmap, so its rows are
its own submodules' outputs, read inside the ensemble's forward (`nn/taps.py`: each block's
attention and MLP and their norms, the embeddings, the final norm, the readout), and the
logits. The rows of a block's module over every block form a group (`transformer.h.*.attn`):
the text table gives the group's range of slopes, the figure its colour.
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
    """mean |activation|[layer][step][width index]; slopes[layer][step] (None if undefined); groups:
    {layer: its group} for the rows of a user's model that repeat over its blocks."""

    widths: list[int]
    steps: int
    log2_lr: float
    seeds: int
    title: str
    layers: list[str]
    values: dict[str, list[list[float]]] = field(default_factory=dict)
    groups: dict[str, str] = field(default_factory=dict)

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
        title=f"{_model_name(first.model)} {first.param.name} {first.optim.name} depth={first.depth}", layers=[],
    )
    device = build.select_device(first.engine.device)
    for i, cfg in enumerate(cfgs):
        # The engine's own ensemble, one run per seed, at a constant LR. Step t's forward
        # pass sees the network after t updates; the last step's update is never looked at.
        train = dataclasses.replace(cfg.train, steps=steps + 1, schedule=Schedule.constant, warmup_steps=0)
        # eager steps: a step replayed as a CUDA graph would run no Python hook
        cfg = dataclasses.replace(cfg, train=train, engine=dataclasses.replace(cfg.engine, graphs="never"))
        runs = [Run(log2_lr=log2_lr, seed=s) for s in range(cfg.seed, cfg.seed + seeds)]
        ens = Ensemble(build.job(cfg, device), runs)
        recorded: dict[str, torch.Tensor] = {}
        tapped = hasattr(ens.model, "start_taps")  # a user's module: its own submodules (nn/taps.py)
        atoms = [] if tapped else [(f"{j} {a.role}", a) for j, a in enumerate(ens.model.atoms())]
        hooks = [m.register_forward_hook(_recorder(recorded, name)) for name, m in [*atoms, ("output", ens.model)]]
        if tapped:
            data.groups = ens.model.start_taps()
        try:
            for t in range(steps + 1):
                recorded.clear()
                if tapped:
                    ens.model.tapped.clear()
                ens.step()
                out = recorded.pop("output")
                # mean |activation| over runs, batch and units (each run's mean, then their mean, for a user's module)
                means = {n: float(v.mean()) for n, v in ens.model.tapped.items()} if tapped else {
                    n: float(v.detach().abs().mean()) for n, v in recorded.items()}
                if tapped or all(out is not v for v in recorded.values()):  # the network ends in a bond
                    means["output"] = float(out.detach().abs().mean())
                if not data.layers:
                    data.layers = list(means)
                    data.values = {n: [[math.nan] * len(cfgs) for _ in range(steps + 1)] for n in data.layers}
                if list(means) != data.layers:
                    raise UserError("coord-check: the model's layers differ between widths")
                for n, v in means.items():
                    data.values[n][t][i] = v
        finally:
            for h in hooks:
                h.remove()
            if tapped:
                ens.model.stop_taps()
    return data


def _model_name(model) -> str:
    """The model's option, and a user's or a published model's class (`custom GPT2LMHeadModel`)."""
    target = getattr(model, "target", "")
    return f"{model.name} {target.rpartition(':')[2]}" if target else model.name


def _recorder(into: dict, name: str):
    def hook(module, inputs, output) -> None:
        into[name] = output

    return hook


# ---------------------------------------------------------------- reporting
def slope_table(data: CoordData) -> str:
    """A row per layer; a group's rows (one module over every block) as one row, its range of slopes."""
    slopes = data.slopes()
    rows = []
    for group, layers in grouped(data).items():
        label = group if len(layers) == 1 else f"{group} ({len(layers)} blocks)"
        rows.append((label, [_range([slopes[n][t] for n in layers]) for t in range(data.steps + 1)]))
    first = max([len("layer")] + [len(label) for label, _ in rows])
    cell = max([9] + [len(c) + 2 for _, cells in rows for c in cells])
    head = f"{'layer':<{first}}" + "".join(f"{f'step {t}':>{cell}}" for t in range(data.steps + 1))
    return "\n".join([head] + [f"{label:<{first}}" + "".join(f"{c:>{cell}}" for c in cells) for label, cells in rows])


def grouped(data: CoordData) -> dict[str, list[str]]:
    """{group: its layers}, in the order the layers come."""
    out: dict[str, list[str]] = {}
    for layer in data.layers:
        out.setdefault(data.groups.get(layer, layer), []).append(layer)
    return out


def _range(slopes: list[float | None]) -> str:
    """One slope, or a group's lowest..highest (`-` where none is defined)."""
    known = [s for s in slopes if s is not None]
    if not known:
        return "-"
    lo, hi = _signed(min(known)), _signed(max(known))
    return lo if lo == hi else f"{lo}..{hi}"


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
    """Mean |activation| against width, log-log, a panel per step, a line per layer (a group's
    lines, one module over every block, in one colour).

    A value of 0 (muP's zero-initialised readout at init) has no place on a log
    axis: the panel says so in a note instead of dropping the line silently.
    """
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    from lrtransfer.reporting.style import STYLE

    n = data.steps + 1
    groups = grouped(data)
    with plt.rc_context(STYLE):
        fig, axes = plt.subplots(1, n, figsize=(1.9 * n + 1.2, 2.3), sharey=True, squeeze=False, layout="constrained")
        # a user's model's modules in colours told apart (ten at most); the built-in models' layers in depth order
        palette = plt.get_cmap("tab10")(np.arange(len(groups))) if data.groups and len(groups) <= 10 else \
            plt.get_cmap("viridis")(np.linspace(0.0, 0.9, len(groups)))
        colors = dict(zip(groups, palette))
        for t, ax in enumerate(axes[0]):
            zero = []
            for group, layers in groups.items():
                for layer in layers:
                    v = np.asarray(data.values[layer][t], dtype=float)
                    ok = np.isfinite(v) & (v > 0)
                    ax.plot(np.asarray(data.widths)[ok], v[ok], "o-", ms=2.5, color=colors[group],
                            lw=1.5 if len(layers) == 1 else 0.8)
                if any((np.asarray(data.values[layer][t], dtype=float) == 0).any() for layer in layers):
                    zero.append(group)
            if zero:
                when = "at init" if t == 0 else "here"
                ax.text(0.03, 0.03, "\n".join(f"{layer}: 0 {when} (not drawn)" for layer in zero), transform=ax.transAxes,
                        fontsize=6, color="dimgrey", va="bottom", gid="zero-note")
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_title("init" if t == 0 else f"after {t} step{'s' * (t > 1)}")
            ax.set_xlabel("width")
        last = data.steps
        handles = [Line2D([], [], marker="o", ms=2.5, color=colors[group],
                          label=f"{group}{f' ({len(layers)} blocks)' if len(layers) > 1 else ''} "
                                f"({_range([data.slope(layer, last) for layer in layers])})")
                   for group, layers in groups.items()]
        fig.legend(handles=handles, title=f"layer (slope after {last} step{'s' * (last > 1)})", loc="outside right center",
                   frameon=False)
        axes[0][0].set_ylabel("mean |activation|")
        fig.suptitle(f"coordinate check: {data.title}, log2 LR {data.log2_lr:g}, {data.seeds} seeds")
    return fig

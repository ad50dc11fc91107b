"""One look for every figure: the study figures, the coordinate check's, and their copies in the report.

Sizes suit a paper: one panel is a column wide (3.4 in), fonts 7-8 pt. Every
figure is saved at `DPI`, so the report can show each at the same type size by
scaling its pixels by one common factor.
"""

from __future__ import annotations

import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

DPI = 200
STYLE = {
    "figure.dpi": 150,
    "savefig.dpi": DPI,
    "savefig.bbox": "tight",
    "savefig.pad_inches": 0.03,
    "font.size": 8,
    "axes.titlesize": 7.5,
    "axes.labelsize": 8,
    "figure.titlesize": 8.5,
    "legend.fontsize": 7,
    "legend.title_fontsize": 7,
    "xtick.labelsize": 7,
    "ytick.labelsize": 7,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "axes.grid": True,
    "grid.alpha": 0.25,
    "lines.linewidth": 1.2,
    "pdf.fonttype": 42,  # embed TrueType: text stays text in the PDF
}
LABELS = {"train_loss": "final training loss", "eval_loss": "held-out loss", "eval_acc": "held-out accuracy"}
COLUMN_WIDTH = 3.4  # inches: one column of a two-column paper


def metric_label(metric: str) -> str:
    return LABELS.get(metric, metric)


def signed(v: float, spec: str = "+.2f") -> str:
    """A number with a true minus sign, as the axes print it."""
    return format(v, spec).replace("-", "\u2212")


def save(fig, stem: Path) -> list[Path]:
    """The figure as `stem`.png and `stem`.pdf; closes it. The suffix is appended, not swapped: a
    stem may hold a dot (an axis such as `train.steps`)."""
    paths = [stem.with_name(stem.name + ".png"), stem.with_name(stem.name + ".pdf")]
    with plt.rc_context(STYLE):
        for p in paths:
            fig.savefig(p)
    plt.close(fig)
    return paths


def png_bytes(fig) -> bytes:
    buf = io.BytesIO()
    with plt.rc_context(STYLE):
        fig.savefig(buf, format="png")
    return buf.getvalue()


SEPARATOR = " · "


def fit_titles(fig) -> None:
    """Rewrap each axes title that is wider than its axes at its ` · ` separators, so that
    titles of neighbouring panels never run into each other.

    Titles are measured after a draw (the layout has placed the axes); a part that
    alone is wider than its axes stays on its own line.
    """
    renderer = fig.canvas.get_renderer()
    fig.draw_without_rendering()
    for ax in fig.axes:
        title = ax.title
        room = ax.get_window_extent(renderer).width
        if not ax.get_visible() or not title.get_text() or title.get_window_extent(renderer).width <= room:
            continue
        lines = []
        for line in title.get_text().split("\n"):
            current = ""
            for part in line.split(SEPARATOR):
                trial = part if not current else current + SEPARATOR + part
                title.set_text(trial)
                if current and title.get_window_extent(renderer).width > room:
                    lines.append(current)
                    current = part
                else:
                    current = trial
            lines.append(current)
        title.set_text("\n".join(lines))

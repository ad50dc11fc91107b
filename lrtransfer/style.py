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
    """The figure as `stem`.png and `stem`.pdf; closes it."""
    paths = [stem.with_suffix(".png"), stem.with_suffix(".pdf")]
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

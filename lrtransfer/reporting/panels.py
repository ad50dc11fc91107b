"""Which groups share a figure, in what order, and the words that name them.

Groups of one study that share model, data and scale axis form a *family*: the panels
of one figure (and one section of the report). The baseline (SP) comes first, then the
others in the order the sweep gave them (as `summary` lists them); the title says what the
panels share.
"""

from __future__ import annotations

from lrtransfer.analysis import Group, telling_keys, verdict_text
from lrtransfer.analysis.summary import incomplete_words
from lrtransfer.reporting.style import signed

FAMILY_KEYS = ("study", "model.name", "model.class", "data.name")
_DESCRIBED = ("study", "model.name", "model.class", "data.name", "optim.name", "param.name", "train.steps", "train.batch_size")


def families(groups: list[Group]) -> list[list[Group]]:
    """Groups of one study, model, data and axis: the panels of one figure, in `panel_order`."""
    out: dict[tuple, list[Group]] = {}
    for g in groups:
        out.setdefault((g.axis, *(str(g.fixed.get(k)) for k in FAMILY_KEYS)), []).append(g)
    return [panel_order(family) for family in out.values()]


BASELINE = {"param.name": "standard"}  # SP: what every other parameterization is read against


def panel_order(family: list[Group]) -> list[Group]:
    """The baseline (SP) first, the panel every other is read against; then the others in the order
    the analysis lists them (the order the sweep gave them: `analysis.grouping.first_job`)."""
    return sorted(family, key=lambda g: not all(str(g.fixed.get(k)) == v for k, v in BASELINE.items()))


def natural(s: str) -> tuple:
    """Sort key: numbers before text, numbers by value (gain 2 before gain 10)."""
    try:
        return (0, float(s), s)
    except ValueError:
        return (1, 0.0, s)


def panel_labels(family: list[Group]) -> list[str]:
    """What tells the family's groups apart (see `analysis.telling_keys`)."""
    keys = telling_keys([g.fixed for g in family])
    short = {"param.name": "param", "optim.name": "optim"}
    return [", ".join(f"{short.get(k, k)}={g.fixed[k]}" for k in keys if k in g.fixed) for g in family]


def description(family: list[Group]) -> str:
    """Model, data, optimizer, steps: what all panels share, in words."""
    f = family[0].fixed
    common = {k: v for k, v in f.items() if all(str(g.fixed.get(k)) == str(v) for g in family)}
    model = str(common.get("model.class") or common.get("model.name", "model"))  # a published model by its class
    other = [a for a in ("width", "depth") if a != family[0].axis and a in common]
    if other:
        model += " (" + ", ".join(f"{a} {common[a]}" for a in other) + ")"
    parts = [model, common.get("data.name"), common.get("optim.name"), common.get("param.name")]
    steps = f"{common['train.steps']} steps" if "train.steps" in common else None  # absent: the axis
    batch = f"batch {common['train.batch_size']}" if "train.batch_size" in common else None
    parts.append(" of ".join(p for p in (steps, batch) if p) or None)
    rest = [f"{k}={v}" for k, v in common.items() if k not in _DESCRIBED and k not in other]
    return " · ".join(str(p) for p in parts if p is not None) + (f" · {', '.join(rest)}" if rest else "")


def drift_words(g: Group) -> str:
    """The drift, its interval and the verdict (`tentative: transfers` below the evidence rule)."""
    said = f"{verdict_text(g.verdict, g.leans)}{incomplete_words(g.skipped_records, g.skipped_runs)}"
    if g.drift is None:
        return f"drift n/a · {said}"
    ci = "" if g.drift_ci is None else f" [{signed(g.drift_ci[0])}, {signed(g.drift_ci[1])}]"
    return f"drift {signed(g.drift)}{ci} · {said}"


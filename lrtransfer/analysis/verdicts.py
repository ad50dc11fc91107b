"""Verdicts: the drift's interval in one word, and whether the evidence holds a firm one.

`verdict` reads the interval against the transfer band (+-`TOLERANCE` octaves per doubling);
`ruled` keeps a firm word (`transfers`, `drifts down`, `drifts up`) only where the interval
holds how far a new seed moves an optimum (`firm_evidence`: three scales, or two seeds at
each), and otherwise makes it `tentative`, leaning the interval's way. scripts/verdict_evidence.py
measures why (docs/studies.md, "How firm a verdict is").
"""

from __future__ import annotations

TOLERANCE = 0.25  # |drift| (octaves per doubling) within which an optimum "transfers"
VERDICTS = ("transfers", "drifts down", "drifts up", "inconclusive", "undetermined", "tentative")
FIRM_VERDICTS = ("transfers", "drifts down", "drifts up")  # the words that claim something of the drift
# What a firm verdict needs (`firm_evidence`): this many located scales, or this many seeds at each.
FIRM_SCALES, FIRM_SEEDS = 3, 2


def verdict(ci: tuple[float, float] | None, tolerance: float = TOLERANCE) -> str:
    """One word for the interval: within +-tolerance, clearly below/above 0, or neither."""
    if ci is None:
        return "undetermined"
    lo, hi = ci
    if -tolerance <= lo and hi <= tolerance:
        return "transfers"
    if hi < 0:
        return "drifts down"
    if lo > 0:
        return "drifts up"
    return "inconclusive"


def firm_evidence(seeds: list[int]) -> bool:
    """Whether the drift's interval holds what a firm verdict needs, from the seeds of each scale it
    was fitted to: a third scale (the optima's scatter about the line measures how far a seed moves
    an optimum) or a second seed at every scale (the seeds' spread measures it). With two scales of
    one seed the interval holds only the noise along each LR curve, and its verdict is tentative."""
    return len(seeds) >= FIRM_SCALES or (len(seeds) > 0 and min(seeds) >= FIRM_SEEDS)


def ruled(word: str, seeds: list[int]) -> str:
    """The verdict under the evidence rule: a firm word (`FIRM_VERDICTS`) without `firm_evidence`
    is 'tentative' (the interval's word is kept beside it as the way it leans)."""
    return "tentative" if word in FIRM_VERDICTS and not firm_evidence(seeds) else word


def verdict_text(verdict: str, leans: str) -> str:
    """A verdict as every reader prints it: 'tentative: transfers' below the evidence rule."""
    return f"tentative: {leans}" if verdict == "tentative" else verdict

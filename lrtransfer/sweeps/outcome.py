"""What an adaptive sweep says: its input as config overrides, what the next round trains,
how each group ended (decided, or undecided with the cheapest next step), as words and data.
"""

from __future__ import annotations

from lrtransfer.analysis.verdicts import FIRM_SEEDS, verdict_text
from lrtransfer.config.validate import MAX_BUDGET, MAX_BUDGET_S
from lrtransfer.errors import UserError
from lrtransfer.store import write_rounds
from lrtransfer.sweeps import rounds
from lrtransfer.sweeps.adaptive import GroupRun, Outcome


def until_decided_overrides(until_decided: bool, budget: str | int | None) -> list[str]:
    """`--until-decided [--budget B]` as config overrides: B in run-steps (20000), or a wall time
    (600s, 90m, 2h). A budget alone is refused: it limits an adaptive sweep only."""
    if budget is not None and not until_decided:
        raise UserError(f"--budget {budget} limits an adaptive sweep: add --until-decided")
    if not until_decided:
        return []
    if budget is None:
        return ["adaptive.enabled=true"]
    return ["adaptive.enabled=true", *budget_overrides("adaptive", budget, "to run until decided")]


def budget_overrides(section: str, budget: str | int, without: str) -> list[str]:
    """`--budget B` as `SECTION.budget=...` (run-steps: 20000) or `SECTION.budget_s=...` (a wall time:
    600s, 90m, 2h); one line for anything else. `without`: what leaving --budget out does."""
    text = str(budget).strip().lower()
    units = {"s": 1, "m": 60, "h": 3600}
    timed = text[-1:] in units
    try:
        value = float(text[:-1]) * units[text[-1]] if timed else float(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise UserError(f"--budget {budget!r}: give run-steps (20000) or a time (600s, 90m, 2h)") from None
    if not value > 0:
        raise UserError(f"--budget must be positive, got {budget!r}")
    if not value <= (MAX_BUDGET_S if timed else MAX_BUDGET):  # inf, 1e99: no budget is no --budget
        bound = f"{MAX_BUDGET_S // 86400} days" if timed else f"{MAX_BUDGET:,} run-steps"
        raise UserError(f"--budget {budget!r} is beyond the sane bound of {bound}; leave --budget out {without}")
    if not timed and value != int(value):
        raise UserError(f"--budget {budget!r}: give a whole number of run-steps (20000) or a time (600s, 90m, 2h)")
    return [f"{section}.budget_s={value}" if timed else f"{section}.budget={int(value)}"]


# ---------------------------------------------------------------- the base jobs and their groups


def next_words(step: rounds.Step | None, axis: str) -> str:
    """What a group's next round trains, per scale: new LRs (each with every seed), new seeds."""
    if step is None or not step.requests:
        return ""
    parts = []
    for scale in dict.fromkeys(rq.scale for rq in step.requests):
        mine = [rq for rq in step.requests if rq.scale == scale]
        lrs = sorted({v for rq in mine if rq.why != "seed" for v in rq.block.values()})
        seeds = sorted({rq.seed for rq in mine if rq.why == "seed"})
        what = []
        if lrs:
            what.append(f"log2 LR {', '.join(f'{v:g}' for v in lrs)}")
        if seeds:
            n = len({v for rq in mine if rq.why == "seed" for v in rq.block.values()})
            what.append(f"seed {', '.join(map(str, seeds))} on its {n} LRs")
        parts.append(f"{axis} {scale:g}: {' + '.join(what)}")
    return "; ".join(parts)


def undecided_words(g: GroupRun) -> str:
    """'undecided after N run-steps', the interval, and the cheapest next step that would decide it."""
    a, settings = g.analysis, g.settings
    ci = "no interval" if a is None or a.drift_ci is None else f"drift {a.drift:+.2f} [{a.drift_ci[0]:+.2f}, {a.drift_ci[1]:+.2f}]"
    why = {"budget": "the budget is spent", "out of seeds": "every scale that widens the interval has its "
           f"adaptive.max_seeds={settings.max_seeds} seeds", "stuck": "an optimum cannot be located on the grids allowed",
           "failed": "a job has no complete record"}.get(g.end, g.end)
    line = f"undecided after {g.spent:,} run-steps ({why}): {ci}"
    if g.end == "seeds copied" and a is not None:  # no seed will decide it: the script's seed is what needs fixing
        copied = [f"{sc:g}" for sc in rounds.seed_copies(a, g.states)]
        return (f"undecided after {g.spent:,} run-steps: {ci}; at {g.axis} {', '.join(copied)} {rounds.COPIED}: pass "
                "{seed} on to the script and re-run")
    if g.end == "stuck":  # each scale's own reason, where it has one
        why_not = [f"{g.axis} {sc:g}: {st.stuck}" for sc, st in g.states.items() if st.stuck]
        return f"undecided after {g.spent:,} run-steps: {ci}; " + "; ".join(why_not) if why_not else line
    if a is None or g.end == "failed":
        return line
    if g.end == "budget" and g.cut is not None:  # a round trained in part: its rest comes first
        left_out = g.cost(g.cut.left_out)
        last = g.history[-1].index if g.history else g.cut.index
        after = ("" if last <= g.cut.index else
                 f" (round{'s' if last > g.cut.index + 1 else ''} {g.cut.index + 1}"
                 f"{f'-{last}' if last > g.cut.index + 1 else ''} then ran on what it had measured)")
        return line + (f"; the budget cut round {g.cut.index} short{after}, leaving out "
                       f"{next_words(rounds.Step(g.cut.left_out), g.axis)} ({left_out:,} run-steps): re-run with a budget "
                       f"of {g.cut.needs:,} or more to train all of it; later rounds follow from what it measures")
    if g.step is not None and g.step.state == "refining" and g.step.requests:  # cut short while refining
        cost = g.cost(g.step.requests)
        line += f"; the next round refines the optima ({next_words(g.step, g.axis)}: {cost:,} run-steps)"
        if rounds.decided(a.drift_ci, settings.tolerance):
            line += (f", though the interval already lies {'inside' if a.leans == 'transfers' else 'outside'} "
                     "the band")
        return line + (f"; re-run with a budget of {g.spent + cost:,} or more to train it; later rounds follow from "
                       "what it measures")
    if rounds.decided(a.drift_ci, settings.tolerance):  # decided but for the evidence: tentative
        return line + (f"; the interval lies {'inside' if a.leans == 'transfers' else 'outside'} the band, but with "
                       f"two {g.axis}s a firm verdict needs {FIRM_SEEDS} seeds at each: re-run with "
                       f"adaptive.max_seeds={FIRM_SEEDS}" + (f" and a budget of {g.spent + sum(g.runs_per_seed().values()):,} "
                                                              "or more" if g.end == "budget" else ""))
    extra = rounds.cheapest_decision(a, g.states, g.runs_per_seed(), settings)
    if extra is None:
        return line + (f"; not even {rounds.MAX_EXTRA_SEEDS:,} more seeds are expected to decide it: the drift, "
                       f"{a.drift:+.2f}, sits too near the band's edge (+-{settings.tolerance:g})")
    cost = sum(k * g.runs_per_seed()[sc] for sc, k in extra.items())
    seeds = ", ".join(f"{k} at {g.axis} {sc:g}" for sc, k in sorted(extra.items()))
    most = max(len(g.states[sc].seeds) + k for sc, k in extra.items())
    how = [f"a budget of {g.spent + cost:,} or more"] if g.end == "budget" else []
    if most > settings.max_seeds:
        how.append(f"adaptive.max_seeds={most}")
    return (line + f"; cheapest next step: {sum(extra.values())} more seed(s) ({seeds}), about {cost:,} run-steps, "
            f"if the drift and its noise stay as they are" + (f": re-run with {' and '.join(how)}" if how else ""))


def ended_words(g: GroupRun) -> str:
    """How a group's rounds ended: decided (after how many rounds and run-steps, its verdict), or
    `undecided_words`; "" while it is still going."""
    a = g.analysis
    if g.end == "decided" and a is not None:
        return (f"decided after {len(g.history)} round(s), {g.spent:,} run-steps: {verdict_text(a.verdict, a.leans)}, "
                f"drift {a.drift:+.2f} "
                f"[{a.drift_ci[0]:+.2f}, {a.drift_ci[1]:+.2f}]")
    return undecided_words(g) if g.end else ""


def rounds_log(g: GroupRun) -> dict:
    """A group's rounds as its study's rounds file keeps them (`store.write_rounds`), for `report`:
    per round what it added (LRs, seeds), its run-steps and the drift after it; how it ended."""
    done = [{"round": t.index, "added": next_words(rounds.Step(t.requests), g.axis), "run_steps": t.run_steps,
             "drift": t.drift, "drift_ci": None if t.drift_ci is None else list(t.drift_ci), "verdict": t.verdict,
             "state": t.state} for t in g.history]
    return {"fixed": g.fixed, "axis": g.axis, "jobs": [f.name for f in g.jobs], "rounds": done, "run_steps": g.spent,
            "ended": ended_words(g)}


def write_rounds_log(groups: list[GroupRun]) -> None:
    """Every group's rounds so far into its study's rounds file (a study: the folder of its jobs)."""
    by_study: dict = {}
    for g in groups:
        if g.jobs:
            by_study.setdefault(g.jobs[0].parent, []).append(rounds_log(g))
    for study, logs in by_study.items():
        write_rounds(study, logs)


def outcome_dict(outcome: Outcome) -> dict:
    """An adaptive sweep's outcome as plain data (the Python API's `result["adaptive"]`)."""
    groups = []
    for g in outcome.groups:
        a = g.analysis
        groups.append({"fixed": g.fixed, "axis": g.axis, "end": g.end, "run_steps": g.spent,
                       "verdict": None if a is None else a.verdict, "leans": None if a is None else a.leans,
                       "drift": None if a is None else a.drift,
                       "drift_ci": None if a is None or a.drift_ci is None else list(a.drift_ci),
                       "seeds": {sc: len(st.seeds) for sc, st in g.states.items()},
                       "lrs": {sc: st.points() for sc, st in g.states.items()},
                       "undecided": None if g.end == "decided" else undecided_words(g)})
    return {"rounds": outcome.rounds, "run_steps": outcome.spent, "budget": outcome.budget, "groups": groups}

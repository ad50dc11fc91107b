"""A job's runs, in the one order every trainer, plan and record keeps: the engine's job and a
command's job (`command_job`) both read it here, apart from `job`, which runs either."""

from __future__ import annotations

from lrtransfer.config import has_points, inner_grid


def runs_of(cfg) -> list:
    """The job's runs: every LR of the grid for each of its seeds, and with a second inner
    axis (`grid.<key>=[...]`) at each of its values: K = LRs x values x seeds; or each row of
    its `points` at each seed."""
    from lrtransfer.training.runs import Run

    seeds = range(cfg.seed, cfg.seed + cfg.n_seeds)
    if has_points(cfg):  # the rows, one by one (a search's round, a scan)
        p = cfg.points
        return [Run(log2_lr=float(e), seed=s, grid=tuple((k, float(v)) for k, v in zip(p.keys, row)))
                for s in seeds for e, row in zip(p.log2_lr, p.values)]
    found = inner_grid(cfg)
    cells = [()] if found is None else [((found[0], float(v)),) for v in found[1]]
    return [Run(log2_lr=log2, seed=s, grid=c) for s in seeds for c in cells for log2 in cfg.lr.values()]

"""Hydra sweeper plugin `lrtransfer`: Hydra's basic sweeper, plus planning.

Hydra only instantiates plugins from the `hydra_plugins` namespace, so this thin
class lives here; the logic is in `lrtransfer.sweep`. It keeps the basic
sweeper's override syntax (comma lists, `range()`, `hydra.sweeper.params`) and
its launcher hand-off, and adds validation of every job before any runs,
skipping of finished jobs, and a report.
"""


from dataclasses import dataclass
from typing import Any, Dict, List, Optional

from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
from hydra.core.config_store import ConfigStore


@dataclass
class LRTransferSweeperConf:
    _target_: str = "hydra_plugins.lrtransfer_sweeper.lrtransfer_sweeper.LRTransferSweeper"
    max_batch_size: Optional[int] = None
    params: Optional[Dict[str, str]] = None
    rerun: bool = False  # recompute jobs whose record is already complete
    action: str = "run"  # run | plan: list the jobs and what is done, train nothing (lrtransfer.sweeps.plan)


ConfigStore.instance().store(group="hydra/sweeper", name="lrtransfer", node=LRTransferSweeperConf, provider="lrtransfer")


class LRTransferSweeper(BasicSweeper):
    def __init__(self, max_batch_size: Optional[int] = None, params: Optional[Dict[str, str]] = None, rerun: bool = False,
                 action: str = "run") -> None:
        super().__init__(max_batch_size=max_batch_size, params=params)
        self.rerun = rerun
        self.action = action

    def sweep(self, arguments: List[str]) -> Any:
        from lrtransfer.sweeps.launch import sweep

        return sweep(self, arguments)

"""The packaged configs. Hydra imports this package to read them, which (1) puts every
option's typed options in Hydra's ConfigStore, and (2) registers the sweeper they name
(`hydra/sweeper: lrtransfer`) before any composition.

Hydra finds plugins by listing the `hydra_plugins` namespace package on disk; a
PEP 660 editable install (plain `pip install -e .`) serves packages through an
import hook that such a listing cannot see, so the scan misses the sweeper. An
explicit import and registration find it under every kind of install.
"""

from hydra.core.plugins import Plugins

from hydra_plugins.lrtransfer_sweeper.lrtransfer_sweeper import LRTransferSweeper  # also stores its config node
from lrtransfer.config import register

register()
Plugins.instance().register(LRTransferSweeper)

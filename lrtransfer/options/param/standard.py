"""Standard parameterization (SP): PyTorch's defaults, one global learning rate.

Every hook of the base class already states SP; this module gives
`conf/param/standard.yaml` its options and its implementation under one name.
"""

from dataclasses import dataclass

from lrtransfer.options.param.base import Parameterization
from lrtransfer.options.param.sde import SdeOptions


@dataclass
class StandardOptions(SdeOptions):
    name: str = "standard"


OPTIONS = StandardOptions


class Standard(Parameterization):
    name = "standard"

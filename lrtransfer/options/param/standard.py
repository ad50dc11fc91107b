"""Standard parameterization (SP): PyTorch's defaults, one global learning rate.

Every hook of the base class already states SP; this module gives
`conf/param/standard.yaml` its options and its implementation under one name. Its one
option beside the name is the readout's forward multiplier (`output_mult`, 1: PyTorch's),
which a per-module search tunes like muP's (and which may differ between the runs of a
job: `grid.param.output_mult`, a search's `search.param.output_mult`).
"""

from dataclasses import dataclass
from typing import ClassVar

from lrtransfer.nn import OUTPUT, Atom
from lrtransfer.options.param.base import Parameterization
from lrtransfer.options.param.sde import SdeOptions
from lrtransfer.options.schema import added, positive


@dataclass
class StandardOptions(SdeOptions):
    PER_RUN: ClassVar[tuple[str, ...]] = ("output_mult",)  # may vary across a job's runs

    name: str = "standard"
    output_mult: float = added(1.0)  # the readout's forward multiplier: logits = output_mult * (x W) + b

    def check(self) -> None:
        positive("param.output_mult", self.output_mult)


OPTIONS = StandardOptions


class Standard(Parameterization):
    name = "standard"

    def multipliers(self, atom: Atom):
        if atom.role == OUTPUT:
            return self.options.output_mult, 1.0
        return 1.0, 1.0

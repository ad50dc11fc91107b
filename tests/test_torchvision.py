"""torchvision's resnet18 at two widths: roles (stem input, convolutions and BatchNorm gains hidden,
`fc` the readout), BatchNorm's running statistics per run, batched = one run at a time in float64,
and a short sweep under standard and mup. Skipped without torchvision (PyPI's does not import
beside this project's torch 2.13.0: run these in an environment with a matching pair).

torchvision's resnet18 takes no width (its BasicBlock refuses `width_per_group`; the channel
counts 64..512 are written into ResNet.__init__), so the model file here is the smallest one a
user writes for it: torchvision's own ResNet, every channel count times width/64."""

from __future__ import annotations

import json

import pytest
import torch

from lrtransfer.training import build
from lrtransfer.training.ensemble import Ensemble
from tests.conftest import typed
from tests.datafiles import write_cifar
from tests.test_published import TWO_BY_TWO, batched_equals_alone

try:
    import torchvision  # noqa: F401
except Exception as e:  # not installed, or a build for another torch (a RuntimeError on import)
    pytest.skip(f"torchvision does not import here ({type(e).__name__}); it must match the torch build",
                allow_module_level=True)

RESNET18 = '''
from torch import nn
from torchvision.models.resnet import BasicBlock, ResNet


class Resnet18(ResNet):
    """torchvision's resnet18 (BasicBlock, [2, 2, 2, 2]), every channel count x width / 64."""

    def __init__(self, width, output_dim):
        self.mult = width / 64
        super().__init__(BasicBlock, [2, 2, 2, 2], num_classes=output_dim)
        self.fc = nn.Linear(8 * width, output_dim)

    def _make_layer(self, block, planes, blocks, stride=1, dilate=False):
        if planes == 64:  # the stem, which __init__ made 64 wide just before
            self.inplanes = int(64 * self.mult)
            self.conv1 = nn.Conv2d(3, self.inplanes, kernel_size=7, stride=2, padding=3, bias=False)
            self.bn1 = nn.BatchNorm2d(self.inplanes)
        return super()._make_layer(block, int(planes * self.mult), blocks, stride, dilate)
'''


@pytest.fixture
def over(tmp_path):
    (tmp_path / "resnet18.py").write_text(RESNET18)
    write_cifar(tmp_path / "data")
    return ["model=custom", f"model.target={tmp_path / 'resnet18.py'}:Resnet18", "data=cifar10",
            f"data.root={tmp_path / 'data'}", "data.eval_size=8", "train.batch_size=4", "engine.device=cpu",
            "engine.progress=false"]


def test_roles_in_inspect(over, cli):
    code, out, err = cli("inspect", *over, "param=mup", "param.base_width=8", "width=16", "--json")
    assert code == 0, err
    rows = json.loads(out)["tensors"]
    roles = {r["name"]: r["role"] for r in rows}
    assert roles.pop("conv1.weight") == "input" and roles.pop("fc.weight") == "output (readout)"
    weights = {n: r for n, r in roles.items() if n.endswith("weight") and "bn" not in n and "downsample.1" not in n}
    assert len(weights) == 19 and set(weights.values()) == {"hidden"}  # 16 block convs, 3 downsampling convs
    gains = {r["role"] for r in rows if "bn" in r["name"] or "downsample.1" in r["name"]}
    assert gains == {"vector"}  # BatchNorm's gain and bias: hidden gains, shown as vectors


def test_batched_equals_one_at_a_time_with_batchnorm_per_run(over):
    cfg = [*over, "width=8", "param=mup", "param.base_width=4"]
    batched_equals_alone(*cfg)
    ens = Ensemble(build.job(typed(*cfg)), TWO_BY_TWO)
    ens.step()
    stats = ens.model.stacked.get_buffer("bn1/running_mean")  # (K, channels)
    assert stats.shape == (4, 8) and not torch.equal(stats[0], stats[2])  # seeds 0 and 1 saw other batches


def test_a_short_sweep_under_standard_and_mup(over, cli, tmp_path):
    code, _, err = cli("sweep", *over, "width=8,16", "param=standard,mup", "train.steps=3", "lr.log2_min=-8",
                       "lr.log2_max=-7", f"results_dir={tmp_path / 'results'}", "name=resnet18")
    assert code == 0, err
    records = [json.loads(p.read_text()) for p in (tmp_path / "results" / "resnet18").glob("*/record.json")]
    assert len(records) == 4 and all(run["final_loss"] is not None for r in records for run in r["runs"])

"""The typed config: defaults compose, bad values are refused with a clear message."""

from __future__ import annotations

import pytest

from lrtransfer.config import ConfigError, LRGrid, semantic, validate
from tests.conftest import compose, typed


def test_defaults_compose_and_validate():
    cfg = typed()
    assert cfg.model.name == "mlp" and cfg.param.name == "standard" and cfg.optim.name == "adam"
    assert cfg.width > 0 and cfg.depth >= 2
    assert cfg.lr.values()[0] == cfg.lr.log2_min and cfg.lr.values()[-1] == cfg.lr.log2_max


def test_lr_grid_follows_the_optimizer_unless_overridden():
    assert typed("optim=sgd").lr.log2_max > typed("optim=adam").lr.log2_max
    assert typed("optim=sgd", "lr.log2_min=-3").lr.log2_min == -3


def test_lr_grid_values():
    assert LRGrid(-4, -1, 1).values() == [-4, -3, -2, -1]
    assert LRGrid(-4, -3, 0.5).values() == [-4, -3.5, -3]
    assert LRGrid(-2, -2, 1).values() == [-2]


@pytest.mark.parametrize(
    "override, fragment",
    [
        ("width=0", "width must be positive"),
        ("depth=-1", "depth must be positive"),
        ("train.steps=0", "train.steps must be positive"),
        ("train.batch_size=0", "train.batch_size must be positive"),
        ("lr.log2_step=0", "lr.log2_step must be positive"),
        ("n_seeds=0", "n_seeds must be positive"),
        ("engine.device=tpu", "engine.device='tpu' is not one of"),
        ("train.final_window=1.5", "train.final_window"),
        ("name=a/b", "name="),
    ],
)
def test_bad_values_are_refused(override, fragment):
    with pytest.raises(ConfigError, match=fragment.replace("(", r"\(")):
        validate(compose(override))


def test_inverted_grid_is_refused():
    with pytest.raises(ConfigError, match="empty LR grid"):
        validate(compose("lr.log2_min=-2", "lr.log2_max=-8"))


def test_semantic_part_leaves_out_locations_and_execution():
    cfg = compose()
    sem = semantic(cfg)
    assert {"results_dir", "name", "engine"}.isdisjoint(sem)
    assert {"model", "param", "optim", "data", "width", "depth", "seed", "lr", "train"} <= set(sem)


def test_a_study_preset_names_its_folder_unless_overridden():
    assert typed("study=width").name == "width"
    assert typed("study=width", "name=mine").name == "mine"
    assert typed().name == "default"


def test_the_depth_study_sweeps_resnet_depths_and_yields_to_the_command_line():
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module("lrtransfer.conf", version_base="1.3"):
        cfg = hydra_compose("config", overrides=["study=depth"], return_hydra_config=True)
    assert cfg.hydra.sweeper.params.depth == "2,4,8,16"
    c = typed("study=depth")
    assert (c.name, c.model.name, c.width) == ("depth", "resnet", 128)
    c = typed("study=depth", "model=mlp", "width=64")
    assert (c.model.name, c.width) == ("mlp", 64)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        (["param=equalized", "param.gain=0"], "param.gain must be positive"),
        (["param=mup", "param.base_width=0"], "param.base_width must be positive"),
        (["param=mup", "param.depth_exponent=-1"], "param.depth_exponent must be >= 0"),
        (["param=modular", "param.bias_mass=-0.1"], "param.bias_mass must be >= 0"),
        (["param=modular", "param.ns_steps=0"], "param.ns_steps must be positive"),
    ],
)
def test_parameterization_values_are_checked(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        validate(compose(*overrides))


def test_a_pair_may_have_its_own_lr_grid():
    """A parameterization's own grid (LR_GRIDS, per kind of update): equalized's LR means something else than SP's;
    modular's is a target norm, the same grid whatever the optimizer."""
    assert typed("param=equalized").lr.log2_max > typed().lr.log2_max
    assert typed("param=equalized", "optim=sgd").lr.log2_max > typed("optim=sgd").lr.log2_max
    assert typed("param=modular").lr == typed("param=modular", "optim=sgd").lr
    assert typed("param=mup").lr == typed().lr
    assert typed("param=equalized", "lr.log2_max=-2").lr.log2_max == -2  # the command line still wins


def test_the_grid_schema_travels_by_name_and_keeps_its_fields():
    """A launcher (submitit) sends a job's config to a worker and back: the run-time classes of
    the `grid` node must be pickled by reference, or cloudpickle writes a copy's fields over the
    original's and every later config in the process loses its `grid` keys."""
    import dataclasses
    import pickle

    import cloudpickle

    from lrtransfer.config import grid_schema

    root = grid_schema()
    assert pickle.loads(pickle.dumps(root)) is root
    cloudpickle.loads(cloudpickle.dumps(root()))
    assert [f.name for f in dataclasses.fields(root)] == ["param", "optim", "hp"]
    assert typed("grid.optim.weight_decay=[0,0.1]").grid.optim.weight_decay == [0.0, 0.1]
    cfg = typed("hp.hidden.lr_mult=2", "grid.hp.readout.init_mult=[1,2]")  # nested run-time classes: by name too
    again = cloudpickle.loads(cloudpickle.dumps(cfg))
    assert again.hp.hidden.lr_mult == 2.0 and again.grid.hp.readout.init_mult == [1.0, 2.0]
    assert type(pickle.loads(pickle.dumps(cfg.hp.hidden))) is type(cfg.hp.hidden)


def test_keys_added_to_an_option_keep_the_ids_of_jobs_run_before_them():
    """model=custom's keys for published models (config, width_key, ...) at their defaults compute
    what a custom job computed before they existed: its identity is the same; set, they change it."""
    from omegaconf import OmegaConf

    cfg = OmegaConf.to_container(compose("model=custom", "model.target=examples/mynets.py:build"), resolve=True,
                                 enum_to_str=True)
    before = {**cfg, "model": {k: v for k, v in cfg["model"].items()
                               if k not in ("config", "config_kwargs", "width_key", "depth_key", "output")}}
    assert semantic(cfg) == semantic(before)
    assert semantic({**cfg, "model": {**cfg["model"], "width_key": "n_embd"}}) != semantic(before)


@pytest.mark.parametrize("override, fragment", [
    ("optim.lr=0.1", "unknown key 'optim.lr' in 'optim'; valid: beta1, "),
    ("train.learning_rate=0.1", "unknown key 'train.learning_rate'"),
    ("lr.values=[0.1,0.01]", "unknown key 'lr.values' in 'lr'"),
    ("lr=0.001", "lr=0.001: lr is a section of keys"),
    ("+learning_rate=0.1", "unknown key 'learning_rate'"),
])
def test_an_lr_set_the_way_other_tools_set_it_points_to_the_grid(cli, override, fragment):
    """The first thing a new user types is an LR; the line names the grid's keys, with the user's
    value as a one-LR grid where the line has it."""
    code, _, err = cli("sweep", override, "--plan")
    line = err.strip()
    assert code == 2 and "\n" not in line and fragment in line, err
    assert "the LRs are the sweep's grid: 2^lr.log2_min .. 2^lr.log2_max, lr.log2_step octaves apart" in line
    if override == "lr=0.001":
        assert line.endswith("(one LR, 0.001: lr.log2_min=-9.966 lr.log2_max=-9.966)")


def test_the_lr_pointer_names_a_roles_multiplier_and_leaves_other_keys_alone():
    from lrtransfer.errors import lr_hint

    assert lr_hint("hp.hidden.lr") == "; the role's LR is the grid's LR times hp.hidden.lr_mult"
    assert lr_hint("grid.hp.readout.learning_rate").endswith("grid.hp.readout.lr_mult")
    assert lr_hint("lr.log2_min") == lr_hint("optim.lrr") == lr_hint("optim.beta1") == ""
    assert lr_hint("search.optim.lr") == lr_hint("points.lr") == ""  # these sections name their own LR keys
    assert lr_hint("optim.lr", "abc").endswith("(one LR, both its log2: -6.644 for 0.01)")
    assert lr_hint("lr", "-1").endswith("(one LR, both its log2: -6.644 for 0.01)")

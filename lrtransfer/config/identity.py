"""A job's identity: the part of its config that decides what is computed.

`semantic` is what `store.job_id` hashes, so the same point of a sweep lands in the
same folder whatever launcher, device, tracker or results folder ran it.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from omegaconf import DictConfig, OmegaConf

from lrtransfer import options
from lrtransfer.config.keys import RUN_SETTINGS, Config
from lrtransfer.config.runs import flatten, has_points
from lrtransfer.options import GROUPS, hp
from lrtransfer.options.contents import fingerprint
from lrtransfer.options.trainer import ENGINE_GROUPS

# Keys of `lr` that decide which jobs an adaptive sweep plans, not what a job trains.
SWEEP_ONLY_LR_KEYS = ("resolution",)


def activation_of(model_name: str, param_name: str, activation: str) -> str:
    """model.activation with `auto` resolved: the model's own nonlinearity (its options'
    ACTIVATION), scaled when the parameterization says its models use the scaled forms
    (its options' SCALED_ACTIVATION: param=modular, whose reference models use only
    sensitivity-1 nonlinearities, e.g. Modula's GPT its ScaledGELU)."""
    if activation != "auto":
        return activation
    name = getattr(options.of("model").get(model_name), "ACTIVATION", "relu")
    scaled = getattr(options.of("param").get(param_name), "SCALED_ACTIVATION", False)
    return f"scaled_{name}" if scaled else name


def model_activation(cfg: Config) -> str:
    """The nonlinearity a validated config's model uses (`activation_of`)."""
    return activation_of(cfg.model.name, cfg.param.name, cfg.model.activation.value)


def data_contents(schema: type, node: dict) -> dict[str, str]:
    """Each `content` path field that is set (`schema.content`) -> what its data holds, so that a
    moved file keeps its jobs and a changed one retrains; the files beside it, only where they are
    read (meta.pkl, not while data.vocab_size is given)."""
    out = {}
    for f in fields(schema):
        if f.metadata.get("content") and node.get(f.name) is not None:
            unless = f.metadata.get("read_unless")
            read = not (unless and node.get(unless) is not None)
            out[f.name] = fingerprint(node[f.name], f.metadata["with_files"] if read else ())
    return out


def inputs(cfg: dict) -> dict[str, str]:
    """What a job was built from, by dotted key: each data file a schema marks `content` (what it
    holds, `data_contents`), each field a schema marks `fingerprint` (model.source: its model's
    local source files) and the files an option names itself (its `contents`: a command's script).
    A record keeps them (`inputs`), so that readers, which never read the data, tell apart two
    versions of the same files in one study folder."""
    out: dict[str, str] = {}
    for group in GROUPS:
        node = cfg.get(group)
        name = node.get("name") if isinstance(node, dict) else None
        schema = options.of(group).get(name) if isinstance(name, str) else None
        if schema is None:
            continue
        held = data_contents(schema, node)
        for f in fields(schema):
            if f.metadata.get("fingerprint") and isinstance(node.get(f.name), str) and node[f.name]:
                out[f"{group}.{f.name}"] = node[f.name]
            elif f.name in held:
                out[f"{group}.{f.name}"] = held[f.name]
        if hasattr(schema, "contents"):  # the files an option names itself (trainer=command's script)
            for key, files in schema.contents(node).items():
                for name, held_by in files.items():
                    out[f"{group}.{key}.{name}"] = held_by
    return out


def recorded(cfg: dict) -> dict:
    """The resolved config as a job's record holds it. trainer=engine (the default) is left out, so
    an engine job's record and identity read as they did before trainers existed; a trainer that
    runs the user's own command leaves out the engine's groups (`ENGINE_GROUPS`: model, param, optim,
    data), which compute nothing there and would name its groups after a model it never trained."""
    trainer = cfg.get("trainer")
    if not isinstance(trainer, dict):
        return _hp_where_set(cfg)
    dropped = ("trainer",) if trainer.get("name") == "engine" else ENGINE_GROUPS
    return _hp_where_set({k: v for k, v in cfg.items() if k not in dropped})


def semantic(cfg: DictConfig | dict) -> dict:
    """The part of a resolved config that decides what is computed: a job's identity.

    Output locations (`results_dir`, `name`), how a job runs, where its results
    also go and how a sweep picks its jobs (`RUN_SETTINGS`: `engine`, `tracker`,
    `adaptive`, and `lr.resolution`, which only an adaptive sweep reads), Hydra's own settings and the
    fields a schema marks as `location` (where a dataset lives, whether it may be
    downloaded) or `inert` (a reference point that computes nothing) are left out, and so are those
    it marks `added` while at the value jobs computed before the key existed (`before`) or while the
    key they serve is idle (`idle_while`), so the same point is recognised whichever launcher, device,
    tracker, study folder or data folder ran it. A data file a schema marks `content` is there by
    what it holds, not by its path (`data_contents`).
    What a choice resolves to is recorded, not the word `auto` (model.activation), and a
    parameterization's rule REVISION joins its options when non-zero. The config is first as its
    record holds it (`recorded`), and an option may add what its files hold (its `contents`: the
    script a command names).
    """
    if isinstance(cfg, DictConfig):
        cfg = OmegaConf.to_container(cfg, resolve=True, enum_to_str=True)  # type: ignore[assignment]
    cfg = recorded(cfg)
    out = {k: v for k, v in cfg.items() if k not in ("hydra", "results_dir", "name", *RUN_SETTINGS)}
    if isinstance(out.get("lr"), dict):
        out["lr"] = {k: v for k, v in out["lr"].items() if k not in SWEEP_ONLY_LR_KEYS}
    train = out.get("train")
    if isinstance(train, dict) and train.get("dtype") == "bf16_autocast":  # bf16's former name, one computation
        out["train"] = {**train, "dtype": "bf16"}
    grid = {k: v for k, v in flatten(out.pop("grid", None)).items() if v is not None}
    if grid:  # no grid (the default): the same identity as before grids existed
        out["grid"] = grid
    tuned = hp.set_values(out.pop("hp", None) or {})
    if tuned:  # hp.* unset (the default): the same identity as before the keys existed
        out["hp"] = tuned
    if not has_points(out):  # no rows (the default): the same identity as before the key existed
        out.pop("points", None)
    for group in GROUPS:
        node = out.get(group)
        schema = options.of(group).get(node.get("name")) if isinstance(node, dict) else None
        if schema is not None:
            hidden = {f.name for f in fields(schema) if f.metadata.get("location") or f.metadata.get("inert")}
            # a key added later, at the value that computes what jobs did before it existed (its default, or `before`),
            # or while the key it serves is idle (`schema.added`'s idle_while)
            hidden |= {f.name for f in fields(schema) if f.metadata.get("added") and node.get(f.name) == f.metadata["before"]}
            hidden |= {f.name for f in fields(schema) if f.metadata.get("idle_while")
                       and node.get(f.metadata["idle_while"][0]) == f.metadata["idle_while"][1]}
            out[group] = {k: v for k, v in node.items() if k not in hidden}
            out[group].update(data_contents(schema, node))
            if hasattr(schema, "contents"):
                out[group].update(schema.contents(node))
    model, param = out.get("model"), out.get("param")
    if isinstance(model, dict) and isinstance(param, dict):
        if "activation" in model:
            act = activation_of(model.get("name"), param.get("name"), model["activation"])
            out["model"] = {**model, "activation": act}
        revision = getattr(options.of("param").get(param.get("name")), "REVISION", 0)
        if revision:
            out["param"] = {**param, "revision": revision}
    return out


def _hp_where_set(config: dict) -> dict:
    """A resolved config as a record keeps it: the keys added for per-module hyperparameters (`hp`,
    `grid.hp`, `points`, `search`) only where set (`search`: in a search's or a transfer check's
    jobs), so that a job without them writes the record it wrote before they existed."""
    out = dict(config)
    if not hp.set_values(out.get("hp") or {}):
        out.pop("hp", None)
    grid = out.get("grid")
    if isinstance(grid, dict) and "hp" in grid and not any(v is not None for v in flatten(grid["hp"]).values()):
        out["grid"] = {k: v for k, v in grid.items() if k != "hp"}
    if not has_points(out):
        out.pop("points", None)
    search = out.get("search")
    if isinstance(search, dict) and not (search.get("enabled") or search.get("transfer_from")):
        out.pop("search")  # read only by a search or a transfer check
    return out


def added_values(group: str, name: str) -> dict[str, Any]:
    """The keys of option `name` of `group` that jobs ran without (`schema.added`, `schema.inert`), each
    at the value those jobs computed with: what a record written before the key existed means by
    lacking it. Scans the options (and so imports torch): readers call it only for such records."""
    schema = options.of(group).get(name)
    if schema is None:
        return {}
    return {f.name: f.metadata["before"] if f.metadata.get("added") else f.default
            for f in fields(schema) if f.metadata.get("added") or f.metadata.get("inert")}

"""`lrtransfer inspect`: what a parameterization does to each trained tensor of a model.

A user who asks "is this muP as the `mup` package has it?" needs the numbers, not
the code: for the composed config, one row per trained tensor with its role, its
initial mean and std measured on the built model (seed 0, the first seed a sweep
trains: a unit gain and a zero bias, both of std 0, differ in their mean), its forward multiplier, its learning-rate multiplier for the configured optimizer
and, where the LR is a norm, the tensor's target norm at LR 1 (param=modular: with
the atom's mass and sensitivity, when the whole network's target is 1; param=spectral:
sqrt(fan_out / fan_in) for a weight, 1 for a vector). At several
widths (or depths, or any scale) the ratios between them show the scaling rule itself. The reference tests
(tests/test_reference.py) compare these rows with numbers the `mup` and `modula`
packages produced.
"""

from __future__ import annotations

import torch
from omegaconf import OmegaConf
from torch.overrides import TorchFunctionMode

from lrtransfer.config import Config, semantic, tuned_keys
from lrtransfer.errors import Fault, UserError, collected, one_line
from lrtransfer.nn import Activation, Residual, is_one_dimensional
from lrtransfer.options.param.base import tensor_update
from lrtransfer.options.schema import ORTHOGONALIZED, scaled_beta

VECTOR = "vector"  # the role of a bias or a gain: one dimension


def config_dict(cfg: Config) -> dict:
    """The semantic part of a typed config (what a job's identity hashes), as plain data."""
    return semantic(OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True, enum_to_str=True))


def _built(cfg: Config, input_shape: tuple[int, ...], output_dim: int, seed: int):
    from lrtransfer.training import build

    param = build.parameterization(cfg)
    model = build.model(cfg, param, runs=1, input_shape=input_shape, output_dim=output_dim)
    with torch.no_grad():
        param.initialize(model, [seed])
    return param, model


def tensors(cfg: Config, input_shape: tuple[int, ...], output_dim: int, seed: int = 0) -> list[dict]:
    """One row per trained tensor of cfg's model for inputs of `input_shape`, in forward order."""
    return _rows(*_built(cfg, input_shape, output_dim, seed), cfg.optim)


def effective(param, slots, optim, log2_lr: float | None) -> list[dict]:
    """Each tensor's effective settings for one run: its per-module role (`hp.<role>`: the most specific
    that holds it), Adam's epsilon, the weight decay per step (the schedule's factor 1) and, given
    the run's log2 LR, its LR; what the update computes with, `hp.*` and the rule's multipliers in."""
    from lrtransfer.options.param.tuning import roles_of

    lr = torch.tensor([2.0 ** (log2_lr if log2_lr is not None else 0.0)], dtype=torch.float64)
    decays = param.decays(slots, lr, 1.0, optim) if hasattr(optim, "weight_decay") else None
    out = []
    for i, slot in enumerate(slots):
        roles = roles_of(slot.atom, slot.name)
        row = {"hp_role": roles[0] if roles else None,
               "eps": float(optim.eps * slot.eps_mult) if hasattr(optim, "eps") else None,
               "decay": 0.0 if decays is None else float(decays[i][0])}
        if log2_lr is not None:
            row["lr"] = float(param.rates([slot], lr)[0][0]) if param.target_norm(slot) is None else None
        elif getattr(optim, "decay_scaling", None) is not None and optim.decay_scaling.value == "lr":
            row["decay"] = None  # decay x the LR: needs the run's LR (--log2-lr)
        out.append(row)
    return out


def own(value, optim, name: str) -> float:
    """A tensor's beta before the rule's multiplier: its own (hp.<role>.beta1), else the optimizer's."""
    return float(getattr(optim, name) if value is None else value)


def _rows(param, model, optim) -> list[dict]:
    """lr_mult, eps_mult, wd_mult: the parameterization's, the SDE rule's factors included (wd_mult
    0 for a bias or gain under optim.decay_1d=false); beta1, beta2: the tensor's own (None under an
    optimizer without them)."""
    names = {id(p): n for n, p in model.named_parameters()}
    names.update(model.user_names() if hasattr(model, "user_names") else {})  # model=custom: the user's own
    tree = getattr(param, "shares", None) is not None  # the modular norm's masses and sensitivities
    rows = []
    decay_1d, sde_decay = getattr(optim, "decay_1d", True), param.sde.decay(optim.decay_scaling.value)
    # a tensor Adam updates has betas (not SGD's, nor Muon's orthogonalised matrices)
    adam = lambda s: hasattr(optim, "beta1") and tensor_update(param.update, s.atom, s.name) != ORTHOGONALIZED  # noqa: E731
    for slot in param.slots(model):
        atom, t = slot.atom, slot.tensor.detach()[0]  # (...): the one run's tensor, in storage shape
        tied = atom.tied is not None and slot.name == "weight"
        rows.append({
            "name": names[id(slot.tensor)],
            "shape": list(t.shape),
            "role": (atom.role if slot.name in ("weight", "tensor") else VECTOR)
            + (" (readout)" if atom.tag == "readout" and slot.name == "weight" else "")
            + (f" (tied readout {atom.tied.name})" if tied else ""),
            "init_mean": float(t.double().mean()),
            "init_std": float(t.double().std()) if t.numel() > 1 else 0.0,
            "forward_mult": float(atom.weight_mult if slot.name == "weight" else
                                  atom.bias_mult if slot.name == "bias" else 1.0),
            "lr_mult": float(slot.lr_mult),
            "eps_mult": float(slot.eps_mult),
            "wd_mult": float(slot.wd_mult * sde_decay if decay_1d or not is_one_dimensional(slot) else 0.0),
            "beta1": scaled_beta(own(slot.beta1, optim, "beta1"), slot.beta1_mult) if adam(slot) else None,
            "beta2": scaled_beta(own(slot.beta2, optim, "beta2"), slot.beta2_mult) if adam(slot) else None,
            "readout_mult": float(atom.tied.weight_mult) if tied else None,  # a tied table's readout use
            "mass": float(atom.mass) if tree else None,
            "sensitivity": float(atom.sensitivity) if tree else None,
            "target_norm": param.target_norm(slot),
        })
    return rows


def inspect(cfg: Config, log2_lr: float | None = None) -> dict:
    """{"config": ..., "tensors": [...]} for one typed config (its data gives the model's shapes); each
    tensor's effective epsilon, decay per step and (given `log2_lr`) LR beside its multipliers.
    A user's model (`model.target`) that fails in its own code is said in one line, where in its
    code and what, as a sweep says such a job's failure: a traceback through the engine's wrapping
    hides which line of the model is at fault."""
    try:
        return _inspect(cfg, log2_lr)
    except (UserError, KeyboardInterrupt):
        raise
    except Exception as e:
        target = getattr(cfg.model, "target", "")
        if not target:  # a built-in model's failure is lrtransfer's own: its traceback is the report
            raise
        at = f"width={cfg.width}" + (f" depth={cfg.depth}" if getattr(cfg.model, "depth_key", None) else "")
        raise Fault(f"model.target={target} fails in its own code at {at}: "
                    f"{one_line(e)[:300]}{own_frame(e)}") from e


def own_frame(e: BaseException) -> str:
    """` (at file.py:LINE in NAME)`: the innermost frame of the traceback outside torch and lrtransfer,
    the user's line that the error came from; empty where there is none."""
    import os
    import traceback

    import lrtransfer

    skip = (os.path.dirname(torch.__file__), os.path.dirname(lrtransfer.__file__))
    mine = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith(skip)]
    return f" (at {os.path.basename(mine[-1].filename)}:{mine[-1].lineno} in {mine[-1].name})" if mine else ""


def _inspect(cfg: Config, log2_lr: float | None) -> dict:
    from lrtransfer.training import build
    from lrtransfer.options.data import ensure_files

    ensure_files(cfg.data)
    task = build.task(cfg, torch.device("cpu"), torch.float32)
    param, model = _built(cfg, tuple(task.input_shape), task.output_dim, 0)
    build.unused_roles(param.tune, param.slots(model), tuned_keys(cfg))  # an hp role no tensor has: one line
    doc = {"config": config_dict(cfg), "branch_mult": branch_mult(model), "kappa": param.sde.kappa}
    skips = skip_mult(model)
    if skips is not None:
        doc["skip_mult"] = skips
    doc.update(unit_scales(model))
    with torch.no_grad(), collected() as said, AttentionScales() as seen:  # warnings said once: as notes
        model(task.sample(torch.Generator().manual_seed(0), 2)[0])  # a forward shows where attention runs
    doc["attention_scale"] = seen.scale()
    doc["tensors"] = _rows(param, model, cfg.optim)
    for row, more in zip(doc["tensors"], effective(param, param.slots(model), cfg.optim, log2_lr)):
        row.update(more)
    if log2_lr is not None:
        doc["log2_lr"] = log2_lr
    notes = []
    if hasattr(model, "notes"):  # model=custom: what the rules do unseen, and what they cannot reach
        notes = model.notes(param) + [f"note: {m}" for m in said] + branch_notes(model)
    return {**doc, "notes": notes} if notes else doc


def branch_mult(model) -> float | list[float] | None:
    """The residual branches' multiplier: the built-in models' `Residual` blocks, or the factor folded
    into a published model's branch outputs; each branch's, in order, where they differ (u-muP's
    taus); None where the model has no residual branch."""
    found = [_number(m.branch) for m in model.modules() if isinstance(m, Residual)]
    found += [a.branch_mult for a in model.atoms() if a.branch_output]
    if len(set(found)) > 1:
        return found
    return float(found[0]) if found else None


def skip_mult(model) -> list[float] | None:
    """Each residual block's multiplier of its skip connection, where one is not 1 (u-muP's); else None."""
    found = [_number(m.skip) for m in model.modules() if isinstance(m, Residual)]
    return found if any(s != 1.0 for s in found) else None


def _number(value) -> float | list[float]:
    """A multiplier as plain data: a float, or one per run."""
    return value.tolist() if isinstance(value, torch.Tensor) else float(value)


def unit_scales(model) -> dict:
    """Where a rule unit-scales the model's own operations (u-muP's): each nonlinearity's input
    multiplier and output gain, and the factor on attention's output at the task's sequence length."""
    out = {}
    acts = {(_key(m.mult), _key(m.out * m.mult)) for m in model.modules() if isinstance(m, Activation)}
    if acts and acts != {(1.0, 1.0)}:
        (mult, gain), *_ = sorted(acts)
        out["activation_mult"], out["activation_gain"] = mult, gain
    outs = {_key(m.out_at_context) for m in model.modules() if hasattr(m, "out_at_context") and m.out_mult is not None}
    if outs:
        out["attention_output_mult"] = sorted(outs)[0]
    return out


def _key(value):
    v = _number(value)
    return tuple(v) if isinstance(v, list) else v


def branch_notes(model) -> list[str]:
    """Which layers of a published model carry the branch multiplier (`roles.find_branch_outputs`)."""
    outs = [a.path for a in model.atoms() if a.branch_output]
    if not outs:
        return []
    mult = next(a.branch_mult for a in model.atoms() if a.branch_output)
    return [f"note: residual branches end in {', '.join(outs[:4])}{', ...' if len(outs) > 4 else ''} "
            f"({len(outs)} in all): their weight and bias carry the branch multiplier {mult:.4g}"]


class AttentionScales(TorchFunctionMode):
    """The factor on q.k that each scaled_dot_product_attention call of a forward computes with."""

    def __enter__(self):
        self.seen = []
        return super().__enter__()

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.scaled_dot_product_attention:
            self.seen.append(kwargs.get("scale") or (args[0] if args else kwargs["query"]).shape[-1] ** -0.5)
        return func(*args, **kwargs)

    def scale(self) -> float | None:
        """The one factor every call used; None without attention (or where it computes q.k itself)."""
        found = set(self.seen)
        return float(found.pop()) if len(found) == 1 else None


# ---------------------------------------------------------------- tables
COLUMNS = ("init_std", "forward_mult", "lr_mult", "eps_mult", "wd_mult", "target_norm")
# shown only where some tensor's differs from 1 (most rules leave eps and weight decay alone)
UNLESS_ONE = ("eps_mult", "wd_mult")


def _num(v) -> str:
    if v is None:
        return "-"
    return f"{v:.4g}" if v else "0"


def table(doc: dict) -> str:
    """One width's rows as a text table."""
    extra = [(k, h) for k, h in (("eps_mult", "eps mult"), ("wd_mult", "wd mult")) if _varies(doc, k)]
    optim = doc["config"]["optim"]  # a tensor's own betas, where some differ from the optimizer's (param.sde_rule)
    extra += [(k, k) for k in ("beta1", "beta2") if any(r.get(k) not in (None, optim.get(k)) for r in doc["tensors"])]
    tuned = "hp" in doc["config"] or "lr" in doc["tensors"][0]  # a run's own settings: show what it trains with
    extra += [(k, h) for k, h in (("hp_role", "hp role"), ("lr", "lr"), ("eps", "eps"), ("decay", "decay/step"))
              if tuned and any(r.get(k) is not None for r in doc["tensors"])
              and (k != "decay" or any(r.get(k) for r in doc["tensors"]))]
    extra += [(k, h) for k, h in (("mass", "mass"), ("sensitivity", "sens"), ("target_norm", "target"))
              if any(r[k] is not None for r in doc["tensors"])]
    head = ["tensor", "shape", "role", "init mean", "init std", "fwd mult", "lr mult"] + [h for _, h in extra]
    rows = []
    for r in doc["tensors"]:
        fwd = _num(r["forward_mult"]) + (f", {_num(r['readout_mult'])} as readout" if r.get("readout_mult") is not None else "")
        row = [r["name"], "x".join(map(str, r["shape"])), r["role"], _num(r["init_mean"]), _num(r["init_std"]), fwd,
               _num(r["lr_mult"])]
        rows.append(row + [r[k] if isinstance(r.get(k), str) else _num(r.get(k)) for k, _ in extra])
    return "\n".join([_format(head, rows), *scale_lines(doc)])


def scale_lines(doc: dict) -> list[str]:
    """The model-wide multipliers a rule sets beside the tensors' own (u-muP's unit-scaled operations)."""
    lines = []
    if "skip_mult" in doc:
        lines.append("residual adds (skip, branch): " + ", ".join(
            f"({_num(s)}, {_num(b)})" if isinstance(s, float) else "(per run)"
            for s, b in zip(doc["skip_mult"], doc["branch_mult"] if isinstance(doc["branch_mult"], list)
                            else [doc["branch_mult"]] * len(doc["skip_mult"]))))
    if "activation_gain" in doc:
        mult, gain = doc["activation_mult"], doc["activation_gain"]
        lines.append("nonlinearities: gain x f(mult x) / mult, " + (f"mult {_num(mult)}, gain {_num(gain)}"
                                                                   if isinstance(mult, float) else "one mult per run"))
    if "attention_output_mult" in doc:
        m = doc["attention_output_mult"]
        lines.append(f"attention output x {_num(m) if isinstance(m, float) else 'one factor per run'}")
    return lines


def ratio_table(docs: list[dict]) -> str:
    """Each tensor's value in every config over its value in the first (the scaling rule, read off),
    the configs named by the keys that differ between them (`varying`). A tensor is the same one in
    another config where it has the same name and role and its shape differs only by the width; else
    (a deeper MLP's `layers.2` is hidden, not the readout) it is `-` there."""
    labels = [",".join(str(value_of(d["config"], k)) for k in varying(docs)) for d in docs]
    columns = [c for c in COLUMNS if any(r.get(c) is not None for r in docs[0]["tensors"])
               and (c not in UNLESS_ONE or any(_varies(d, c) for d in docs))]
    head = ["tensor"] + [f"{c} {label}/{labels[0]}" for c in columns for label in labels[1:]]
    width = docs[0]["config"]["width"]
    same = [{r["name"]: r for r in d["tensors"]} for d in docs[1:]]
    rows = []
    for first in docs[0]["tensors"]:
        row = [first["name"]]
        found = [_same(first, named.get(first["name"]), width, d["config"]["width"]) for named, d in zip(same, docs[1:])]
        for c in columns:
            for other in found:
                a, b = first[c], other.get(c) if other else None
                row.append("-" if a is None or b is None else (_num(b / a) if a else ("1" if not b else "inf")))
        rows.append(row)
    return _format(head, rows)


def _same(row: dict, other: dict | None, width: int, other_width: int) -> dict | None:
    """`other` where it is `row`'s tensor at another config: its role, and its shape but for the width."""
    if other is None or other["role"] != row["role"] or len(other["shape"]) != len(row["shape"]):
        return None
    fits = all(a == b or a * other_width == b * width for a, b in zip(row["shape"], other["shape"]))
    return other if fits else None


def varying(docs: list[dict]) -> list[str]:
    """The config keys (dotted) whose values differ between the docs: width first, then depth, then
    the others as the config orders them."""
    keys = [k for k in _keys(docs[0]["config"]) if len({repr(value_of(d["config"], k)) for d in docs}) > 1]
    return sorted(keys, key=lambda k: (k != "width", k != "depth"))


def _keys(config: dict, prefix: str = "") -> list[str]:
    out = []
    for k, v in config.items():
        out += _keys(v, f"{prefix}{k}.") if isinstance(v, dict) else [f"{prefix}{k}"]
    return out


def value_of(config: dict, key: str):
    """A dotted key's value in a plain config (None where it has none)."""
    for part in key.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config


def _varies(doc: dict, key: str) -> bool:
    return any(r.get(key, 1.0) != 1.0 for r in doc["tensors"])


def _format(head: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(head), line(["-" * w for w in widths])] + [line(r) for r in rows])


def describe(doc: dict, keys: list[str] = ()) -> str:
    """The config's model, parameterization, optimizer, width and depth, and `keys` (the others a list
    of configs varies in)."""
    c = doc["config"]
    rule = c["param"].get("sde_rule", "none")
    more = "".join(f" {k}={value_of(c, k)}" for k in keys if k not in ("width", "depth"))
    return (f"model={c['model']['name']} param={c['param']['name']} optim={c['optim']['name']} "
            f"width={c['width']} depth={c['depth']}{more}"
            + (f" sde_rule={rule} kappa={doc['kappa']:.4g}" if rule != "none" else ""))


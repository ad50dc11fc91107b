"""A user's `nn.Module` read as atoms: which of its tensors grow with the width, and how.

Roles from shapes, as `mup.set_base_shapes` finds them: the module is built at the
job's width and at twice it, and the dimensions whose sizes differ are the ones that
grow. Each layer that holds parameters becomes one atom: a Linear or convolution
(torch layout (out, in, *k): fan_in = in * prod(k), fan_out = out) is `input` (only
out grows), `hidden` (both), `output` (only in) or `fixed` (neither); a normalisation
layer's weight and bias are a gain (`hidden` when it spans the width), an Embedding a
lookup table; any other parameter is a `tensor` of its own (`hidden`, `vector` or
`fixed` by how many of its dimensions grow). The readout is the output weight that
makes the logits, or an embedding whose table a Linear reuses as its weight (GPT-2's
`lm_head` tied to `wte`): that tensor stays one atom, recorded as `tied`.

`transformers`' `Conv1D` (GPT-2's projections) is a Linear stored (in, out): it is
found by its name and its `nf` (out features), without importing transformers.

Attention queries, which muP starts at zero, are found by the names the known families
give them (`QUERY_NAMES`): a layer of its own (Llama's `q_proj`, BERT's `query`), or the
first third of the outputs of a fused query-key-value projection whose outputs are three
times its inputs (GPT-2's and nanoGPT's `c_attn`, which split q, k, v in that order).

A residual branch of a published transformer, x + branch(x), ends in a projection (`BRANCH_OUTPUTS`,
or the layers a glob names): multiplying its weight and bias multiplies the branch exactly, so a
depth rule reaches the module without editing it. The layers of the blocks those projections sit
in are the ones inside the branches (a depth rule's LR and epsilon corrections).
"""

from __future__ import annotations

import fnmatch
import math
import re
from dataclasses import dataclass

import torch
from torch import nn

from lrtransfer.errors import ConfigError
from lrtransfer.nn.atoms import FIXED, HIDDEN, INPUT, OUTPUT, VECTOR

# The last layer of each residual branch, by the names the known families give it: nanoGPT's and
# GPT-2's attention and MLP output projections (`c_proj`), Llama's (`o_proj`, `down_proj`)
BRANCH_OUTPUTS = ("c_proj", "o_proj", "down_proj")
# The modules the known families name their attention and MLP by (nanoGPT's and GPT-2's `attn` and `mlp`,
# Llama's `self_attn` and `mlp`): a layer whose path has one of these names among its parts sits in one
PART_NAMES = {"attention": ("attn", "self_attn", "attention", "self_attention"), "mlp": ("mlp", "feed_forward", "ffn")}
# A layer's last name -> the share of its outputs that is the attention query (from its first output)
QUERY_NAMES = {"q_proj": 1, "query": 1, "wq": 1, "to_q": 1, "c_attn": 3}  # 3: the first third (fused q, k, v)
NORMS = (nn.LayerNorm, nn.GroupNorm, nn.modules.batchnorm._NormBase) + ((nn.RMSNorm,) if hasattr(nn, "RMSNorm") else ())


@dataclass
class Layer:
    """One user layer's trained tensors: the atom each becomes."""

    path: str  # the user module's name ("" for the root)
    kind: str  # linear | conv | embedding | gain | tensor
    names: dict[str, str]  # atom tensor name -> the user's parameter name
    role: str = FIXED
    fan_in: int = 1
    fan_out: int = 1
    in_out: bool = False  # a Linear's weight stored (in, out): transformers' Conv1D
    tied: str = ""  # an embedding's table reused as a Linear's weight: that weight's name (the readout's use)
    query: int = 0  # how many of its first outputs are an attention query (0: none), `find_queries`
    branch_output: bool = False  # the last layer of a residual branch, `find_branch_outputs`
    in_branch: bool = False  # inside a residual block (a depth rule's corrections apply)
    within: tuple[str, ...] = ()  # the model's named parts it sits in (attention, mlp, group), `find_parts`


def _in_out_linear(module: nn.Module) -> bool:
    """transformers' Conv1D: y = x @ W + b with W (in, nf), despite the name a Linear."""
    w = getattr(module, "weight", None)
    return type(module).__name__ == "Conv1D" and isinstance(getattr(module, "nf", None), int) \
        and isinstance(w, torch.Tensor) and w.dim() == 2 and w.shape[1] == module.nf


def _matrix_kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.Linear) or _in_out_linear(module):
        return "linear"
    if isinstance(module, nn.modules.conv._ConvNd) and not module.transposed:
        return "conv"
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "embedding"
    return None


def layers_of(module: nn.Module) -> list[Layer]:
    """The user module's trained tensors grouped into layers, in registration (forward) order."""
    out, owner = [], {}  # owner: id of a tensor -> the layer that holds it
    for path, m in module.named_modules():
        full = lambda n: f"{path}.{n}" if path else n  # noqa: E731
        params = {n: p for n, p in m.named_parameters(recurse=False) if p is not None}
        kind = _matrix_kind(m)
        w = params.get("weight")
        if kind == "linear" and w is not None and id(w) in owner and owner[id(w)].kind == "embedding":
            owner[id(w)].tied = full("weight")  # an embedding's table is this Linear's weight too
        # a tied tensor belongs to its first layer
        own = {n: p for n, p in params.items() if id(p) not in owner}
        if not own:
            continue
        if kind is not None and "weight" in own and set(own) <= {"weight", "bias"} and own["weight"].dim() >= 2:
            layers = [Layer(path, kind, {n: full(n) for n in ("weight", "bias") if n in own}, in_out=_in_out_linear(m))]
        elif isinstance(m, NORMS) and "weight" in own and set(own) <= {"weight", "bias"}:
            layers = [Layer(path, "gain", {a: full(n) for a, n in (("gain", "weight"), ("bias", "bias")) if n in own})]
        else:
            layers = [Layer(path, "tensor", {"tensor": full(n)}) for n in own]
        for layer in layers:
            for name in layer.names.values():
                owner[id(params[name.rpartition(".")[2] if path else name])] = layer
        out += layers
    return out


def assign_roles(layers: list[Layer], shapes: dict[str, torch.Size], other: dict[str, torch.Size], target: str) -> None:
    """Each layer's fan-in, fan-out and role, from its shapes at the job's width and at another."""
    if set(shapes) != set(other):
        changed = sorted(set(shapes) ^ set(other))[0]
        raise ConfigError(f"model.target={target}: its parameters differ between widths (e.g. {changed}); "
                          "the width may change their sizes, not which there are")
    for layer in layers:
        main = layer.names.get("weight") or layer.names.get("gain") or layer.names["tensor"]
        a, b = shapes[main], other[main]
        if len(a) != len(b):
            raise ConfigError(f"model.target={target}: {main} has {len(a)} dimensions at one width, {len(b)} at another")
        grows = [x != y for x, y in zip(a, b)]
        if layer.kind == "embedding":  # (num, dim): already the (fan_in, fan_out) view
            layer.fan_in, layer.fan_out = a[0], a[1]
            g_in, g_out = grows[0], grows[1]
        elif layer.in_out:  # (in, out)
            layer.fan_in, layer.fan_out = a[0], a[1]
            g_in, g_out = grows[0], grows[1]
        elif layer.kind in ("linear", "conv"):  # torch's (out, in, *k)
            layer.fan_in, layer.fan_out = math.prod(a[1:]), a[0]
            g_in, g_out = any(grows[1:]), grows[0]
        else:  # gains and tensors: by how many dimensions grow
            layer.fan_in = layer.fan_out = a[-1] if len(a) else 1
            n = sum(grows)
            layer.role = FIXED if n == 0 else (HIDDEN if layer.kind == "gain" or n > 1 else VECTOR)
            continue
        layer.role = {(False, True): INPUT, (True, True): HIDDEN, (True, False): OUTPUT}.get((g_in, g_out), FIXED)


def find_readout(layers: list[Layer], output_dim: int, readout: str, target: str) -> Layer:
    """The layer whose weight makes the logits: named (`model.readout`), else the last output
    weight (fan_in grows, fan_out fixed) whose fan_out is output_dim, else an embedding of
    output_dim rows tied to a Linear (its table is the readout's weight), else the last output
    weight (fixed layers follow it)."""
    if readout:
        name = readout if readout.endswith(("weight", "tensor")) or "." in readout else f"{readout}.weight"
        for layer in layers:
            if name in layer.names.values() or readout == layer.path or name == layer.tied:
                return layer
        weights = [n for layer in layers for k, n in layer.names.items() if k != "bias"]
        raise ConfigError(f"model.readout={readout}: model.target={target} has no such parameter; "
                          f"weights: {', '.join(weights[:12])}")
    outputs = [layer for layer in layers if layer.role == OUTPUT]
    found = ([layer for layer in outputs if layer.fan_out == output_dim]
             or [layer for layer in layers if layer.tied and layer.fan_in == output_dim]
             or outputs)  # else: a fixed layer follows
    if not found:
        raise ConfigError(f"model.target={target}: no readout found (no weight maps the width to the "
                          f"{output_dim} logits); name it with model.readout=NAME")
    return found[-1]


def find_queries(layers: list[Layer]) -> None:
    """Mark the attention queries of the known families (`QUERY_NAMES`): a hidden Linear named as
    a query is one whole; a fused projection (`c_attn`) only where its outputs are three times its
    inputs, and then its first third."""
    for layer in layers:
        share = QUERY_NAMES.get(layer.path.rpartition(".")[2])
        if layer.kind == "linear" and layer.role == HIDDEN and share and layer.fan_out == share * layer.fan_in:
            layer.query = layer.fan_out // share


def find_branch_outputs(layers: list[Layer], pattern: str = "") -> list[Layer]:
    """Mark the last layer of each residual branch: the hidden Linears whose path matches the glob
    `pattern` (model.branch_outputs: one a branch, its last, `check_branch_glob`), else those the
    known families name so (`BRANCH_OUTPUTS`); and every layer of the blocks they sit in (`block_of`)."""
    if pattern:
        found = [layer for layer in layers if layer.kind == "linear" and fnmatch.fnmatchcase(layer.path, pattern)]
        check_branch_glob(layers, found, pattern)
    else:
        found = [layer for layer in layers if layer.kind == "linear" and layer.role == HIDDEN
                 and layer.path.rpartition(".")[2] in BRANCH_OUTPUTS]
    blocks = set()
    for layer in found:
        layer.branch_output = True
        blocks.add(block_of(layer.path))
    for layer in layers:
        layer.in_branch = any(layer.path.startswith(f"{b}.") for b in blocks)
    return found


def find_parts(layers: list[Layer], globs: dict[str, str]) -> None:
    """Mark the layers of the model's named parts (per-module hyperparameters: `hp.attention.*`):
    each part's layers are those whose path matches its glob (`globs`: part -> glob, "" for none),
    else, for attention and mlp, those with one of the known families' module names among their
    path's parts (`PART_NAMES`). The `group` part has no default: only its glob names it."""
    for layer in layers:
        found = []
        for part in ("attention", "mlp", "group"):
            glob = globs.get(part, "")
            if glob:
                hit = fnmatch.fnmatchcase(layer.path, glob)
            else:
                hit = bool(set(layer.path.split(".")) & set(PART_NAMES.get(part, ())))
            if hit:
                found.append(part)
        layer.within = tuple(found)


def block_of(path: str) -> str:
    """The residual block a branch's layer sits in: its path up to the last layer index (nanoGPT's
    `transformer.h.3`, Llama's `model.layers.3`), else the branch's parent module; "" for none."""
    indexed = re.match(r"(.*\.\d+)\.", path)
    return indexed.group(1) if indexed else path.rpartition(".")[0].rpartition(".")[0]


def check_branch_glob(layers: list[Layer], found: list[Layer], pattern: str) -> None:
    """A glob (model.branch_outputs) must name each residual branch's last Linear, once: a branch
    given two multiplies it twice, a layer outside the blocks or before its branch's end is no
    branch's output. The branch of a layer is its parent module (nanoGPT's `transformer.h.3.attn`)."""
    shown = ", ".join(layer.path for layer in found[:6]) + (", ..." if len(found) > 6 else "")
    said = f"model.branch_outputs={pattern}"
    outside = [layer.path for layer in found if not block_of(layer.path)]
    if outside:
        raise ConfigError(f"{said} matches {outside[0]}, outside the residual branches (in no block of the model); "
                          f"it matched {shown}: match each branch's last Linear only (e.g. '*.c_proj')")
    branches: dict[str, list[str]] = {}
    for layer in found:
        branches.setdefault(layer.path.rpartition(".")[0], []).append(layer.path)
    for branch, paths in branches.items():
        if len(paths) > 1:
            raise ConfigError(f"{said} gives the branch {branch} {len(paths)} output layers "
                              f"({', '.join(paths[:4])}), which would multiply it {len(paths)} times; it matched "
                              f"{shown}: match one Linear a branch, its last (e.g. '*.c_proj')")
    linears = [layer.path for layer in layers if layer.kind == "linear"]
    for layer in found:
        branch = layer.path.rpartition(".")[0]
        after = [p for p in linears[linears.index(layer.path) + 1:] if p.rpartition(".")[0] == branch]
        if after:
            raise ConfigError(f"{said} matches {layer.path}, which is not the last Linear of its branch {branch} "
                              f"({after[0]} follows it); it matched {shown}: match each branch's last Linear "
                              "(e.g. '*.c_proj')")
    check_branch_cover(linears, found, said, shown)


def check_branch_cover(linears: list[str], found: list[Layer], said: str, shown: str) -> None:
    """A glob must also name every branch: one naming the attention's output and not the MLP's (or
    block 0's and not the others') would scale some branches by the depth rule and leave the rest,
    a study of neither rule. Every block like one it covers (the same path with another index) must
    be covered, and in a covered block every child module holding Linears must hold a named one."""
    covered = {block_of(layer.path) for layer in found}
    peers = {block_of(p) for p in linears if block_of(p)}
    kinds = {re.sub(r"\.\d+$", ".#", b) for b in covered}
    missed = sorted(b for b in peers - covered if re.sub(r"\.\d+$", ".#", b) in kinds)
    if missed:
        raise ConfigError(f"{said} names the branches of {len(covered)} of {len(covered) + len(missed)} blocks and not "
                          f"those of {missed[0]}; it matched {shown}: match each block's branches (e.g. '*.c_proj')")
    named = {(block_of(layer.path), layer.path.removeprefix(block_of(layer.path) + ".").split(".")[0]) for layer in found}
    for block in sorted(covered):
        children: dict[str, list[str]] = {}
        for path in linears:
            rest = path.removeprefix(block + ".")
            if rest != path and "." in rest:
                children.setdefault(rest.split(".")[0], []).append(path)
        for child, paths in children.items():
            if (block, child) not in named:
                raise ConfigError(f"{said} leaves the branch {block}.{child} (its Linears: {', '.join(paths[:4])}) "
                                  f"with no output layer, so a depth rule would scale the other branches and not it; "
                                  f"it matched {shown}: match each branch's last Linear (e.g. '*.c_proj')")

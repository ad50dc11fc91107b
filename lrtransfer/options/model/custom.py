"""Your own model: any PyTorch `nn.Module`, width-swept, parameterized and batched.

`model.target` names a class or function (`path/file.py:NAME` or `package.module:NAME`)
that returns an `nn.Module` mapping a batch (B, *input_shape) to logits (B, output_dim)
(token ids (B, T) to (B, T, output_dim)). It is called with those of `width`, `depth`,
`input_shape` and `output_dim` that its signature names, plus `model.kwargs`; or, for a
model as it is published (nanoGPT's `GPT(config)`, a transformers `GPT2LMHeadModel`),
with its own config object, the width and depth under the fields `model.width_key` and
`model.depth_key` name (`target.py`). Its output is read where the logits are
(`model.output`: a tensor, an output object's `logits`, a tuple's first element).

The user's module becomes the same atoms the built-in models are made of, so every
parameterization and optimizer that needs no module tree applies unchanged: its roles
are read off its shapes at two widths (`nn/roles.py`: input, hidden, output; the
readout is the output weight that makes the logits, or `model.readout`), and it runs
for K runs at once by `torch.func.functional_call` under vmap (`nn/wrapped.py`).

Each run starts from the module's own init for its seed (`model.init=own`, `own_init.py`):
`standard` trains it as written, `mup` rescales it by its rules; `model.init=torch` draws
every Linear, convolution and Embedding from PyTorch's default init instead, per seed,
as lrtransfer did before the key existed (a tensor outside any known layer then keeps the
init its module gave it at seed 0).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

import torch
from omegaconf import OmegaConf

from lrtransfer.errors import ConfigError
from lrtransfer.nn import FIXED, OUTPUT
from lrtransfer.nn.roles import (BRANCH_OUTPUTS, assign_roles, find_branch_outputs, find_parts, find_queries,
                                 find_readout, layers_of)
from lrtransfer.nn.streams import cuda_devices, rng_state
from lrtransfer.nn.wrapped import Custom
from lrtransfer.options.model.loading import load
from lrtransfer.options.model.own_init import OwnInit, seeded
from lrtransfer.options.model.sizes import check_vocabulary, context_failure, int_fields
from lrtransfer.options.model.sources import source_hash
from lrtransfer.options.model.target import ARGUMENTS, check_keys, construct
from lrtransfer.options.schema import IMAGE, SIGNAL, TOKENS, VECTOR, added, fingerprint


class ModelInit(str, Enum):
    """Where a run's tensors start: the module's own init for the run's seed (`own`), or PyTorch's
    default init of each Linear, convolution and Embedding drawn by lrtransfer (`torch`: before
    the key existed, and the same draws as the built-in models')."""

    own = "own"
    torch = "torch"


@dataclass
class CustomOptions:
    MIN_DEPTH: ClassVar[int] = 1
    READS: ClassVar[tuple[str, ...]] = (VECTOR, IMAGE, SIGNAL, TOKENS)  # the module's own business
    MODULE_TREE: ClassVar[bool] = False  # atoms only: no compound rules (param=modular needs them)
    # roles of per-module hyperparameters beyond the base ones: its attention and MLP (found by the known
    # families' names, or model.attention / model.mlp), and a group of layers a glob names (model.group)
    PARTS: ClassVar[tuple[str, ...]] = ("attention", "mlp", "group")
    ATTENTION: ClassVar[bool] = True  # may compute attention: whether a rule reached it, `inspect` notes

    name: str = "custom"
    target: str = ""  # path/to/file.py:NAME or package.module:NAME
    # A mapping passed to the target as keyword arguments. None and typed Any, so that the
    # override model.kwargs='{dropout: 0.1}' replaces it: Hydra merges into a {} (or a typed
    # None dict) in struct mode and refuses its new keys.
    kwargs: Any = None
    readout: str = ""  # the output weight's parameter name, when the inferred one is wrong
    # A published model's own config class (package.module:NAME or path/file.py:NAME: a dataclass
    # such as nanoGPT's GPTConfig, or a transformers config): the target is called with one,
    # built from config_kwargs plus the width, depth, vocabulary and context fields.
    config: str = added("")
    config_kwargs: Any = added(None)  # a mapping, as kwargs
    # The field the width goes into (n_embd, hidden_size), or a mapping of fields to multiples of
    # the width ('{hidden_size: 1, intermediate_size: 4}'; a list of multiples for a channel list);
    # "" passes `width` to a factory that names it. depth_key likewise for the depth (n_layer).
    width_key: Any = added("")
    depth_key: str = added("")
    # The fields the data's vocabulary and context length go into, where a config names them otherwise
    # than the published ones do (vocab_size; block_size, n_positions, ...): vocab, ctx.
    vocab_key: str = added("")
    context_key: str = added("")
    # Where the logits are in what the forward returns: "" infers (a tensor; the `logits` of an
    # output object or dict; the first element of a tuple), else an attribute, key or index.
    output: str = added("")
    # own: each run starts from the module's own init for its seed; torch: PyTorch's default init of
    # every Linear, convolution and Embedding (what jobs computed before the key: no part of their ids)
    init: ModelInit = added(ModelInit.own, before=ModelInit.torch)
    # The last layer of each residual branch (a glob over layer names, '*.c_proj'), where a depth rule
    # multiplies the branch; "" finds the known families' (nanoGPT's and GPT-2's c_proj, Llama's o_proj, down_proj)
    branch_outputs: str = added("")
    # The layers of its attention and its MLP (globs over layer names, '*.attn.*'), which hp.attention.* and
    # hp.mlp.* address; "" finds the known families' (nanoGPT's and GPT-2's attn and mlp, Llama's self_attn)
    attention: str = added("")
    mlp: str = added("")
    # A group of layers of your choosing (a glob, '*.c_attn'): hp.group.* sets their tensors' values
    group: str = added("")
    # The content hash of the files the model is built from (the conf file fills it in:
    # `${lrt_source:...}`, see sources.py), so that a job's identity changes when its code does,
    # and its record says which version of the files it was built from.
    source: str = fingerprint("")

    def check(self) -> None:
        module, sep, name = self.target.rpartition(":")
        if not (sep and module and name.isidentifier()):
            raise ConfigError(f"model.target={self.target!r} must be path/to/file.py:NAME or package.module:NAME")
        if not isinstance(self.kwargs, (dict, type(None))):
            raise ConfigError(f"model.kwargs must be a mapping such as '{{dropout: 0.1}}', got {self.kwargs!r}")
        if not isinstance(self.config_kwargs, (dict, type(None))):
            raise ConfigError(f"model.config_kwargs must be a mapping such as '{{n_head: 4}}', got {self.config_kwargs!r}")
        if self.config_kwargs and not self.config:
            raise ConfigError("model.config_kwargs is set without model.config (the config class to build, "
                              "e.g. transformers:GPT2Config); set both, or pass the values in model.kwargs")
        if self.config:
            where, _, name = self.config.rpartition(":")
            if not (where and name.isidentifier()):
                raise ConfigError(f"model.config={self.config!r} must be path/to/file.py:NAME or package.module:NAME")
        check_keys(self.width_key, self.depth_key, self.vocab_key, self.context_key,
                   given={"model.config_kwargs": self.config_kwargs} if self.config else {"model.kwargs": self.kwargs})
        overlap = sorted(set(self.kwargs or {}) & set(ARGUMENTS))
        if overlap:
            raise ConfigError(f"model.kwargs sets {overlap[0]}, which lrtransfer passes itself; "
                              f"set it with the config key instead ({', '.join(ARGUMENTS)})")



OPTIONS = CustomOptions


if not OmegaConf.has_resolver("lrt_source"):
    OmegaConf.register_new_resolver("lrt_source", source_hash, use_cache=False)


def build(options: CustomOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Custom:
    target = options.target
    fn = load(target)
    given = dict(width=width, depth=depth, input_shape=tuple(input_shape), output_dim=output_dim)
    make = lambda w: construct(fn, options, **{**given, "width": w})  # noqa: E731
    # seed 0's own init (and, under model.init=torch, that of tensors outside a layer); on the meta device
    # in a check before any training
    net = on_meta(make, width) if torch.get_default_device().type == "meta" else seeded(lambda: make(width), 0)
    other = on_meta(make, 2 * width)
    layers = layers_of(net)
    shapes = {n: p.shape for n, p in net.named_parameters()}
    assign_roles(layers, shapes, {n: p.shape for n, p in other.named_parameters()}, target)
    if all(layer.role == FIXED for layer in layers):
        kept = f"{', '.join(list(shapes)[:4])}{', ...' if len(shapes) > 4 else ''} keep their shapes at width={2 * width}"
        raise ConfigError(f"model.target={target}: no parameter grows with width "
                          f"({kept if shapes else 'it has no parameters'})")
    fields = int_fields(net, fn, options)
    check_vocabulary(target, layers, output_dim, fields)
    explain = context_failure(target, layers, output_dim, fields)
    if torch.get_default_device().type == "meta":
        check_context(make, width, layers, tuple(input_shape), output_dim, explain, (repr(options), width))
    readout = find_readout(layers, output_dim, options.readout, target)
    if options.readout and not readout.tied:
        readout.role = OUTPUT  # the user's word: this weight makes the logits
    find_queries(layers)
    find_parts(layers, {"attention": options.attention, "mlp": options.mlp, "group": options.group})
    branches(layers, options.branch_outputs, param, target)
    own, ratios = None, None
    if options.init == ModelInit.own:
        own = own_init(make, width, net, options, given)
        if param.base_width is not None:
            ratios = at_base(own, make, layers, param.base_width)
    scale = attention_rule(param)
    return Custom(net, layers, readout, runs=runs, target=target, input_shape=tuple(input_shape),
                  output_dim=output_dim, output=options.output, attention_scale=scale,
                  scaled_modules=scale_attention(net, scale), explain=explain,
                  own=own.values if own else None, own_ratios=ratios, stream=functools.partial(stream, make, width))


def stream(make, width: int, seed: int, device: torch.device) -> torch.Tensor:
    """The state of torch's generator (the CPU's, and `device`'s on a GPU) where a plain loop's
    forward starts drawing (dropout): seeded with `seed`, then the module built."""
    with torch.random.fork_rng(devices=cuda_devices(device)):
        torch.manual_seed(seed)
        make(width)
        return rng_state(device)


_CONTEXTS: set = set()  # the configs whose context was checked in this process (`check_context`)


def check_context(make, width: int, layers, input_shape: tuple[int, ...], output_dim: int, explain, key) -> None:
    """A context longer than a token model's own (a position table of fewer rows than data.seq_len)
    fails only in a forward with real indices, which the meta device (the checks before training)
    does not make: where a table is shorter than the context, one sequence is run through the
    module on the CPU, once a process per config, so that the sweep refuses it (exit 2) before any
    job, not each job at its first step. Any other failure is left to the job to say."""
    T = input_shape[0] if len(input_shape) == 1 else None
    short = [layer for layer in layers if layer.kind == "embedding" and T and layer.fan_in < T
             and layer.fan_in != output_dim]
    if not short or (key, input_shape, output_dim) in _CONTEXTS:
        return
    with torch.device("cpu"):
        net = seeded(lambda: make(width), 0)
        try:
            with torch.no_grad():
                net(torch.zeros((1, T), dtype=torch.long))
        except Exception as e:
            line = explain(e, T)
            if line is not None:
                raise ConfigError(line) from None
    _CONTEXTS.add((key, input_shape, output_dim))


def on_meta(make, width: int):
    """make(width) on the meta device (no memory); a module that cannot be built there (one that reads a
    value as it is built: torch's orthogonal parametrization) is built on the CPU, under seed 0, and
    moved there."""
    try:
        with torch.device("meta"):
            return make(width)
    except ConfigError:
        with torch.device("cpu"):
            return seeded(lambda: make(width), 0).to("meta")


def branches(layers, pattern: str, param, target: str) -> None:
    """Find the residual branches' last layers (`roles.find_branch_outputs`): where a glob names none,
    or a depth rule has none to multiply, one line."""
    found = find_branch_outputs(layers, pattern)
    if found or not (pattern or param.scales_depth()):
        return
    names = ", ".join(layer.path for layer in layers if layer.kind == "linear")
    if pattern:
        raise ConfigError(f"model.branch_outputs={pattern}: no Linear of model.target={target} matches it; "
                          f"its Linears: {names[:300]}")
    raise ConfigError(f"param={param.name} multiplies residual branches, and model.target={target} has none of "
                      f"the known families' branch outputs ({', '.join(BRANCH_OUTPUTS)}): name each branch's last "
                      f"Linear with a glob, model.branch_outputs='*.proj' (its Linears: {names[:200]})")


_CHECKED: set = set()  # the configs whose own init was checked in this process (`OwnInit.check`)


def own_init(make, width: int, net, options: CustomOptions, given: dict) -> OwnInit | None:
    """The module's own init per seed, checked once a process per config before it is used; None
    where the module was built on the meta device (a check before any training: nothing is drawn)."""
    meta = any(p.is_meta for p in net.parameters())
    key = (repr(options), tuple(sorted(given.items())))
    if key not in _CHECKED:
        with torch.device("cpu"):
            OwnInit(make, width, seeded(lambda: make(width), 0) if meta else net, options.target).check()
        _CHECKED.add(key)
    return None if meta else OwnInit(make, width, net, options.target)


def at_base(own: OwnInit | None, make, layers, base_width: int) -> dict[str, float] | None:
    """`OwnInit.base_ratios`, with a width the module refuses said to be the base width; on the meta
    device (the check before training) only whether the module can be built there."""
    try:
        if own is None:
            on_meta(make, base_width)
            return None
        return own.base_ratios(layers, base_width)
    except ConfigError as e:
        raise ConfigError(f"param.base_width={base_width}: the model is built at its base width too, to measure "
                          f"its own init there, and it refuses it: {e}") from None


def attention_rule(param):
    """d_head -> the factor on the module's own attention scale that `param`'s rule asks for,
    relative to SP's 1/sqrt(d_head) (muP: 1/sqrt(m), making it 1/d); None under SP's rule."""
    if isinstance(param.attention_scale(64), torch.Tensor):
        raise ConfigError("param.attn_mult per run: a published model's attention takes one scale per job (its own "
                          "modules compute it); sweep it as a job's key (param.attn_mult=0.5,1,2), or use model=transformer")
    if not param.rescales_attention():
        return None
    return lambda d: param.attention_scale(d) * math.sqrt(d)


# The names transformers' attention modules give the head size their `scaling` is computed from
# (5.24: `head_dim` in most; `attention_head_size` in BERT and its kin, `head_size` in GPT-NeoX,
# `attention_head_dim` in DAB-DETR; `qk_head_dim`, the query-key size, in DeepSeek's latent attention
# and its kin, first: it is what their scaling reads).
HEAD_SIZE_KEYS = ("qk_head_dim", "head_dim", "attention_head_size", "head_size", "attention_head_dim")


def scale_attention(net, scale) -> list[str]:
    """Apply `scale` through the hook transformers' attention modules expose: a float `scaling`
    (their q.k factor, which every attention implementation of theirs reads) beside an int head
    size (`HEAD_SIZE_KEYS`). Returns the modules so scaled."""
    if scale is None:
        return []
    done = []
    for path, m in net.named_modules():
        scaling = getattr(m, "scaling", None)
        sizes = [getattr(m, k, None) for k in HEAD_SIZE_KEYS]
        d = next((v for v in sizes if isinstance(v, int) and not isinstance(v, bool)), None)
        if isinstance(scaling, float) and d is not None:
            m.scaling = scaling * scale(d)
            done.append(f"{path} ({type(m).__name__})")
    return done

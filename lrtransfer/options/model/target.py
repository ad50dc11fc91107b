"""Calling a user's model as it is published: a factory, a class taking a config object, or a class
taking keyword arguments, with the job's width, depth, vocabulary and context put where it reads them.

A published model names its width its own way (`n_embd` in nanoGPT and GPT-2,
`hidden_size` in Llama, channel lists in timm): `model.width_key` (and `depth_key`)
say which field, so no adapter file is written. The field goes into the config
object (`model.config`: a dataclass or a `transformers` config class, built with
`model.config_kwargs`) or, without one, straight into the target's keyword
arguments. Token models get their vocabulary and context length from the data,
under the names their configs use (`VOCAB_KEYS`, `CONTEXT_KEYS`), because a model
that has fewer embeddings than the data has tokens cannot run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torch import nn

from lrtransfer.errors import ConfigError, one_line

ARGUMENTS = ("width", "depth", "input_shape", "output_dim")  # what a factory may ask for by name
# The names published configs give the vocabulary and the context length (nanoGPT, GPT-2, Llama, ...),
# and the head count that the width must stay divisible by.
VOCAB_KEYS = ("vocab_size",)
CONTEXT_KEYS = ("block_size", "n_positions", "max_position_embeddings", "n_ctx")
HEAD_KEYS = ("n_head", "num_attention_heads", "num_heads", "n_heads")
SPECIAL_TOKENS = ("bos_token_id", "eos_token_id", "pad_token_id")  # ids a transformers config checks against its vocabulary


# ---------------------------------------------------------------- importing
def split(target: str) -> tuple[str, str]:
    where, _, name = target.rpartition(":")
    return where, name


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where


def source_hash(target: str) -> str:
    """sha1 of the target's source file ('' when it cannot be found: building then says why).

    For a file path the file is read, never run; for a module, its spec is looked up
    (which imports its parent packages, as running it would)."""
    where, _ = split(target)
    if not where:
        return ""
    try:
        if _is_file(where):
            path = Path(where)
        else:
            spec = importlib.util.find_spec(where)
            path = Path(spec.origin) if spec is not None and spec.origin else None
        return hashlib.sha1(path.read_bytes()).hexdigest()[:16] if path is not None else ""
    except Exception:
        return ""


def load(target: str, key: str = "model.target") -> Callable:
    """The callable `target` names (`path/file.py:NAME` or `package.module:NAME`), or a one-line
    ConfigError saying why not; `key` is the config key it came from."""
    where, name = split(target)
    try:
        if _is_file(where):
            path = Path(where)
            if not path.is_file():
                raise ConfigError(f"{key}={target}: no file {where} (relative to {Path.cwd()})")
            module_key = f"lrtransfer_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}_{path.stem}"
            module = sys.modules.get(module_key)
            if module is None:  # once per process: a config class must stay the class the target checks against
                spec = importlib.util.spec_from_file_location(module_key, path)
                module = importlib.util.module_from_spec(spec)
                sys.modules[module_key] = module  # dataclasses and pickling look the module up by name
                try:
                    spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[module_key]
                    raise
        else:
            module = importlib.import_module(where)
    except ConfigError:
        raise
    except BaseException as e:  # a SyntaxError, an ImportError, anything the file raises, even SystemExit
        raise ConfigError(f"{key}={target} does not import: {one_line(e)}") from None
    if not hasattr(module, name):
        known = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(f"{key}={target}: {where} defines no {name!r}; callables there: "
                          f"{', '.join(known[:12]) or 'none'}")
    fn = getattr(module, name)
    if not callable(fn):
        raise ConfigError(f"{key}={target}: {name} is a {type(fn).__name__}, not a class or function")
    return fn


# ---------------------------------------------------------------- the width's names
def scaled_keys(width_key: Any, width: int) -> dict[str, Any]:
    """{field: value} for the width: `n_embd` -> {n_embd: width}; a mapping gives each field its
    multiple of the width, a number or a list of numbers (timm's `channels: [1, 2, 4, 8]`)."""
    if not width_key:
        return {}
    keys = {width_key: 1} if isinstance(width_key, str) else dict(width_key)
    out = {}
    for key, mult in keys.items():
        out[key] = tuple(_times(m, width, key) for m in mult) if isinstance(mult, (list, tuple)) else _times(mult, width, key)
    return out


def _times(mult, width: int, key: str) -> int:
    value = mult * width
    if not isinstance(mult, (int, float)) or isinstance(mult, bool) or value != int(value) or value < 1:
        raise ConfigError(f"model.width_key: {key}={mult!r} x width {width} is not a positive whole number")
    return int(value)


def check_keys(width_key: Any, depth_key: str) -> None:
    if not isinstance(width_key, (str, dict, type(None))):
        raise ConfigError(f"model.width_key must be a field name (n_embd) or a mapping of fields to multiples "
                          f"of the width ('{{hidden_size: 1, intermediate_size: 4}}'), got {width_key!r}")
    for key in ([width_key] if isinstance(width_key, str) else list(width_key or {})) + [depth_key]:
        if key and not str(key).isidentifier():
            raise ConfigError(f"model.width_key/depth_key: {key!r} is not a field name")


def check_heads(values: dict[str, Any], width: int) -> None:
    """The width each head splits must divide by the head count: said before any training."""
    for key in HEAD_KEYS:
        heads = values.get(key)
        if isinstance(heads, int) and heads > 0:
            for field, value in values.items():
                if isinstance(value, int) and value == width and width % heads:
                    raise ConfigError(f"width={width} ({field}) is not divisible by {key}={heads}: each head "
                                      f"takes width/{key} of it; choose widths that are multiples of {heads}")
            return


# ---------------------------------------------------------------- calling it
def _fields(cls: Callable) -> set[str] | None:
    """The fields a config class takes, or None where it takes any (a transformers config)."""
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def _defaults(cls: Callable) -> Any:
    try:
        return cls()
    except Exception:
        return None


def data_keys(cls: Callable, given: dict[str, Any], vocab: int, context: int, key: str) -> dict[str, Any]:
    """{vocab field: the data's vocabulary, context field: its context length} for the names this
    config knows; a value the user gave is kept where it is large enough, else one line."""
    fields = _fields(cls)
    default = _defaults(cls) if fields is None else None
    out = {}
    for names, need, what in ((VOCAB_KEYS, vocab, "vocabulary"), (CONTEXT_KEYS, context, "context length")):
        for name in names if need is not None else ():
            known = name in fields if fields is not None else hasattr(default, name)
            if not known and name not in given:
                continue
            if name in given:
                if not isinstance(given[name], int) or given[name] < need:
                    raise ConfigError(f"{key} {name}={given[name]!r} is smaller than the data's {what} ({need}); "
                                      f"leave it out and lrtransfer sets it to {need}")
            else:
                out[name] = need
            break
    return out


def make_config(options, *, width: int, depth: int, vocab: int, context: int | None) -> Any:
    """The config object `model.config` names, built with `config_kwargs`, the width and depth
    fields, and the data's vocabulary and context length under the names the config knows
    (a token model's: a config with no such field gets neither)."""
    cls = load(options.config, "model.config")
    given = dict(options.config_kwargs or {})
    values = {**given, **scaled_keys(options.width_key, width)}
    if options.depth_key:
        values[options.depth_key] = depth
    values.update(data_keys(cls, given, vocab, context, "model.config_kwargs"))
    check_heads(values, width)
    fields = _fields(cls)
    unknown = sorted(set(values) - fields) if fields is not None else []
    if unknown:
        raise ConfigError(f"model.config={options.config} has no field {unknown[0]}; "
                          f"its fields: {', '.join(sorted(fields))}")
    default = _defaults(cls)
    if hasattr(default, "use_cache") and "use_cache" not in given:
        values["use_cache"] = False  # no key/value cache: training reads every position once
    if "vocab_size" in values and "vocab_size" not in given:
        # the data's vocabulary replaced the config's: a special token's id past it names no token
        for key in SPECIAL_TOKENS:
            if key not in given and isinstance(getattr(default, key, None), int) and getattr(default, key) >= values["vocab_size"]:
                values[key] = None
    try:
        return cls(**values)
    except Exception as e:
        raise ConfigError(f"model.config={options.config} raised when built with {values}: {one_line(e)}") from None


def construct(fn: Callable, options, **given) -> nn.Module:
    """The user's module: `fn(config)` when `model.config` is set, else `fn` called with the
    arguments of `given` its signature names (the width under `model.width_key`'s names), plus
    model.kwargs."""
    width, depth = given["width"], given["depth"]
    shown = f"width={width} depth={depth}"
    if options.config:
        shape = given["input_shape"]
        config = make_config(options, width=width, depth=depth, vocab=given["output_dim"],
                             context=shape[0] if len(shape) == 1 else None)
        args, kwargs = (config,), dict(options.kwargs or {})
    else:
        named = dict(given)
        if options.width_key:
            named.pop("width")
            named.update(scaled_keys(options.width_key, width))
        if options.depth_key:
            named[options.depth_key] = named.pop("depth")
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        check_heads({**named, **dict(options.kwargs or {})}, width)
        args = ()
        kwargs = {k: v for k, v in named.items() if takes_all or k in params or k not in ARGUMENTS}
        kwargs.update(options.kwargs or {})
    try:
        with contextlib.redirect_stdout(sys.stderr):  # what it prints (nanoGPT's parameter count) is no output of ours
            module = fn(*args, **kwargs)
    except ConfigError:
        raise
    except Exception as e:
        raise ConfigError(f"model.target={options.target} raised when built ({shown}): {one_line(e)}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.target={options.target} returned a {type(module).__name__}, not a torch nn.Module")
    return module

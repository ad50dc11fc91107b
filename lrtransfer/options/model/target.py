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
import io
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from torch import nn

from lrtransfer.errors import ConfigError, log, one_line

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
                    with _beside(path):
                        spec.loader.exec_module(module)
                except BaseException:
                    del sys.modules[module_key]
                    raise
        else:
            module = _import_from_here(where)
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


@contextlib.contextmanager
def _beside(path: Path) -> Iterator[None]:
    """The file's folder first on the module path while it is imported, as Python puts a script's
    folder there (`python nets.py`), so that it imports a module beside it (`import helper`); taken
    off again after, leaving whatever the file itself added. (Its id follows those files:
    `sources.imported_files` looks beside the importing file first.)"""
    folder = str(path.resolve().parent)
    sys.path.insert(0, folder)
    try:
        yield
    finally:
        with contextlib.suppress(ValueError):
            sys.path.remove(folder)


def _import_from_here(name: str):
    search_here()
    return importlib.import_module(name)


def search_here() -> None:
    """Find a `package.module` target as `python -m` does: installed, or in the folder the sweep
    runs from (searched last, so that it shadows nothing installed). The `lrtransfer` command,
    unlike `python`, does not put that folder on the path itself."""
    here = str(Path.cwd())
    if here not in sys.path and "" not in sys.path:
        sys.path.append(here)


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


def width_fields(width_key: Any) -> list[str]:
    """The fields `model.width_key` puts the width into."""
    return [width_key] if isinstance(width_key, str) and width_key else list(width_key or {})


def check_keys(width_key: Any, depth_key: str, *others: str, given: dict[str, dict | None] | None = None) -> None:
    """model.width_key and the keys naming one field each (depth_key, and `others`: vocab_key,
    context_key) name fields; the width's and the depth's are different ones, which none of the
    mappings in `given` ({config key: its mapping}, e.g. model.config_kwargs) sets too: a value set
    twice would be replaced without a word."""
    valid = "a field name (n_embd) or a mapping of fields to multiples of the width ('{hidden_size: 1, intermediate_size: 4}')"
    if not isinstance(width_key, (str, dict, type(None))):
        raise ConfigError(f"model.width_key must be {valid}, got {width_key!r}")
    if isinstance(width_key, dict) and not width_key:
        raise ConfigError(f"model.width_key={{}} names no field; give {valid}, or leave it out ('') for a target "
                          "that takes `width` by that name")
    for key in width_fields(width_key) + [depth_key, *others]:
        if key and not str(key).isidentifier():
            raise ConfigError(f"model.width_key/depth_key/vocab_key/context_key: {key!r} is not a field name")
    if depth_key and depth_key in width_fields(width_key):
        raise ConfigError(f"model.depth_key={depth_key} is also a field of model.width_key: the width and the depth "
                          "cannot both go into it")
    filled = {**{f: "model.width_key" for f in width_fields(width_key)}, **({depth_key: "model.depth_key"} if depth_key else {})}
    for key, mapping in (given or {}).items():
        twice = sorted(set(mapping or {}) & set(filled))
        if twice:
            raise ConfigError(f"{key} sets {twice[0]}, which {filled[twice[0]]} fills with the "
                              f"{'width' if filled[twice[0]] == 'model.width_key' else 'depth'}; drop it from {key}")


def check_shapes(scaled: dict[str, Any], fn: Callable, where: str) -> None:
    """A width field given a list of multiples where `fn` (a config class or a factory) takes one
    number there, or one number where it takes a list (a channel list), as its default or its
    annotation says: said here, not as the error it becomes inside the model."""
    kinds = field_kinds(fn)
    for field, value in scaled.items():
        if isinstance(value, tuple) and kinds.get(field) == "number":
            raise ConfigError(f"model.width_key: {field} gets a list of widths {list(value)}, but {where} takes one "
                              f"number as {field}; give it one multiple ({field}: 1)")
        if not isinstance(value, tuple) and kinds.get(field) == "list":
            raise ConfigError(f"model.width_key: {field} gets one width ({value}), but {where} takes a list as "
                              f"{field}; give it a list of multiples ({field}: [1, 2, ...])")


def field_kinds(fn: Callable) -> dict[str, str]:
    """"number" or "list" for each field of a config class (or argument of a factory) whose default
    or annotation says which."""
    if dataclasses.is_dataclass(fn):
        pairs = {f.name: (f.default, f.type) for f in dataclasses.fields(fn)}
    else:
        try:
            pairs = {k: (p.default, p.annotation) for k, p in inspect.signature(fn).parameters.items()}
        except (TypeError, ValueError):
            return {}
    out = {}
    for name, (default, note) in pairs.items():
        note = note if isinstance(note, str) else getattr(note, "__name__", "")
        if isinstance(default, (list, tuple)) or note.lower().startswith(("list", "tuple", "sequence")):
            out[name] = "list"
        elif (isinstance(default, (int, float)) and not isinstance(default, bool)) or note in ("int", "float"):
            out[name] = "number"
    return out


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
    except KeyboardInterrupt:
        raise
    except BaseException:  # SystemExit too: the config is then built with the values given, and says why not
        return None


def data_keys(cls: Callable, given: dict[str, Any], vocab: int, context: int, key: str,
              vocab_key: str = "", context_key: str = "") -> dict[str, Any]:
    """{vocab field: the data's vocabulary, context field: its context length} for the names this
    config knows (or `model.vocab_key` and `model.context_key` name); a value the user gave is kept
    where it is large enough, else one line."""
    fields = _fields(cls)
    default = _defaults(cls) if fields is None else None
    out = {}
    for names, need, what in (((vocab_key,) if vocab_key else VOCAB_KEYS, vocab, "vocabulary"),
                              ((context_key,) if context_key else CONTEXT_KEYS, context, "context length")):
        for name in names if need is not None else ():
            known = name in fields if fields is not None else hasattr(default, name)
            if not known and name not in given and name not in (vocab_key, context_key):
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
    values.update(data_keys(cls, given, vocab, context, "model.config_kwargs", options.vocab_key, options.context_key))
    check_heads(values, width)
    fields = _fields(cls)
    unknown = sorted(set(values) - fields) if fields is not None else []
    if unknown:
        raise ConfigError(f"model.config={options.config} has no field {unknown[0]}; "
                          f"its fields: {', '.join(sorted(fields))}")
    default = _defaults(cls)
    check_shapes(scaled_keys(options.width_key, width), cls, f"model.config={options.config}")
    if hasattr(default, "use_cache") and "use_cache" not in given:
        values["use_cache"] = False  # no key/value cache: training reads every position once
    if "vocab_size" in values and "vocab_size" not in given:
        # the data's vocabulary replaced the config's: a special token's id past it names no token
        for key in SPECIAL_TOKENS:
            if key not in given and isinstance(getattr(default, key, None), int) and getattr(default, key) >= values["vocab_size"]:
                values[key] = None
    try:
        config = cls(**values)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # SystemExit too
        raise ConfigError(f"model.config={options.config} raised when built with {values}: {one_line(e)}") from None
    if config is None:
        raise ConfigError(f"model.config={options.config} returned None, not a config object; name the config class "
                          "(a dataclass, a transformers config) or a function that returns one")
    return config


@contextlib.contextmanager
def _prints_to_log(target: str) -> Iterator[None]:
    """What the model prints while it is built (nanoGPT's "number of parameters") goes to the job's
    log, not the console: a sweep builds it many times, and `--json` output must stay JSON."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield
    finally:
        for line in out.getvalue().splitlines():
            if line.strip():
                log.info("model.target=%s printed: %s", target, line)


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
        if options.vocab_key or options.context_key:  # the data's sizes, under the names the factory takes them by
            shape = given["input_shape"]
            named.update(data_keys(fn, dict(options.kwargs or {}), given["output_dim"] if options.vocab_key else None,
                                   shape[0] if options.context_key and len(shape) == 1 else None, "model.kwargs",
                                   options.vocab_key, options.context_key))
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
        check_heads({**named, **dict(options.kwargs or {})}, width)
        check_shapes(scaled_keys(options.width_key, width), fn, f"model.target={options.target}")
        args = ()
        kwargs = {k: v for k, v in named.items() if takes_all or k in params or k not in ARGUMENTS}
        kwargs.update(options.kwargs or {})
    try:
        with _prints_to_log(options.target):
            module = fn(*args, **kwargs)
    except (ConfigError, KeyboardInterrupt):
        raise
    except BaseException as e:  # SystemExit too: it would end the sweep without a word
        raise ConfigError(f"model.target={options.target} raised when built ({shown}): {one_line(e)}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.target={options.target} returned a {type(module).__name__}, not a torch nn.Module")
    return module


# ---------------------------------------------------------------- sizes the data needs, in one line
def int_fields(net: nn.Module, fn: Callable, options) -> dict[str, int]:
    """The model's whole-number settings by name, to name the one a message means: its config
    object's fields (`net.config`, where nanoGPT and transformers keep it), else the target's
    keyword defaults; less the width's and depth's, which lrtransfer sets."""
    config = getattr(net, "config", None)
    if config is not None and hasattr(config, "__dict__"):
        items = list(vars(config).items())
    else:
        try:
            items = [(n, p.default) for n, p in inspect.signature(fn).parameters.items()]
        except (TypeError, ValueError):
            items = []
    ours = {*scaled_keys(options.width_key, 1), options.depth_key}
    return {k: v for k, v in items if isinstance(v, int) and not isinstance(v, bool) and not k.startswith("_")
            and k not in ours}


def _fields_of(fields: dict[str, int], sizes) -> str:
    found = [f"{k}={v}" for k, v in fields.items() if v in sizes]
    return f"its config's {', '.join(found)}" if found else "no field of its config has that value"


def check_vocabulary(target: str, layers: list, output_dim: int, fields: dict[str, int]) -> None:
    """A token model (it has an embedding table) whose logits are fewer than the data's tokens
    cannot run: one line naming both sizes and `model.vocab_key`, not "no readout found"."""
    from lrtransfer.nn import OUTPUT

    tables = [layer for layer in layers if layer.kind == "embedding"]
    made = [(layer.fan_out, layer.names["weight"]) for layer in layers if layer.role == OUTPUT and "weight" in layer.names]
    made += [(layer.fan_in, layer.tied) for layer in tables if layer.tied]
    if not tables or not made or max(made)[0] >= output_dim:
        return
    n, name = max(made)
    raise ConfigError(f"model.target={target} makes {n} logits ({name}), fewer than the data's {output_dim} tokens: "
                      f"name the field that sets its vocabulary with model.vocab_key ({_fields_of(fields, {n})}), "
                      f"and lrtransfer sets it to {output_dim}")


# What names a context length: a field (block_size, n_ctx, max_position_embeddings, a `ctx` or `seq_len`
# of a model's own) or a position table (wpe, position_embeddings, pos_emb). Other sizes below the data's
# length (BERT's type_vocab_size, a head count) are not a context, whatever their value.
CONTEXT_WORDS = ("ctx", "context", "position", "block_size", "seq_len", "seq_length", "max_len")
POSITION_WORDS = ("pos", "wpe")


def names_context(name: str, words=CONTEXT_WORDS) -> bool:
    return name in CONTEXT_KEYS or any(w in name.lower() for w in words)


def context_failure(target: str, layers: list, output_dim: int, fields: dict[str, int]) -> Callable:
    """(error, context length) -> one line when a token model failed on the data's context because
    its own is shorter (a field that names a context, or a position table, below the data's length),
    else None: the error is then said as it is."""
    tables = {layer.fan_in: layer.path for layer in layers if layer.kind == "embedding"
              and names_context(layer.path.rpartition(".")[2], CONTEXT_WORDS + POSITION_WORDS)}

    def explain(e: Exception, length: int) -> str | None:
        short = {k: v for k, v in fields.items() if v < length and names_context(k)}
        rows = sorted(r for r in tables if r < length)
        if not short and not rows:
            return None
        sizes = sorted(set(short.values()) | set(rows))
        named = {k: v for k, v in fields.items() if names_context(k)}
        where = [_fields_of(named, sizes)] + [f"{tables[r]} has {r} rows" for r in rows]
        return (f"model.target={target} fails on the data's context of {length} tokens (data.seq_len; {one_line(e)}): "
                f"its own is {' or '.join(map(str, sizes))} ({'; '.join(where)}): name the field that sets its context "
                f"with model.context_key, and lrtransfer sets it to {length}, or lower data.seq_len")

    return explain


"""Your own model: any PyTorch `nn.Module`, width-swept, parameterized and batched.

`model.target` names a class or function (`path/file.py:NAME` or `package.module:NAME`)
that returns an `nn.Module` mapping a batch (B, *input_shape) to logits (B, output_dim)
(token ids (B, T) to (B, T, output_dim)). It is called with those of `width`, `depth`,
`input_shape` and `output_dim` that its signature names, plus `model.kwargs`.

The user's module becomes the same atoms the built-in models are made of, so every
parameterization and optimizer that needs no module tree applies unchanged: its roles
are read off its shapes at two widths (`nn/roles.py`: input, hidden, output; the
readout is the output weight that makes the logits, or `model.readout`), and it runs
for K runs at once by `torch.func.functional_call` under vmap (`nn/wrapped.py`). A
tensor outside any known layer keeps the init its module gave it.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from omegaconf import OmegaConf
from torch import nn

from lrtransfer.errors import ConfigError, one_line
from lrtransfer.nn import FIXED, OUTPUT
from lrtransfer.nn.roles import assign_roles, find_readout, layers_of
from lrtransfer.nn.wrapped import Custom
from lrtransfer.options.schema import IMAGE, SIGNAL, TOKENS, VECTOR

ARGUMENTS = ("width", "depth", "input_shape", "output_dim")  # what the target may ask for by name


@dataclass
class CustomOptions:
    MIN_DEPTH: ClassVar[int] = 1
    READS: ClassVar[tuple[str, ...]] = (VECTOR, IMAGE, SIGNAL, TOKENS)  # the module's own business
    MODULE_TREE: ClassVar[bool] = False  # atoms only: no compound rules (param=modular needs them)

    name: str = "custom"
    target: str = ""  # path/to/file.py:NAME or package.module:NAME
    # A mapping passed to the target as keyword arguments. None and typed Any, so that the
    # override model.kwargs='{dropout: 0.1}' replaces it: Hydra merges into a {} (or a typed
    # None dict) in struct mode and refuses its new keys.
    kwargs: Any = None
    readout: str = ""  # the output weight's parameter name, when the inferred one is wrong
    # The target file's content hash (the conf file fills it in: `${lrt_source:...}`), so
    # that a job's identity changes when the model's code does.
    source: str = ""

    def check(self) -> None:
        module, sep, name = self.target.rpartition(":")
        if not (sep and module and name.isidentifier()):
            raise ConfigError(f"model.target={self.target!r} must be path/to/file.py:NAME or package.module:NAME")
        if not isinstance(self.kwargs, (dict, type(None))):
            raise ConfigError(f"model.kwargs must be a mapping such as '{{dropout: 0.1}}', got {self.kwargs!r}")
        overlap = sorted(set(self.kwargs or {}) & set(ARGUMENTS))
        if overlap:
            raise ConfigError(f"model.kwargs sets {overlap[0]}, which lrtransfer passes itself; "
                              f"set it with the config key instead ({', '.join(ARGUMENTS)})")

    def check_with(self, cfg) -> None:
        exponent = getattr(cfg.param, "depth_exponent", 0.0)
        if exponent:
            raise ConfigError(f"param.depth_exponent={exponent:g} multiplies the residual branches a built-in model "
                              "makes; model=custom's branches are inside your module: multiply them there, "
                              "and leave param.depth_exponent=0")


OPTIONS = CustomOptions


# ---------------------------------------------------------------- the target
def _split(target: str) -> tuple[str, str]:
    where, _, name = target.rpartition(":")
    return where, name


def _is_file(where: str) -> bool:
    return where.endswith(".py") or "/" in where


def source_hash(target: str) -> str:
    """sha1 of the target's source file ('' when it cannot be found: building then says why).

    For a file path the file is read, never run; for a module, its spec is looked up
    (which imports its parent packages, as running it would)."""
    where, _ = _split(target)
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


if not OmegaConf.has_resolver("lrt_source"):
    OmegaConf.register_new_resolver("lrt_source", source_hash, use_cache=False)


def load_target(target: str) -> Callable:
    """The callable `target` names, or a one-line ConfigError saying why not."""
    where, name = _split(target)
    try:
        if _is_file(where):
            path = Path(where)
            if not path.is_file():
                raise ConfigError(f"model.target={target}: no file {where} (relative to {Path.cwd()})")
            key = f"lrtransfer_user_{hashlib.sha1(str(path.resolve()).encode()).hexdigest()[:12]}_{path.stem}"
            spec = importlib.util.spec_from_file_location(key, path)
            module = importlib.util.module_from_spec(spec)
            sys.modules[key] = module  # dataclasses and pickling look the module up by name
            spec.loader.exec_module(module)
        else:
            module = importlib.import_module(where)
    except ConfigError:
        raise
    except BaseException as e:  # a SyntaxError, an ImportError, anything the file raises, even SystemExit
        raise ConfigError(f"model.target={target} does not import: {one_line(e)}") from None
    if not hasattr(module, name):
        known = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(f"model.target={target}: {where} defines no {name!r}; callables there: "
                          f"{', '.join(known[:12]) or 'none'}")
    fn = getattr(module, name)
    if not callable(fn):
        raise ConfigError(f"model.target={target}: {name} is a {type(fn).__name__}, not a class or function")
    return fn



def construct(fn: Callable, options: CustomOptions, **given) -> nn.Module:
    """fn called with the arguments of `given` its signature names, plus model.kwargs."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        params = {}
    takes_all = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    args = {k: v for k, v in given.items() if takes_all or k in params}
    shown = " ".join(f"{k}={v}" for k, v in given.items() if k in ("width", "depth"))
    try:
        module = fn(**args, **dict(options.kwargs or {}))
    except Exception as e:
        raise ConfigError(f"model.target={options.target} raised when built ({shown}): {one_line(e)}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.target={options.target} returned a {type(module).__name__}, not a torch nn.Module")
    return module


def build(options: CustomOptions, param, *, width: int, depth: int, runs: int, input_shape: tuple[int, ...],
          output_dim: int) -> Custom:
    target = options.target
    fn = load_target(target)
    given = dict(width=width, depth=depth, input_shape=tuple(input_shape), output_dim=output_dim)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)  # a tensor outside any layer starts where the module put it, the same every time
        net = construct(fn, options, **given)
    with torch.device("meta"):
        other = construct(fn, options, **{**given, "width": 2 * width})
    layers = layers_of(net)
    shapes = {n: p.shape for n, p in net.named_parameters()}
    assign_roles(layers, shapes, {n: p.shape for n, p in other.named_parameters()}, target)
    if all(layer.role == FIXED for layer in layers):
        raise ConfigError(f"model.target={target}: no parameter grows with width "
                          f"({', '.join(list(shapes)[:4]) or 'it has none'} keep their shapes at width={2 * width})")
    readout = find_readout(layers, output_dim, options.readout, target)
    if options.readout:
        readout.role = OUTPUT  # the user's word: this weight makes the logits
    return Custom(net, layers, readout, runs=runs, target=target, input_shape=tuple(input_shape),
                  output_dim=output_dim)

"""Your own model: any PyTorch `nn.Module`, width-swept, parameterized and batched.

`model.target` names a class or function (`path/file.py:NAME` or `package.module:NAME`)
that returns an `nn.Module` mapping a batch (B, *input_shape) to logits (B, output_dim)
(token ids (B, T) to (B, T, output_dim)). It is called with those of `width`, `depth`,
`input_shape` and `output_dim` that its signature names, plus `model.kwargs`.

The user's module becomes the same atoms the built-in models are made of, so every
parameterization and optimizer that needs no module tree applies unchanged:
- Roles from shapes, as `mup.set_base_shapes` finds them: the module is built at the
  job's width and at twice it on the meta device, and the dimensions whose sizes differ
  are the ones that grow. Each layer that holds parameters becomes one `UserAtom`:
  a Linear or convolution (torch layout (out, in, *k): fan_in = in * prod(k), fan_out =
  out) is `input` (only out grows), `hidden` (both), `output` (only in) or `fixed`
  (neither); a normalisation layer's weight and bias are a gain (`hidden` when it spans
  the width), an Embedding a lookup table; any other parameter is a `tensor` of its own
  (`hidden`, `vector` or `fixed` by how many of its dimensions grow) that keeps the init
  its module gave it. The readout is the output weight that makes the logits (the one
  whose fan_out is output_dim, or `model.readout`); its atom is tagged "readout".
- Forward: the user's module with its parameters removed, run by
  `torch.func.functional_call` on the atoms' tensors (each with a leading run axis K)
  under `vmap` over K. A forward multiplier is folded into the tensor handed over
  (weight_mult * W, bias_mult * b: exact for Linear, convolution and Embedding layers),
  so no user code changes. Buffers are stacked along K too; a module vmap cannot run
  falls back to a loop over the runs, said in one line.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import inspect
import math
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

import torch
from omegaconf import OmegaConf
from torch import Tensor, nn

from lrtransfer.model.layers import FIXED, HIDDEN, INPUT, OUTPUT, VECTOR, Atom, Module, scaled
from lrtransfer.schema import IMAGE, SIGNAL, TOKENS, VECTOR as VECTOR_INPUTS
from lrtransfer.schema import ConfigError


ARGUMENTS = ("width", "depth", "input_shape", "output_dim")  # what the target may ask for by name


@dataclass
class CustomOptions:
    MIN_DEPTH: ClassVar[int] = 1
    READS: ClassVar[tuple[str, ...]] = (VECTOR_INPUTS, IMAGE, SIGNAL, TOKENS)  # the module's own business
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
        raise ConfigError(f"model.target={target} does not import: {_one_line(e)}") from None
    if not hasattr(module, name):
        known = sorted(n for n, v in vars(module).items() if callable(v) and not n.startswith("_"))
        raise ConfigError(f"model.target={target}: {where} defines no {name!r}; callables there: "
                          f"{', '.join(known[:12]) or 'none'}")
    fn = getattr(module, name)
    if not callable(fn):
        raise ConfigError(f"model.target={target}: {name} is a {type(fn).__name__}, not a class or function")
    return fn


def _one_line(e: BaseException) -> str:
    text = " ".join(str(e).split())
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


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
        raise ConfigError(f"model.target={options.target} raised when built ({shown}): {_one_line(e)}") from None
    if not isinstance(module, nn.Module):
        raise ConfigError(f"model.target={options.target} returned a {type(module).__name__}, not a torch nn.Module")
    return module


# ---------------------------------------------------------------- roles from shapes
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


def _matrix_kind(module: nn.Module) -> str | None:
    if isinstance(module, nn.Linear):
        return "linear"
    if isinstance(module, nn.modules.conv._ConvNd) and not module.transposed:
        return "conv"
    if isinstance(module, (nn.Embedding, nn.EmbeddingBag)):
        return "embedding"
    return None


def layers_of(module: nn.Module) -> list[Layer]:
    """The user module's trained tensors grouped into layers, in registration (forward) order."""
    out, seen = [], set()
    for path, m in module.named_modules():
        # a tied tensor (an embedding that is also the readout) belongs to its first layer
        own = {n: p for n, p in m.named_parameters(recurse=False) if p is not None and id(p) not in seen}
        seen.update(map(id, own.values()))
        if not own:
            continue
        full = lambda n: f"{path}.{n}" if path else n  # noqa: E731
        kind = _matrix_kind(m)
        if kind is not None and "weight" in own and set(own) <= {"weight", "bias"} and own["weight"].dim() >= 2:
            out.append(Layer(path, kind, {n: full(n) for n in ("weight", "bias") if n in own}))
        elif isinstance(m, NORMS) and "weight" in own and set(own) <= {"weight", "bias"}:
            out.append(Layer(path, "gain", {a: full(n) for a, n in (("gain", "weight"), ("bias", "bias")) if n in own}))
        else:
            out.extend(Layer(path, "tensor", {"tensor": full(n)}) for n in own)
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
    weight (fan_in grows, fan_out fixed) whose fan_out is output_dim, else the last output
    weight (fixed layers follow it)."""
    if readout:
        name = readout if readout.endswith(("weight", "tensor")) or "." in readout else f"{readout}.weight"
        for layer in layers:
            if name in layer.names.values() or readout == layer.path:
                return layer
        weights = [n for layer in layers for k, n in layer.names.items() if k != "bias"]
        raise ConfigError(f"model.readout={readout}: model.target={target} has no such parameter; "
                          f"weights: {', '.join(weights[:12])}")
    outputs = [layer for layer in layers if layer.role == OUTPUT]
    found = [layer for layer in outputs if layer.fan_out == output_dim] or outputs  # else: a fixed layer follows
    if not found:
        raise ConfigError(f"model.target={target}: no readout found (no weight maps the width to the "
                          f"{output_dim} logits); name it with model.readout=NAME")
    return found[-1]


# ---------------------------------------------------------------- atoms and the adapter
class UserAtom(Atom):
    """One user layer's trained tensors, each (K, *its torch shape), with the layer's fan-in,
    fan-out and role, so every parameterization treats it as the built-in atom of its kind."""

    def __init__(self, layer: Layer, values: dict[str, Tensor], *, runs: int, tag: str | None = None) -> None:
        super().__init__(layer.fan_in, layer.fan_out, role=layer.role, runs=runs, tag=tag)
        self.kind, self.path, self.user_names = layer.kind, layer.path, dict(layer.names)
        self.TENSORS = tuple(layer.names)
        self._own = {}
        for name, value in values.items():  # value: one run's tensor, in the user's layout
            setattr(self, name, nn.Parameter(torch.empty(runs, *value.shape, dtype=value.dtype)))
            if layer.kind in ("gain", "tensor"):  # no parameterization draws these: the module's own init
                self._own[name] = value.detach().clone()

    def from_matrix(self, w: Tensor) -> Tensor:
        # (fan_in, fan_out) -> torch's (out, in, *k); an Embedding's (num, dim) is already that view
        return w if self.kind == "embedding" else w.t().reshape(self.weight.shape[1:])

    def torch_init(self, gen: torch.Generator) -> Tensor:
        if self.kind == "embedding":  # nn.Embedding's init: N(0, 1)
            return torch.randn(self.fan_in, self.fan_out, generator=gen)
        return super().torch_init(gen)

    @property
    def torch_fan_in(self) -> int:
        return self.fan_out if self.kind == "embedding" else self.fan_in

    def own_init(self, name: str) -> Tensor | None:
        own = self._own.get(name)
        return None if own is None else own.clone()

    def handed(self, name: str, t: Tensor) -> Tensor:
        """The tensor the user's layer computes with: the stored one times its forward multiplier."""
        if self.kind in ("linear", "conv", "embedding"):
            mult = self.weight_mult if name == "weight" else self.bias_mult if name == "bias" else 1.0
            return scaled(t, mult)  # t: (K, ...); mult a float or (K,), one per run (grid.<key>)
        return t

    def extra_repr(self) -> str:
        return f"{self.path or '(root)'}: {self.kind} {self.fan_in} -> {self.fan_out}, role={self.role}, runs={self.runs}"


def _key(name: str) -> str:
    return name.replace(".", "/") or "(root)"


class Custom(Module):
    """The user's module for K runs: its parameters live in `UserAtom`s (in `layers`), its
    buffers stacked along K (in `stacked`), and the module itself (in `net`) holds neither.

    x: (B, *input_shape) shared by every run, or (K, B, *input_shape) -> (K, B, ...logits).
    """

    def __init__(self, net: nn.Module, layers: list[Layer], readout: Layer, *, runs: int, target: str,
                 input_shape: tuple[int, ...], output_dim: int) -> None:
        super().__init__()
        self.runs, self.target, self.input_ndim, self.output_dim = runs, target, len(input_shape), output_dim
        params = dict(net.named_parameters(remove_duplicate=False))
        # every name a tensor goes by (a tied weight has several): functional_call sets them all
        self.aliases: dict[str, list[str]] = {}
        first: dict[int, str] = {}  # id of a tensor -> the first name it goes by
        for name, p in params.items():
            self.aliases.setdefault(first.setdefault(id(p), name), []).append(name)
        self.layers = nn.ModuleDict()
        for layer in layers:
            values = {a: params[n] for a, n in layer.names.items()}
            tag = "readout" if layer is readout else None
            self.layers[_key(layer.path) if layer.kind != "tensor" else _key(layer.names["tensor"])] = UserAtom(
                layer, values, runs=runs, tag=tag)
        self.stacked = nn.Module()
        self.buffer_names: dict[str, str] = {}
        for name, b in net.named_buffers(remove_duplicate=False):
            self.stacked.register_buffer(_key(name), b.detach().unsqueeze(0).repeat(runs, *[1] * b.dim()).clone())
            self.buffer_names[_key(name)] = name
        _strip(net)
        self.net = net
        self.batched = True  # vmap over the runs; False once vmap could not run the module
        self.attention = _attention_like(net)

    # ---- the forward
    def _tensors(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        params = {}
        for atom in self.layers.values():
            for name, t in atom.trained():
                handed = atom.handed(name, t)
                for alias in self.aliases[atom.user_names[name]]:
                    params[alias] = handed
        buffers = {self.buffer_names[k]: b for k, b in self.stacked.named_buffers()}
        return params, buffers

    def _call(self, params: dict, buffers: dict, x: Tensor) -> Tensor:
        return torch.func.functional_call(self.net, (params, buffers), (x,), tie_weights=False)

    def _loop(self, params: dict, buffers: dict, x: Tensor, shared: bool) -> Tensor:
        ys = [self._call({n: p[k] for n, p in params.items()}, {n: b[k] for n, b in buffers.items()},
                         x if shared else x[k]) for k in range(self.runs)]
        return ys[0].unsqueeze(0) if self.runs == 1 else torch.stack(ys)

    def _vmap(self, params: dict, buffers: dict, x: Tensor, shared: bool) -> Tensor:
        return torch.func.vmap(self._call, in_dims=(0, 0, None if shared else 0), randomness="different")(
            params, buffers, x)

    def forward(self, x: Tensor) -> Tensor:
        shared = x.dim() == self.input_ndim + 1
        params, buffers = self._tensors()
        if x.device.type == "meta":  # sizing (engine.footprint) or a check before any training
            return self._on_meta(params, buffers, x, shared)
        if self.runs == 1 or not self.batched:
            y = self._loop(params, buffers, x, shared)
        else:
            try:
                y = self._vmap(params, buffers, x, shared)
            except Exception as e:
                y = self._loop(params, buffers, x, shared)  # raises if the module cannot run at all
                self.batched = False
                from lrtransfer.progress import warn

                warn(f"model.target={self.target}: vmap cannot run it ({_one_line(e)[:160]}); "
                     f"its {self.runs} runs go one at a time")
        self._check(y, x, shared)
        return y

    def _expected(self, x: Tensor, shared: bool) -> tuple[int, ...]:
        example = x.shape[1:] if shared else x.shape[2:]
        tokens = not torch.is_floating_point(x)  # token ids: one prediction per position
        B = x.shape[0] if shared else x.shape[1]
        return (self.runs, B, *(example if tokens else ()), self.output_dim)

    def _check(self, y: Tensor, x: Tensor, shared: bool) -> None:
        want = self._expected(x, shared)
        if not isinstance(y, Tensor) or tuple(y.shape) != want:
            got = tuple(y.shape[1:]) if isinstance(y, Tensor) else type(y).__name__
            raise ConfigError(f"model.target={self.target} gives logits of shape {got} for a batch of shape "
                              f"{tuple(x.shape[-1 - self.input_ndim:])}; expected {want[1:]}")

    def _on_meta(self, params: dict, buffers: dict, x: Tensor, shared: bool) -> Tensor:
        """The forward on the meta device; a module whose control flow reads values (which meta
        tensors have none of) is shape-checked on zeros on the CPU instead, one run."""
        try:
            y = self._loop(params, buffers, x, shared) if self.runs == 1 else self._vmap(params, buffers, x, shared)
        except ConfigError:
            raise
        except Exception:
            cpu = lambda d: {n: torch.zeros(t.shape[1:], dtype=t.dtype) for n, t in d.items()}  # noqa: E731
            B, example = x.shape[-1 - self.input_ndim], x.shape[x.dim() - self.input_ndim:]
            xs = torch.zeros(max(B, 2), *example, dtype=x.dtype)  # 2: batch norm needs two examples
            try:
                y1 = self._call(cpu(params), cpu(buffers), xs)
            except Exception as e:
                raise ConfigError(f"model.target={self.target} fails on a batch of shape {tuple(xs.shape)}: "
                                  f"{_one_line(e)}") from None
            y = torch.empty(self.runs, B, *y1.shape[1:], device="meta") if isinstance(y1, Tensor) else y1
        self._check(y, x, shared)
        return y

    # ---- what inspect shows
    def user_names(self) -> dict[int, str]:
        """id(stored tensor) -> the user's name of the parameter it holds."""
        return {id(t): atom.user_names[name] for atom in self.layers.values() for name, t in atom.trained()}

    def notes(self, param) -> list[str]:
        """Warnings about what `param`'s rules cannot do to this module from outside: a rule for
        attention logits other than SP's 1/sqrt(d) (muP's 1/d) cannot reach inside the user's attention."""
        from lrtransfer.param.base import Parameterization

        d = 64
        own = (param.attention_scale(d), param.attention_qkv_mult())
        if not self.attention or own == (Parameterization.attention_scale(param, d), Parameterization.attention_qkv_mult(param)):
            return []
        rule = "muP's 1/d attention scale" if param.name == "mup" else f"param={param.name}'s attention rule"
        return [f"warning: {', '.join(self.attention[:3])} computes attention: {rule} cannot be applied from "
                "outside the module (it keeps its own scale)"]


def _strip(net: nn.Module) -> None:
    """Remove every parameter and buffer from the user's module: the atoms hold them now, and
    functional_call hands them back at each forward."""
    for m in net.modules():
        for store in (m._parameters, m._buffers):
            for name in [n for n, t in store.items() if t is not None]:  # a None (bias=False) stays None
                del store[name]


def _attention_like(net: nn.Module) -> list[str]:
    """The submodules that compute attention: nn.MultiheadAttention, or a class whose name says
    attention or whose forward calls scaled_dot_product_attention."""
    found = []
    for path, m in net.named_modules():
        cls = type(m)
        hit = isinstance(m, nn.MultiheadAttention) or "attention" in cls.__name__.lower()
        if not hit and cls.__module__ != "torch.nn.modules" and not cls.__module__.startswith("torch."):
            with contextlib.suppress(OSError, TypeError):
                hit = "scaled_dot_product_attention" in inspect.getsource(cls.forward)
        if hit:
            found.append(f"{path or '(root)'} ({cls.__name__})")
    return found


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

"""A user's `nn.Module` run as K runs at once: its parameters held by atoms, its forward by vmap.

Forward: the user's module with its parameters removed, run by
`torch.func.functional_call` on the atoms' tensors (each with a leading run axis K)
under `vmap` over K. A forward multiplier is folded into the tensor handed over
(weight_mult * W, bias_mult * b: exact for Linear, convolution and Embedding layers),
so no user code changes. Buffers are stacked along K too; a module vmap cannot run
falls back to a loop over the runs, said in one line.
"""

from __future__ import annotations

import contextlib
import inspect

import torch
from torch import Tensor, nn

from lrtransfer.errors import ConfigError, one_line, warn
from lrtransfer.nn.atoms import Atom, Module, scaled
from lrtransfer.nn.roles import Layer


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
        if x.device.type == "meta":  # sizing (training.memory.footprint) or a check before any training
            return self._on_meta(params, buffers, x, shared)
        if self.runs == 1 or not self.batched:
            y = self._loop(params, buffers, x, shared)
        else:
            try:
                y = self._vmap(params, buffers, x, shared)
            except Exception as e:
                y = self._loop(params, buffers, x, shared)  # raises if the module cannot run at all
                self.batched = False
                warn(f"model.target={self.target}: vmap cannot run it ({one_line(e)[:160]}); "
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
                                  f"{one_line(e)}") from None
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
        if not self.attention or not param.rescales_attention():
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

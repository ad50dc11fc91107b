"""A user's `nn.Module` run as K runs at once: its parameters held by atoms, its forward by vmap.

Forward: the user's module with its parameters removed, run by
`torch.func.functional_call` on the atoms' tensors (each with a leading run axis K, handed
over with its forward multiplier folded in: `user_atoms.py`) under `vmap` over K
(`batching.py`), each run's random draws from its own stream (`streams.py`). A tensor that goes
by several names (an embedding tied to the readout) is handed over once per name. Buffers are
stacked along K too, and so is a parameter the module froze (requires_grad=False): never
trained, under no parameterization's rule.

The logits are read from what the module returns (`logits_of`): a tensor, an output
object's or dict's `logits`, a tuple's first element, or what `model.output` names.
A forward that takes `targets` (nanoGPT's) returns every position's logits only when
given them: it is given zeros, and the loss it computes from them is ignored.
Attention that calls `scaled_dot_product_attention` with its default scale gets the
parameterization's scale (`AttentionScale`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import inspect
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from lrtransfer.errors import ConfigError, one_line, warn
from lrtransfer.nn.atoms import Module
from lrtransfer.nn.batching import Batching, PaddingRows, stopped_at
from lrtransfer.nn.causal import reads_ahead
from lrtransfer.nn.checks import Checks
from lrtransfer.nn.notes import Notes, listed
from lrtransfer.nn.roles import Layer
from lrtransfer.nn.streams import Streams, rng_state
from lrtransfer.nn.taps import Tapping
from lrtransfer.nn.user_atoms import UserAtom


def _key(name: str) -> str:
    return name.replace(".", "/") or "(root)"


class Custom(Batching, Streams, Tapping, Checks, Notes, Module):
    """The user's module for K runs: its parameters live in `UserAtom`s (in `layers`), its
    buffers stacked along K (in `stacked`), and the module itself (in `net`) holds neither.

    x: (B, *input_shape) shared by every run, or (K, B, *input_shape) -> (K, B, ...logits).
    """

    def __init__(self, net: nn.Module, layers: list[Layer], readout: Layer, *, runs: int, target: str,
                 input_shape: tuple[int, ...], output_dim: int, output: str = "",
                 attention_scale: Callable[[int], float] | None = None, scaled_modules: list[str] = (),
                 explain: Callable[[Exception, int], str | None] | None = None,
                 own: Callable[[int], dict[str, Tensor]] | None = None, own_ratios: dict[str, float] | None = None,
                 stream: Callable[[int, torch.device], Tensor] | None = None) -> None:
        super().__init__()
        self.runs, self.target, self.input_ndim, self.output_dim = runs, target, len(input_shape), output_dim
        self.output = output
        self.own = own  # seed -> the module's own initial tensors by name (model.init=own), or None
        # d_head -> factor on an attention's own scale (the parameterization's rule; None: SP's), and the
        # modules it was applied to through their own `scaling` (custom.scale_attention)
        self.attention_scale, self.scaled_modules = attention_scale, list(scaled_modules)
        self.sdpa_calls = 0  # scaled_dot_product_attention calls rescaled (counted by AttentionScale)
        self.explain = explain  # (error, tokens per example) -> one line, when the module fails on the data's tokens
        self.own_loss = False  # what the forward returns holds a loss of the module's own, ignored
        self.told = False  # and that this model said so (`warn` says it once a job)
        with contextlib.suppress(TypeError, ValueError):
            self.takes_targets = "targets" in inspect.signature(net.forward).parameters
        params = dict(net.named_parameters(remove_duplicate=False))
        # every name a tensor goes by (a tied weight has several): functional_call sets them all
        self.aliases: dict[str, list[str]] = {}
        first: dict[int, str] = {}  # id of a tensor -> the first name it goes by
        for name, p in params.items():
            self.aliases.setdefault(first.setdefault(id(p), name), []).append(name)
        # A parameter the module froze (requires_grad=False) is held as a buffer is: stacked along K,
        # each run's from its seed's build (model.init=own: `draw_own_init`; else seed 0's), handed
        # over as it is, never trained (no parameterization rule reaches it)
        self.frozen = [n for n in self.aliases if not params[n].requires_grad]
        if self.aliases and len(self.frozen) == len(self.aliases):
            raise ConfigError(f"model.target={target}: every parameter has requires_grad=False "
                              f"({listed(self.frozen, 3)}): nothing would be trained; leave some trainable")
        self.layers = nn.ModuleDict()
        for layer in layers:
            kept = {a: n for a, n in layer.names.items() if n not in self.frozen}
            if not kept:  # a layer frozen whole: no atom
                continue
            tag = "readout" if layer is readout and not layer.tied else None
            tag = tag or ("query" if layer.query and "weight" in kept else None)
            layer = layer if kept == layer.names else dataclasses.replace(layer, names=kept)
            values = {a: params[n] for a, n in layer.names.items()}
            atom = UserAtom(layer, values, runs=runs, tag=tag)
            atom.own_ratio = (own_ratios or {}).get(layer.path, 1.0)
            self.layers[_key(layer.path) if layer.kind != "tensor" else _key(layer.names["tensor"])] = atom
        self.stacked = nn.Module()
        self.buffer_names: dict[str, str] = {}
        for name, b in net.named_buffers(remove_duplicate=False):
            self.stacked.register_buffer(_key(name), b.detach().unsqueeze(0).repeat(runs, *[1] * b.dim()).clone())
            self.buffer_names[_key(name)] = name
        for name in self.frozen:
            p = params[name]
            self.stacked.register_buffer(_key(name), p.detach().unsqueeze(0).repeat(runs, *[1] * p.dim()).clone())
        # the module's logits at a position change with a later token (no causal mask): said at the first
        # forward on tokens, whose targets are the next ones (`causal.reads_ahead`); None: not known
        self.reads_ahead = self._reads_ahead(net, layers, input_shape) if params else None
        # an embedding with a padding row (BERT's word table): under vmap, its gradient as a loop's (`PaddingRows`)
        self.padded = any(isinstance(m, nn.Embedding) and m.padding_idx is not None for m in net.modules())
        _strip(net)
        self.net = net
        self.batched = True  # vmap over the runs; False once vmap could not run the module
        self.attention = _attention_like(net)
        self.unused: list[str] | None = None  # the trained tensors the first training forward did not use: `_said`
        self.reached: set[tuple[str, int]] | None = None  # (name, run) the last backward reached, runs one at a time
        # Random draws in the forward (dropout): each run from its own stream of torch's generator, the
        # state a plain loop's generator has once seeded with the run's seed and the module built
        # (`stream`: (seed, device) -> that state); random: whether the forward draws (None: not seen yet)
        self.stream, self.random, self.streams = stream, None, None
        self.seeds = [0] * runs  # each run's seed (`draw_own_init`)
        self.taps, self.tapped = None, {}  # the coordinate check's hooks, and what they read (`start_taps`)

    def _reads_ahead(self, net: nn.Module, layers: list[Layer], input_shape: tuple[int, ...]) -> bool | None:
        """`causal.reads_ahead` on the module as built (seed 0's own init, its dropout off), where it
        reads token sequences (one input dimension and an embedding table)."""
        if len(input_shape) != 1 or not any(layer.kind == "embedding" for layer in layers):
            return None
        if any(t.is_meta for t in net.parameters()):  # a check before training: no values to compare
            return None

        def logits(x: Tensor) -> Tensor:
            return self.logits_of(net(x, **({"targets": torch.zeros_like(x)} if self.takes_targets else {})))

        was, own_loss = net.training, self.own_loss
        net.eval()
        try:
            return reads_ahead(logits, input_shape[0], self.output_dim)
        finally:
            net.train(was)
            self.own_loss = own_loss

    @property
    def frozen_source(self) -> str:
        return "as built under each run's seed" if self.own is not None else "as built under seed 0 (model.init=torch)"

    def draw_own_init(self, seed: int | None, runs: Sequence[int] = ()) -> None:
        """Hand each atom the module's own init of its tensors for `seed` (model.init=own), and put the
        frozen tensors of that seed's build in `runs`; None: forget them. Each run's seed is kept (`seeds`)."""
        for k in runs:
            self.seeds[k] = seed
        if self.own is None:
            return
        values = self.own(seed) if seed is not None else {}
        for atom in self.layers.values():
            atom._drawn = {name: values[user] for name, user in atom.user_names.items() if user in values}
        with torch.no_grad():
            for name in self.frozen:  # as the module froze it under this seed: a random projection differs by seed
                if name in values:
                    held = self.stacked.get_buffer(_key(name))
                    for k in runs:
                        held[k].copy_(values[name])

    # ---- the forward
    def _tensors(self) -> tuple[dict[str, Tensor], dict[str, Tensor]]:
        params = {}
        for atom in self.layers.values():
            for name, t in atom.trained():
                for alias in self.aliases[atom.user_names[name]]:
                    params[alias] = atom.handed(name, t, alias)
        buffers = {self.buffer_names[k]: b for k, b in self.stacked.named_buffers() if k in self.buffer_names}
        for name in self.frozen:
            for alias in self.aliases[name]:
                buffers[alias] = self.stacked.get_buffer(_key(name))
        return params, buffers

    takes_targets = False  # the forward takes `targets` (nanoGPT's): given zeros, so that it returns every position
    vmapping = False  # a forward under vmap is running (`_vmapped`)

    def _call(self, params: dict, buffers: dict, x: Tensor) -> Tensor:
        kwargs = {"targets": torch.zeros_like(x)} if self.takes_targets and not torch.is_floating_point(x) else {}
        try:
            with (AttentionScale(self) if self.attention_scale is not None else contextlib.nullcontext(),
                  PaddingRows() if self.vmapping and self.padded else contextlib.nullcontext()):
                out = torch.func.functional_call(self.net, (params, buffers), (x,), kwargs, tie_weights=False)
        except Exception as e:  # a context longer than the module's own (its position table): one line
            # not under vmap: what stops vmap (a random draw in its error mode, an operation it cannot batch)
            # is vmap's, and the runs then go as they can (`_vmap`, `forward`), where a context too long fails too
            explain = self.explain is not None and not self.vmapping and not torch.is_floating_point(x)
            line = self.explain(e, x.shape[-1]) if explain else None
            if line is None:
                raise
            raise ConfigError(line) from None
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # SystemExit: it would end the sweep without a word
            raise ConfigError(f"model.target={self.target}: its forward raised {one_line(e)}") from None
        y = self.logits_of(out)
        if isinstance(y, Tensor) and y.shape[-1] > self.output_dim and not torch.is_floating_point(x):
            y = y[..., : self.output_dim]  # a vocabulary larger than the data's: its own tokens never occur
        return y

    def logits_of(self, out):
        """The logits in what the forward returned: `model.output` names an attribute, key or index;
        else a tensor, an output object's or dict's `logits`, or a tuple's first element."""
        self.own_loss = self.own_loss or _holds_loss(out)
        if self.output:
            key = int(self.output) if self.output.lstrip("-").isdigit() else self.output
            try:
                found = out[key] if isinstance(key, int) or isinstance(out, dict) else getattr(out, key)
            except (KeyError, IndexError, AttributeError, TypeError):
                raise ConfigError(f"model.output={self.output}: model.target={self.target} returns "
                                  f"{_describe(out)}, which has no {key!r}") from None
            if not isinstance(found, Tensor):
                raise ConfigError(f"model.output={self.output}: model.target={self.target} returns {_describe(out)}, "
                                  f"whose {key!r} is a {type(found).__name__}, not a tensor of logits")
            return found
        if isinstance(out, Tensor):
            return out
        found = None
        if isinstance(out, dict) or hasattr(out, "logits"):
            found = out["logits"] if isinstance(out, dict) and "logits" in out else getattr(out, "logits", None)
        elif isinstance(out, (tuple, list)) and out:
            found = out[0]
        if not isinstance(found, Tensor):
            raise ConfigError(f"model.target={self.target} returns {_describe(out)}: say where its logits are "
                              "with model.output=NAME (an attribute or key) or model.output=INDEX")
        return found

    def forward(self, x: Tensor) -> Tensor:
        shared = x.dim() == self.input_ndim + 1
        if x.device.type == "meta":  # sizing (training.memory.footprint) or a check before any training,
            with torch.enable_grad():  # with the graph recorded (meta tensors have one): logits none reaches are seen
                return self._on_meta(*self._tensors(), x, shared)
        params, buffers = self._tensors()
        before = self._open_streams(x)
        watch = self.runs > 1 and torch.is_grad_enabled()
        self.reached = None
        if self.runs == 1 or not self.batched:
            held = rng_state(x.device) if self.random is False else None  # a module seen not to draw is held to it
            y = self._loop(params, buffers, x, shared, watch)
            if held is not None and not torch.equal(held, rng_state(x.device)):
                raise self._draws_late()
        else:
            try:
                y = self._vmap(params, buffers, x, shared)
            except ConfigError:
                raise
            except Exception as e:
                if before is not None:  # what vmap drew before it stopped is drawn again
                    self.streams = list(before)
                y = self._loop(params, buffers, x, shared, watch)  # raises if the module cannot run at all
                self.batched = False
                warn(f"model.target={self.target}: vmap cannot run it (it stops at {stopped_at(e)}); "
                     f"its {self.runs} runs go one at a time")
        self._close_streams(before)
        if self.own_loss and not self.told:
            self.told = True
            warn(f"model.target={self.target} returns a loss of its own: it is ignored, the task's loss is trained",
                 study=True)
        if self.reads_ahead and not torch.is_floating_point(x):
            self.reads_ahead = False  # said once a model (`warn`: once a job, on screen once a sweep)
            warn(f"model.target={self.target} has no causal mask: its logits at a position change when a later token "
                 "does, and each position's target is the next token, so it sees what it predicts (its loss falls by "
                 "copying its input); give it a causal mask (transformers: a decoder, is_decoder=True) or study a "
                 "causal model", study=True)
        self._check(y, x, shared)
        if torch.is_grad_enabled():
            self._said(y)
        return y


def _holds_loss(out) -> bool:
    """Whether a forward's output carries a loss of its own: a `loss` that is not None, or a scalar
    tensor after a tuple's first element (nanoGPT's (logits, loss))."""
    if isinstance(out, (tuple, list)):
        return any(isinstance(v, Tensor) and v.dim() == 0 for v in out[1:])
    loss = out.get("loss") if isinstance(out, dict) else getattr(out, "loss", None)
    return loss is not None


def _describe(out) -> str:
    if isinstance(out, (tuple, list)):
        return f"a {type(out).__name__} of {len(out)} ({', '.join(type(v).__name__ for v in out)})"
    fields = list(out) if isinstance(out, dict) else [k for k in vars(out) if not k.startswith("_")] if hasattr(out, "__dict__") else []
    return f"a {type(out).__name__}" + (f" with {', '.join(map(str, fields[:8]))}" if fields else "")


class AttentionScale(TorchFunctionMode):
    """While a user's module runs: a `scaled_dot_product_attention` call that leaves the scale at
    its default 1/sqrt(d_head) (nanoGPT's attention) gets the parameterization's factor on it
    (muP's 1/d). An explicit scale is the module's own choice (transformers pass theirs, which
    `scaling` already set) and is left alone."""

    def __init__(self, model: Custom) -> None:
        super().__init__()
        self.model = model

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is nn.functional.scaled_dot_product_attention and kwargs.get("scale") is None:
            d = (args[0] if args else kwargs["query"]).shape[-1]  # q: (..., T, d_head)
            kwargs = {**kwargs, "scale": d**-0.5 * self.model.attention_scale(d)}
            self.model.sdpa_calls += 1
        return func(*args, **kwargs)


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

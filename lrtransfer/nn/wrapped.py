"""A user's `nn.Module` run as K runs at once: its parameters held by atoms, its forward by vmap.

Forward: the user's module with its parameters removed, run by
`torch.func.functional_call` on the atoms' tensors (each with a leading run axis K)
under `vmap` over K. A forward multiplier is folded into the tensor handed over
(weight_mult * W, bias_mult * b: exact for Linear, convolution and Embedding layers),
so no user code changes; a tensor that goes by several names (an embedding tied to
the readout) is handed over once per name, each with its own use's multiplier, so the
readout's 1/m does not reach the embedding. Buffers are stacked along K too, and so is a
parameter the module froze (requires_grad=False): never trained, under no parameterization's
rule. A trained tensor the forward does not use at a step has no gradient there, and the engine
skips it that step as torch's optimizers skip such a parameter (`training/skips.py`); where the
runs go one at a time, each its own graph, the model says which runs did not use it (`skipping`).
A module vmap cannot run falls back to a loop over the runs, said in one line naming the
operation that stopped it.

The logits are read from what the module returns (`logits_of`): a tensor, an output
object's or dict's `logits`, a tuple's first element, or what `model.output` names.
A forward that takes `targets` (nanoGPT's) returns every position's logits only when
given them: it is given zeros, and the loss it computes from them is ignored.
Attention that calls `scaled_dot_product_attention` with its default scale gets the
parameterization's scale (`AttentionScale`). On a GPU, attention under vmap runs PyTorch's
plain ("math") kernel: the fused kernels' batching rules fail there (the memory-efficient
kernel's backward stops at "LSE is not correctly aligned", seen on an H200 with torch 2.11
for GPT-2 and nanoGPT alike), and the plain kernel is exact.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import re
from collections.abc import Callable, Sequence

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from lrtransfer.errors import ConfigError, one_line, warn
from lrtransfer.nn.atoms import OUTPUT, Atom, Module, scaled
from lrtransfer.nn.causal import reads_ahead
from lrtransfer.nn.roles import Layer
from lrtransfer.nn.taps import Taps, coord_modules


class ReadoutUse(Atom):
    """The readout's use of an embedding's table (a tied head): no tensor of its own, so no init,
    no LR, no slot; it carries the forward multiplier a readout of this shape gets."""

    TENSORS = ()

    def __init__(self, fan_in: int, fan_out: int, *, runs: int, name: str) -> None:
        super().__init__(fan_in, fan_out, role=OUTPUT, runs=runs, tag="readout")
        self.name = name


class UserAtom(Atom):
    """One user layer's trained tensors, each (K, *its torch shape), with the layer's fan-in,
    fan-out and role, so every parameterization treats it as the built-in atom of its kind."""

    def __init__(self, layer: Layer, values: dict[str, Tensor], *, runs: int, tag: str | None = None) -> None:
        super().__init__(layer.fan_in, layer.fan_out, role=layer.role, runs=runs, tag=tag)
        self.kind, self.path, self.user_names, self.in_out = layer.kind, layer.path, dict(layer.names), layer.in_out
        if layer.tied:  # the table read as a Linear (dim -> num): the readout's fan-in is the width
            self.tied_use = ReadoutUse(layer.fan_out, layer.fan_in, runs=runs, name=layer.tied)
        self.TENSORS = tuple(layer.names)
        self.query_outputs = layer.query or None  # the attention query's share of the outputs (tag "query")
        self.branch_output, self.in_branch, self.within = layer.branch_output, layer.in_branch, layer.within
        # how the module's own init of this layer scales from this width to a parameterization's base width
        # (RMS there / here, `own_init.OwnInit.base_ratios`); 1 without one
        self.own_ratio = 1.0
        self._own = {}  # tensors no parameterization rules on: the module's own init (seed 0's build)
        self._drawn = {}  # the module's own init of every tensor for the seed being initialised (model.init=own)
        self.MATRICES = ("weight",) if layer.kind in ("linear", "conv") else ()
        for name, value in values.items():  # value: one run's tensor, in the user's layout
            setattr(self, name, nn.Parameter(torch.empty(runs, *value.shape, dtype=value.dtype)))
            if layer.kind in ("gain", "tensor"):  # no parameterization draws these: the module's own init
                self._own[name] = value.detach().clone()

    def from_matrix(self, w: Tensor) -> Tensor:
        # (fan_in, fan_out) -> torch's (out, in, *k); an Embedding's (num, dim) and a Conv1D's
        # (in, out) are already that view
        return w if self.kind == "embedding" or self.in_out else w.t().reshape(self.weight.shape[1:])

    def torch_init(self, gen: torch.Generator) -> Tensor:
        if self.kind == "embedding":  # nn.Embedding's init: N(0, 1)
            return torch.randn(self.fan_in, self.fan_out, generator=gen)
        return super().torch_init(gen)

    @property
    def torch_fan_in(self) -> int:
        return self.fan_out if self.kind == "embedding" else self.fan_in

    def own_init(self, name: str) -> Tensor | None:
        own = self._drawn.get(name, self._own.get(name)) if name in self._own else None
        return None if own is None else own.clone()

    def own_draw(self, name: str) -> Tensor | None:
        own = self._drawn.get(name) if name not in self._own else None
        return None if own is None else own.clone()

    def handed(self, name: str, t: Tensor, alias: str) -> Tensor:
        """The tensor the user's layer `alias` computes with: the stored one times that use's
        forward multiplier (a tied table's readout use has its own)."""
        if self.tied is not None and alias == self.tied.name:
            return scaled(t, self.tied.weight_mult)
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

    def _loop(self, params: dict, buffers: dict, x: Tensor, shared: bool, watch: bool = False) -> Tensor:
        """Each run in turn; watch: mark which tensors each run's graph reaches (`skipping`)."""
        self.reached = set() if watch else None
        ys = []
        for k in range(self.runs):
            mine = {n: p[k] for n, p in params.items()}
            if watch:
                for n, t in mine.items():
                    t.register_hook(functools.partial(self._reached_by, n, k))
            with self._in_stream([k], x.device):
                call = self._call_of(x)
                y = call(mine, {n: b[k] for n, b in buffers.items()}, x if shared else x[k])
                ys.append(y if call == self._call else self._keep_taps(*y, [k]))
        return ys[0].unsqueeze(0) if self.runs == 1 else torch.stack(ys)

    def _reached_by(self, name: str, k: int, grad: Tensor) -> None:
        self.reached.add((name, k))

    def skipping(self) -> dict[tuple[int, str], Tensor]:
        """After a backward: {(id(atom), tensor name): (K,) bool, True for each run whose forward did
        not use that trained tensor} for each tensor some run did not use, where the runs went one at
        a time (each its own graph); {} under vmap, whose runs are one graph (a tensor it did not use
        has no gradient at all, which the engine sees)."""
        if self.reached is None:
            return {}
        out = {}
        for atom in self.layers.values():
            for name, _ in atom.trained():
                aliases = self.aliases[atom.user_names[name]]
                missed = torch.tensor([all((a, k) not in self.reached for a in aliases) for k in range(self.runs)])
                if missed.any():
                    out[(id(atom), name)] = missed
        return out

    def _vmap(self, params: dict, buffers: dict, x: Tensor, shared: bool) -> Tensor:
        """The runs under vmap; a forward that draws random numbers, the runs of each seed at once,
        each seed's from its stream: vmap's `same` randomness draws each run's numbers as that run
        alone draws them."""
        if x.device.type == "meta" or self.streams is None:
            # a module seen not to draw at its first forward is held to it ("error")
            return self._vmapped(params, buffers, x, shared, "error" if self.random is False else "different")
        if self.random is None:  # the first forward: all runs at once, unless it draws
            saved = {n: b.clone() for n, b in buffers.items()}
            try:
                return self._vmapped(params, buffers, x, shared, "error")
            except RuntimeError as e:
                if "randomness error mode" not in str(e):
                    raise
            with torch.no_grad():  # what it updated in place before it drew, as it was
                for n, b in buffers.items():
                    b.copy_(saved[n])
        groups = [[k for k, s in enumerate(self.seeds) if s == seed] for seed in dict.fromkeys(self.seeds)]
        if len(groups) == 1:
            with self._in_stream(groups[0], x.device):
                return self._vmapped(params, buffers, x, shared, "same")
        ys = []
        for runs in groups:  # a copy of the group's tensors; the buffers it updates in place are copied back
            idx = torch.tensor(runs, device=x.device)
            mine = {n: b.index_select(0, idx) for n, b in buffers.items()}
            with self._in_stream(runs, x.device):
                ys.append(self._vmapped({n: p.index_select(0, idx) for n, p in params.items()}, mine,
                                        x if shared else x.index_select(0, idx), shared, "same", runs))
            with torch.no_grad():
                for n, b in buffers.items():
                    b.index_copy_(0, idx, mine[n])
        order = torch.tensor([k for runs in groups for k in runs], device=x.device).argsort()
        return torch.cat(ys).index_select(0, order)

    def _vmapped(self, params: dict, buffers: dict, x: Tensor, shared: bool, randomness: str,
                 runs: list[int] | None = None) -> Tensor:
        """The runs (`runs`, None: all) under vmap at once."""
        self.vmapping = True
        try:
            with plain_attention(x.device):
                call = self._call_of(x)
                y = torch.func.vmap(call, in_dims=(0, 0, None if shared else 0), randomness=randomness)(
                    params, buffers, x)
                return y if call == self._call else self._keep_taps(*y, runs)
        except RuntimeError as e:
            if "randomness error mode" not in str(e) or self.random is None:
                raise
            raise self._draws_late() from None
        finally:
            self.vmapping = False

    def _draws_late(self) -> ConfigError:
        return ConfigError(f"model.target={self.target}: its forward draws random numbers at some steps and not at its "
                           "first, so its runs' draws cannot each follow their own seed; draw them at every step "
                           "(dropout of rate 0 draws none)")

    # ---- what the coordinate check records: its submodules' outputs, each run's (nn/taps.py)
    def start_taps(self) -> dict[str, str]:
        """From the next forward on, each run's mean |output| of the modules `taps.coord_modules` picks,
        in `tapped` ({path: (K,)}, in the order the forward first reaches them); returns {path: its group}."""
        groups = coord_modules(self.net, [a for names in self.aliases.values() for a in names])
        self.taps, self.tapped = Taps({p: self.net.get_submodule(p) for p in groups}), {}
        return groups

    def stop_taps(self) -> None:
        if self.taps is not None:
            self.taps.remove()
        self.taps = None

    def _call_of(self, x: Tensor) -> Callable:
        """What a run's (or, under vmap, every run's) forward calls: `_call`, or while the taps record,
        `_read_taps` (the logits and what the taps read, which vmap returns with one value per run)."""
        return self._call if self.taps is None or x.device.type == "meta" else self._read_taps

    def _read_taps(self, params: dict, buffers: dict, x: Tensor) -> tuple[Tensor, dict[str, Tensor]]:
        self.taps.current = {}
        try:
            return self._call(params, buffers, x), self.taps.current
        finally:
            self.taps.current = None

    def _keep_taps(self, y: Tensor, read: dict[str, Tensor], runs: list[int] | None) -> Tensor:
        """What the taps read for `runs` (None: all; each value (len(runs),), or 0-dim for one run), kept
        in `tapped`; returns the logits."""
        for path, v in read.items():
            held = self.tapped.setdefault(path, torch.full((self.runs,), float("nan"), dtype=v.dtype, device=v.device))
            held[slice(None) if runs is None else torch.tensor(runs, device=v.device)] = v
        return y

    # ---- random draws: each run's from its own stream
    @contextlib.contextmanager
    def _in_stream(self, runs: list[int], device: torch.device):
        """torch's generator at the stream of `runs` (runs of one seed, which draw alike) while the
        forward draws, its state then kept as theirs; the global generator left as it was."""
        if self.streams is None or device.type == "meta":
            yield
            return
        with torch.random.fork_rng(devices=cuda_devices(device)):
            set_rng_state(self.streams[runs[0]], device)
            yield
            state = rng_state(device)
        for k in runs:
            self.streams[k] = state

    def _open_streams(self, x: Tensor) -> list[Tensor] | None:
        """At the first forward (not on the meta device): each run's stream, which that forward draws
        from as every later one of a module that draws will; the streams as they were before it."""
        if self.random is not None or self.stream is None or x.device.type == "meta":
            return None
        first = {seed: self.stream(seed, x.device) for seed in dict.fromkeys(self.seeds)}
        self.streams = [first[seed] for seed in self.seeds]
        return list(self.streams)

    def _close_streams(self, before: list[Tensor] | None) -> None:
        """After the first forward: whether it drew (a stream moved); a module that did not runs
        with no streams from then on, each seed's runs no longer apart."""
        if before is not None:
            self.random = any(not torch.equal(a, b) for a, b in zip(before, self.streams))
            self.streams = self.streams if self.random else None

    def takes_streams(self, streams, device: torch.device) -> bool:
        """Whether a checkpoint's `streams` are a state of torch's generator on `device` for each run."""
        if self.stream is None or not isinstance(streams, Tensor) or streams.dtype != torch.uint8:
            return False
        if streams.dim() != 2 or tuple(streams.shape) != (self.runs, rng_state(device).numel()):
            return False
        n = torch.get_rng_state().numel()
        try:  # the CPU's part is checked by torch (a damaged one is refused); a GPU's is a seed and an offset
            for s in streams:
                torch.Generator().set_state(s[:n].clone())
        except RuntimeError:
            return False
        return True

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

    def _trains(self) -> bool:
        return any(t.requires_grad for atom in self.layers.values() for _, t in atom.trained())

    def _detached(self, y: Tensor) -> None:
        if not y.requires_grad and self._trains():
            raise ConfigError(f"model.target={self.target} gives logits that no trained parameter reaches (no grad_fn: "
                              "detached, or computed under torch.no_grad()), so training could not move them; "
                              "return logits computed from its parameters")

    def _said(self, y: Tensor) -> None:
        """At the first forward that trains: what the module holds that is not trained (frozen), and
        the trained tensors its forward did not use (read from its graph), said once."""
        self._detached(y)
        if self.unused is not None or not y.requires_grad:
            return
        if self.frozen:
            warn(f"model.target={self.target}: requires_grad=False on {counted(self.frozen, 3)}: never trained; "
                 f"every run holds the module's own values, {self.frozen_source}")
        reached = _leaves(y)
        self.unused = [atom.user_names[name] for atom in self.layers.values() for name, t in atom.trained()
                       if t.requires_grad and id(t) not in reached]
        if self.unused:
            warn(f"model.target={self.target}: its forward does not use {counted(self.unused, 3)} at its first step: "
                 "a step that does not use a parameter skips it, as torch's optimizers skip one without a gradient "
                 "(no update, no weight decay), so one it never uses stays as it starts")

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
        if not y.is_floating_point():
            raise ConfigError(f"model.target={self.target} gives logits of dtype {str(y.dtype).removeprefix('torch.')}; "
                              "logits must be floating point (float32, bfloat16, ...): drop its cast of them")

    def _on_meta(self, params: dict, buffers: dict, x: Tensor, shared: bool) -> Tensor:
        """The forward on the meta device; a module whose control flow reads values (which meta
        tensors have none of) is shape-checked on zeros on the CPU instead, one run."""
        try:
            y = self._loop(params, buffers, x, shared) if self.runs == 1 else self._vmap(params, buffers, x, shared)
            reached = y.requires_grad if isinstance(y, Tensor) else True
        except ConfigError:
            raise
        except Exception:
            cpu = lambda d: {n: torch.zeros(t.shape[1:], dtype=t.dtype).requires_grad_(t.requires_grad)  # noqa: E731
                             for n, t in d.items()}
            B, example = x.shape[-1 - self.input_ndim], x.shape[x.dim() - self.input_ndim:]
            xs = torch.zeros(max(B, 2), *example, dtype=x.dtype)  # 2: batch norm needs two examples
            try:
                y1 = self._call(cpu(params), cpu(buffers), xs)
            except ConfigError:
                raise
            except Exception as e:
                raise ConfigError(f"model.target={self.target} fails on a batch of shape {tuple(xs.shape)}: "
                                  f"{one_line(e)}") from None
            reached = y1.requires_grad if isinstance(y1, Tensor) else True
            y = torch.empty(self.runs, B, *y1.shape[1:], dtype=y1.dtype, device="meta") if isinstance(y1, Tensor) else y1
        self._check(y, x, shared)
        if not reached:
            self._detached(y)
        return y.detach()

    # ---- what inspect shows
    def user_names(self) -> dict[int, str]:
        """id(stored tensor) -> the user's name of the parameter it holds."""
        return {id(t): atom.user_names[name] for atom in self.layers.values() for name, t in atom.trained()}

    def _query_notes(self) -> list[str]:
        """Which attention queries (`roles.find_queries`) start at zero in run 0 (muP's zero query), and
        which part of a fused projection that is."""
        zeroed = []
        for atom in self.layers.values():
            if atom.tag == "query":
                w = atom.weight.detach()[0]
                view = w if atom.in_out else w.t()  # (fan_in, fan_out)
                q = atom.query_outputs or atom.fan_out
                if not view[:, :q].any():
                    zeroed.append(atom.path if q == atom.fan_out else f"{atom.path} (outputs 0..{q - 1} of {atom.fan_out})")
        if not zeroed:
            return []
        return [f"note: the attention queries start at zero (muP's zero query): {', '.join(zeroed[:2])}"
                f"{', ...' if len(zeroed) > 2 else ''} ({len(zeroed)} in all)"]

    def notes(self, param) -> list[str]:
        """What `param`'s rules do here that a reader cannot see in the table, and what they cannot
        do from outside the module: frozen tensors (not in the table); a tied readout; a rule for
        attention logits other than SP's 1/sqrt(d) (muP's 1/d), applied where the module exposes its
        scale (after a forward, which counts the scaled_dot_product_attention calls), else a warning."""
        out = []
        if self.frozen:
            out.append(f"note: frozen, not trained (requires_grad=False): {counted(self.frozen, 6)}; every run holds "
                       f"the module's own values, {self.frozen_source}, with no init rule, multiplier or LR of param={param.name}")
        for atom in self.layers.values():
            if atom.tied is not None:
                out.append(f"note: {atom.user_names['weight']} is tied to the readout {atom.tied.name}: one tensor, "
                           f"one init and LR (an embedding's, role {atom.role}); the readout's forward multiplier "
                           f"({atom.tied.weight_mult:.4g}) reaches only its readout use, as mup's MuSharedReadout")
        zeroed = self._query_notes()
        out += zeroed
        if not self.attention or not param.rescales_attention():
            return out
        rule = param.attention_rule or f"param={param.name}'s attention rule"
        where = ([f"the `scaling` of {len(self.scaled_modules)} attention modules ({listed(self.scaled_modules, 2)})"]
                 if self.scaled_modules else []) + (
                 [f"{self.sdpa_calls} scaled_dot_product_attention calls a forward at their default scale"]
                 if self.sdpa_calls else [])
        if where:
            return out + [f"note: {rule} applied through {' and '.join(where)}"
                          + ("" if zeroed else "; queries keep their init (muP's zero query is not applied)")]
        return out + [f"warning: {listed(self.attention, 3)} computes attention: {rule} cannot be applied "
                      "from outside the module (it keeps its own scale)"]


def listed(names: list[str], n: int) -> str:
    """The first n names, and `...` when there are more."""
    return ", ".join(names[:n]) + (", ..." if len(names) > n else "")


def counted(names: list[str], n: int) -> str:
    """`listed`, with how many in all where some are left out."""
    return listed(names, n) + (f" ({len(names)} in all)" if len(names) > n else "")


def stopped_at(e: Exception) -> str:
    """The operation vmap stopped at, read from its error: an aten operator, `.item()`, data-dependent
    control flow, or the error's own first line."""
    text = one_line(e)
    op = re.search(r"aten::[\w.]+", text)
    if op:
        return f"{op.group(0)}: {text[:120]}"
    for needle, what in ((".item()", ".item() (a tensor read as a Python number)"),
                         ("data-dependent control flow", "control flow that reads a tensor's value"),
                         ("data dependent", "an operation whose output shape depends on the data")):
        if needle in text:
            return what
    return text[:160]


def _leaves(y: Tensor) -> set[int]:
    """The ids of the leaf tensors y's graph reaches (what a backward from y would give a gradient)."""
    seen, found, todo = set(), set(), [y.grad_fn]
    while todo:
        node = todo.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        variable = getattr(node, "variable", None)  # AccumulateGrad: a leaf
        if variable is not None:
            found.add(id(variable))
        todo.extend(fn for fn, _ in node.next_functions)
    return found


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


def plain_attention(device: torch.device) -> contextlib.AbstractContextManager:
    """On a GPU, scaled_dot_product_attention restricted to its plain kernel (see the module's
    docstring); elsewhere nothing changes."""
    if device.type != "cuda":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel  # torch >= 2.3
    except ImportError:
        return torch.backends.cuda.sdp_kernel(enable_flash=False, enable_mem_efficient=False, enable_math=True)
    return sdpa_kernel([SDPBackend.MATH])


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


class PaddingRows(TorchFunctionMode):
    """Under vmap: an embedding's `padding_idx` row gets no gradient from the positions that read it,
    in every run. vmap's batching rule for the embedding's backward (torch 2.13) offsets each run's
    token ids into one flat table and keeps padding_idx as it is, so only the first run's padding
    row is held (BERT's word table: token 0 of every later run trained, unlike a plain loop). Here
    the lookup runs without padding_idx and the padding positions' rows are detached: the same
    values, and the gradient a plain loop's embedding gives."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is not nn.functional.embedding:
            return func(*args, **kwargs)
        bound = inspect.signature(nn.functional.embedding).bind(*args, **kwargs)
        bound.apply_defaults()
        given = dict(bound.arguments)
        pad = given["padding_idx"]
        if pad is None:
            return func(**given)
        ids, weight = given["input"], given["weight"]
        pad = pad + weight.shape[0] if pad < 0 else pad
        out = func(**{**given, "padding_idx": None})  # (*ids.shape, dim)
        return torch.where((ids == pad).unsqueeze(-1), out.detach(), out)


def cuda_devices(device: torch.device) -> list:
    """`device` as torch.random.fork_rng's devices: its generator forked too where it is a GPU."""
    return [device] if device.type == "cuda" else []


def rng_state(device: torch.device) -> Tensor:
    """torch's generator state: the CPU's, and on a GPU its own after it."""
    cpu = torch.get_rng_state()
    return torch.cat([cpu, torch.cuda.get_rng_state(device)]) if device.type == "cuda" else cpu


def set_rng_state(state: Tensor, device: torch.device) -> None:
    n = torch.get_rng_state().numel()
    torch.set_rng_state(state[:n])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state[n:], device)


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

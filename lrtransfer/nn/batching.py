"""The K runs of a user's module (`wrapped.Custom`) at once under vmap, or one at a time.

A module vmap cannot run falls back to a loop over the runs, said in one line naming the
operation that stopped it (`stopped_at`). A trained tensor the forward does not use at a step has
no gradient there, and the engine skips it that step as torch's optimizers skip such a parameter
(`training/skips.py`); where the runs go one at a time, each its own graph, the model says which
runs did not use it (`skipping`).

Where vmap and a plain loop would differ, the loop's numbers are kept. On a GPU, attention under
vmap runs PyTorch's plain ("math") kernel: the fused kernels' batching rules fail there (the
memory-efficient kernel's backward stops at "LSE is not correctly aligned", seen on an H200 with
torch 2.11 for GPT-2 and nanoGPT alike), and the plain kernel is exact. An embedding's padding
row gets the gradient a loop gives it (`PaddingRows`).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import re

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from lrtransfer.errors import ConfigError, one_line


class Batching:
    """How `wrapped.Custom`'s runs go: all at once under vmap, or in turn (`_loop`), each run's
    random draws from its stream (`streams.Streams`)."""

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

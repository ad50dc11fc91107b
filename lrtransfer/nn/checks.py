"""What a user's module's forward is held to, said in one line before any training.

Its logits must have the shape and dtype the task reads, and a trained tensor must reach them, or
training could not move them. At the first forward that trains, what it will not train (frozen
tensors, and trained ones the forward did not use) is said once. On the meta device (sizing, the
checks before a sweep) a module whose control flow reads values is checked on zeros instead.
"""

from __future__ import annotations

import torch
from torch import Tensor

from lrtransfer.errors import ConfigError, one_line, warn
from lrtransfer.nn.notes import counted


class Checks:
    """`wrapped.Custom`'s checks of what its forward returns."""

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

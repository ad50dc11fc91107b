"""Which modules of a user's model the coordinate check records, and their outputs' size per run.

The built-in models' check records every atom's output; a user's module runs as a whole
under `functional_call` + vmap, so its atoms never run and the check would see only the
logits. Its own submodules do run: a forward hook on each reads its output inside the
vmapped forward (mean |output| of each run, as `mup`'s `get_coord_data` records `l1`), and
the vmapped function returns those numbers beside the logits, one per run.

Which modules (the rule, for a table that stays readable at 12 blocks):
- the blocks: the children of the outermost `nn.ModuleList` or `nn.Sequential` whose
  children are modules of their own (nanoGPT's and GPT-2's `transformer.h.3`, Llama's
  `model.layers.3`, BERT's `bert.encoder.layer.3`); in each block, its children that hold
  parameters (attention, MLP, their norms);
- outside the blocks, each module that holds a parameter itself: the embeddings, the final
  norm, the readout (a plain `nn.Sequential` of Linears: each Linear);
- and the logits (the row `output`, as for the built-in models).
A row's group is its name with the block's index as `*` (`transformer.h.*.attn`): the text
table gives a group's range over its blocks, the figure a colour.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn


def coord_modules(net: nn.Module, parameters: list[str]) -> dict[str, str]:
    """{module path: its group} for the modules the check records, in `net.named_modules` order;
    `parameters`: every name a parameter of `net` goes by (the module may be stripped of them)."""
    owners = {name.rpartition(".")[0] for name in parameters}  # the modules holding a parameter themselves

    def holds(path: str) -> bool:  # a parameter in the module at `path` or below it
        return any(o == path or o.startswith(path + ".") or not path for o in owners)

    blocks: dict[str, str] = {}  # block path -> its group ("transformer.h.*")
    for path, m in net.named_modules():  # parents first: the outermost list of blocks is found first
        if not isinstance(m, (nn.ModuleList, nn.Sequential)) or any(path.startswith(g[:-1]) for g in blocks.values()):
            continue  # not a list, or inside a list of blocks found already
        children = [(name, c) for name, c in m.named_children() if holds(_join(path, name))]
        if children and all(len(list(c.children())) for _, c in children):
            for name, _ in children:
                blocks[_join(path, name)] = _join(path, "*")
    out: dict[str, str] = {}
    for path, m in net.named_modules():
        if not path:
            continue
        block = next((b for b in blocks if path.startswith(b + ".")), None)
        if block is not None:
            if path.count(".") == block.count(".") + 1 and holds(path):  # a child of the block
                out[path] = blocks[block] + path[len(block):]
        elif path not in blocks and path in owners:
            out[path] = path
    return out


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def first_tensor(output) -> Tensor | None:
    """The tensor a module's output stands for: itself, a tuple's first tensor (a transformers block's
    (hidden, ...)), a dict's or an output object's first tensor value; None without one."""
    if isinstance(output, Tensor):
        return output
    values = output.values() if isinstance(output, dict) else output if isinstance(output, (tuple, list)) else ()
    return next((v for v in values if isinstance(v, Tensor)), None)


class Taps:
    """Forward hooks on `modules` ({path: module}) while recording: each run's mean |output| of each,
    gathered into `current` (a dict the vmapped call returns), a module's first call in a forward."""

    def __init__(self, modules: dict[str, nn.Module]) -> None:
        self.current: dict[str, Tensor] | None = None
        self.handles = [m.register_forward_hook(self._hook(path)) for path, m in modules.items()]

    def _hook(self, path: str):
        def hook(module, inputs, output) -> None:
            t = first_tensor(output)
            if self.current is not None and path not in self.current and t is not None and t.is_floating_point():
                t = t.detach() if t.dtype in (torch.float32, torch.float64) else t.detach().float()  # bf16: in float32
                self.current[path] = t.abs().mean()

        return hook

    def remove(self) -> None:
        for h in self.handles:
            h.remove()

"""The atoms: the leaves of a network that hold its weights, written for an ensemble of runs.

Every weight carries a leading *run* axis K: one job trains K copies of the same
architecture (one per learning rate and seed) as a single batched computation. A
copy never sees another copy's numbers: every operation here acts slice by slice
along K, so the ensemble computes exactly what K separate trainings would.

The network is a tree the code can walk (`Module.children()`): *atoms* hold
weights, *bonds* hold none, compounds (`Sequential`, `Residual`) combine them.
Each node carries the modular norm's bookkeeping (Modula): a `mass`, the share of
the update budget it receives, a `sensitivity`, its Lipschitz constant with
respect to its input, and `split(target)`, the compound rule that hands a target
norm on to its children. Parameterizations other than the modular norm ignore them.
A new compound states its own `split`; a node that holds atoms and does not is an
error, never a silent guess.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

INPUT, HIDDEN, OUTPUT = "input", "hidden", "output"
# A tensor outside any layer whose one growing dimension is the width (mup's "vector-like"),
# and a tensor no dimension of which grows: both only in models whose roles are read off
# shapes (model=custom); every parameterization states its rule for every role.
VECTOR, FIXED = "vector", "fixed"
ROLES = (INPUT, HIDDEN, OUTPUT, VECTOR, FIXED)


class Module(nn.Module):
    """A node of the network tree."""

    def atoms(self) -> Iterator[Atom]:
        """The weight-carrying leaves, in forward order."""
        for m in self.modules():
            if isinstance(m, Atom):
                yield m

    def parts(self) -> Iterator[Module]:
        """The direct children in the network tree, looking through torch containers (ModuleList)."""
        for child in self.children():
            if isinstance(child, Module):
                yield child
            else:
                yield from _parts_within(child)

    @property
    def mass(self) -> float:
        return sum(c.mass for c in self.parts())

    @property
    def sensitivity(self) -> float:
        return 1.0

    def draw_own_init(self, seed: int | None, runs: Sequence[int] = ()) -> None:
        """Before `runs` (the runs of `seed`) are initialised: a model whose tensors start where its
        own code puts them (model=custom, model.init=own) draws them for that seed (`Atom.own_draw`);
        None forgets them. The built-in models are drawn by the parameterization alone."""

    def split(self, target: float) -> list[tuple[Module, float]]:
        """The target norm of each child that holds weights, given this node's target.

        Bonds and other weightless nodes have nothing to split. A compound that
        holds atoms must state its rule (composition, tuple, scalar multiple, ...).
        """
        if next(self.atoms(), None) is None:
            return []
        raise NotImplementedError(f"{type(self).__name__} holds weights but states no compound rule (split)")


def _parts_within(container: nn.Module) -> Iterator[Module]:
    for child in container.children():
        if isinstance(child, Module):
            yield child
        else:
            yield from _parts_within(child)


def tare(module: Module, absolute: float) -> None:
    """Rescale the masses of every atom below `module` so that they total `absolute`."""
    total = module.mass
    if total <= 0:
        raise ValueError("cannot tare a module of zero mass")
    for atom in module.atoms():
        atom.mass = atom.mass * absolute / total


class Atom(Module):
    """A leaf with weights.

    `role` says how its dimensions scale with the model's width: an `input` atom
    maps a fixed-size input to the width, a `hidden` one maps width to width, an
    `output` one maps the width to a fixed number of outputs, a `fixed` one grows
    in no dimension, a `vector` one (a tensor outside any layer) in exactly one.
    Scaling rules (muP and others) are stated per role.

    The parameterization sets `weight_mult` and `bias_mult`, the forward
    multipliers, and may set `mass` (the modular norm's tare). `tag` names a
    special place a rule may single out (e.g. "query": muP zero-initialises
    attention queries).
    """

    kind = "atom"
    query_outputs: int | None = None  # of an atom tagged "query": how many of its first outputs are the query (None: all)
    # Depth: inside a residual branch (its tensors get a depth rule's corrections, CompleteP's), and the
    # last layer of one in a model that adds the branch itself (a published model): the
    # parameterization's branch multiplier is folded into its weight and bias (`branch_mult`).
    in_branch: bool = False
    branch_output: bool = False
    branch_mult: float = 1.0
    # The named parts of the model the atom sits in ("attention", "mlp"; "group": a user's glob of a
    # published model's layers), which per-module hyperparameters address (`options/hp.py`)
    within: tuple[str, ...] = ()
    # The trained tensors an atom may hold. "weight" is a matrix in the parameterization's
    # sense (fan_in x fan_out, possibly stored in another shape: `from_matrix`), "bias" a
    # vector added to the output; other names are the atom's own (a layer norm's "gain").
    TENSORS: tuple[str, ...] = ("weight", "bias")
    # The tensors the forward multiplies its input by as a matrix (a matmul, a convolution): what a
    # bf16 step hands the forward as bfloat16 copies. A lookup table, a bias or a gain is not one.
    MATRICES: tuple[str, ...] = ()

    def __init__(self, fan_in: int, fan_out: int, *, role: str, runs: int, tag: str | None = None) -> None:
        super().__init__()
        if role not in ROLES:
            raise ValueError(f"role must be one of {ROLES}, got {role!r}")
        self.fan_in, self.fan_out, self.role, self.runs, self.tag = fan_in, fan_out, role, runs, tag
        self.weight_mult = 1.0
        self.bias_mult = 1.0
        self._mass = 1.0

    @property
    def mass(self) -> float:
        return self._mass

    @mass.setter
    def mass(self, value: float) -> None:
        self._mass = float(value)

    def split(self, target: float) -> list[tuple[Module, float]]:
        return []  # a leaf: its target is its own

    @property
    def tied(self) -> Atom | None:
        """For an embedding whose table a Linear also uses as its weight (a readout tied to it,
        model=custom): the atom of that use, a child holding no tensor, only the forward
        multiplier a readout gets. None for every other atom."""
        return self._modules.get("tied_use")

    def set_multipliers(self, weight: float | Tensor, bias: float | Tensor) -> None:
        """Set the forward multipliers: floats, or (K,) tensors, one value per run (a per-run
        option such as muP's output_mult)."""
        set_scalar(self, "weight_mult", weight)
        set_scalar(self, "bias_mult", bias)

    def trained(self) -> Iterator[tuple[str, Tensor]]:
        """(name, tensor) of each trained tensor this atom holds, in TENSORS order."""
        for name in self.TENSORS:
            t = getattr(self, name, None)
            if t is not None:
                yield name, t

    def from_matrix(self, w: Tensor) -> Tensor:
        """One run's weight in storage shape, from its (fan_in, fan_out) matrix view."""
        return w

    def torch_init(self, gen: torch.Generator) -> Tensor:
        """One run's weight as PyTorch's own layer would start it, (fan_in, fan_out): SP's init.

        nn.Linear's (and nn.Conv's) kaiming_uniform(a=sqrt(5)), U(-1/sqrt(fan_in), 1/sqrt(fan_in)),
        drawn in torch's (fan_out, fan_in) order and transposed, so that with the same
        generator state it equals torch's initialisation number for number.
        """
        bound = 1.0 / math.sqrt(self.fan_in)
        return torch.empty(self.fan_out, self.fan_in).uniform_(-bound, bound, generator=gen).t()

    @property
    def torch_fan_in(self) -> int:
        """prod(weight.shape[1:]) of PyTorch's own layout of this layer's weight: the fan-in
        torch.nn.init (and the equalized-LR note's He constant) computes. A matrix's fan_in for nn.Linear
        (out, in) and nn.Conv (out, in, k, ...); not so for a lookup table (`Embedding`)."""
        return self.fan_in

    def own_init(self, name: str) -> Tensor | None:
        """One run's initial value of a tensor no parameterization rules on (a gain), or None."""
        return None

    def own_draw(self, name: str) -> Tensor | None:
        """One run's value of a weight or bias as the model's own code draws it for the seed being
        initialised (model.init=own, `Module.draw_own_init`), in storage shape; None where the
        parameterization draws it (the built-in models, model.init=torch)."""
        return None

    def extra_repr(self) -> str:
        return f"{self.fan_in} -> {self.fan_out}, role={self.role}, runs={self.runs}"


def set_scalar(module: nn.Module, name: str, value: float | Tensor) -> None:
    """module.name = a float, or a (K,) tensor, one value per run (a per-run option), kept as a
    buffer so that moving the model to its device and dtype moves and rounds it too."""
    module._buffers.pop(name, None)
    module.__dict__.pop(name, None)
    if isinstance(value, Tensor):
        module.register_buffer(name, value.detach().clone(), persistent=False)
    else:
        setattr(module, name, float(value))


def scaled(t: Tensor, mult: float | Tensor) -> Tensor:
    """t * mult: a float multiplier (1: t itself), or a (K,) one per run, over t's leading run axis."""
    if isinstance(mult, Tensor):
        return t * mult.view(-1, *([1] * (t.dim() - 1)))
    return t if mult == 1.0 else t * mult


class Linear(Atom):
    """MM_{W,b}(z) = W z + b (the lecture notes, eq. 7.35), for K runs at once.

    weight: (K, fan_in, fan_out), stored input-major so the forward is a plain
    batched matmul with no transposed copies; bias: (K, 1, fan_out).
    """

    kind = "linear"
    MATRICES = ("weight",)

    def __init__(
        self, fan_in: int, fan_out: int, *, role: str, runs: int, bias: bool = True, tag: str | None = None
    ) -> None:
        super().__init__(fan_in, fan_out, role=role, runs=runs, tag=tag)
        self.weight = nn.Parameter(torch.empty(runs, fan_in, fan_out))
        self.bias = nn.Parameter(torch.zeros(runs, 1, fan_out)) if bias else None

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, fan_in) shared by every run, or (K, B, fan_in) -> (K, B, fan_out)
        if x.dim() > 3:  # (K, B, ..., fan_in), e.g. (K, B, T, fan_in): the middle axes as one
            return self.forward(x.flatten(1, -2)).unflatten(1, x.shape[1:-1])
        y = scaled(torch.matmul(x, self.weight), self.weight_mult)
        if self.bias is not None:  # in the product's dtype (bf16 under autocast), as torch's linear and conv add it
            y = y + scaled(self.bias, self.bias_mult).to(y.dtype)
        return y


class Conv(Atom):
    """A convolution: a matrix multiplication with shared weights (the lecture notes, eqs. 7.48-7.51).

    `dims` spatial axes (1 or 2), a k^dims filter per (output, input) channel pair,
    zero padding so the output has the input's size (k odd). As a matrix it maps the
    c_in * k^dims values under the filter to c_out channels: fan_in = c_in * k^dims,
    fan_out = c_out, so every rule stated for matrices (init scale, muP, the He
    constant) applies to it as to a Linear.

    weight: (K, c_out, c_in, k[, k]), torch's layout per run; bias: (K, c_out).
    Inputs: (B, c_in, *spatial) shared by every run, or (K, B, c_in, *spatial).
    """

    kind = "conv"
    MATRICES = ("weight",)

    def __init__(
        self, c_in: int, c_out: int, kernel: int, *, dims: int, role: str, runs: int, bias: bool = True,
        tag: str | None = None,
    ) -> None:
        if dims not in (1, 2) or kernel % 2 != 1:
            raise ValueError(f"Conv needs dims in (1, 2) and an odd kernel, got dims={dims}, kernel={kernel}")
        super().__init__(c_in * kernel**dims, c_out, role=role, runs=runs, tag=tag)
        self.c_in, self.c_out, self.kernel, self.dims = c_in, c_out, kernel, dims
        self.weight = nn.Parameter(torch.empty(runs, c_out, c_in, *[kernel] * dims))
        self.bias = nn.Parameter(torch.zeros(runs, c_out)) if bias else None
        self._conv = nn.functional.conv1d if dims == 1 else nn.functional.conv2d

    def from_matrix(self, w: Tensor) -> Tensor:
        # (fan_in, fan_out) -> (c_out, c_in, k, ...): fan_in runs over (c_in, taps) in torch's order
        return w.t().reshape(self.weight.shape[1:])

    def forward(self, x: Tensor) -> Tensor:
        # The multipliers are folded into the (small) filters rather than applied to the
        # (large) outputs. Runs are convolved one by one (unbind/stack, whose backward
        # copies no more than it must): as one grouped convolution over K * c_in
        # channels, with the runs' outputs left interleaved, every later elementwise
        # pass ran on strided memory (measured 2.6x slower than one run at a time).
        K, pad = self.runs, self.kernel // 2
        w = scaled(self.weight, self.weight_mult)
        b = None if self.bias is None else scaled(self.bias, self.bias_mult)
        if x.dim() == self.dims + 2:  # (B, c_in, *S) shared: one convolution with K * c_out filters
            y = self._conv(x, w.flatten(0, 1), None if b is None else b.flatten(), padding=pad)  # (B, K*c_out, *S)
            return y.unflatten(1, (K, self.c_out)).transpose(0, 1).contiguous()  # (K, B, c_out, *S)
        bs = [None] * K if b is None else b.unbind(0)
        ys = [self._conv(xr, wr, br, padding=pad) for xr, wr, br in zip(x.unbind(0), w.unbind(0), bs)]
        return ys[0].unsqueeze(0) if K == 1 else torch.stack(ys)  # (K, B, c_out, *S)

    def extra_repr(self) -> str:
        return f"{self.c_in} -> {self.c_out}, kernel={self.kernel}^{self.dims}, role={self.role}, runs={self.runs}"


class Gain(Atom):
    """z -> gain * z + bias, elementwise over the last axis: layer norm's learnable gamma and beta.

    A diagonal matrix, not a dense one: no parameterization multiplies it or draws it
    at random; the gain starts at 1 and the bias at 0 (the lecture notes' LN). Its role is
    `hidden` (both grow with the width).
    gain, bias: (K, 1, width).
    """

    kind = "gain"
    TENSORS = ("gain", "bias")

    def __init__(self, width: int, *, runs: int) -> None:
        super().__init__(width, width, role=HIDDEN, runs=runs)
        self.gain = nn.Parameter(torch.ones(runs, 1, width))
        self.bias = nn.Parameter(torch.zeros(runs, 1, width))

    def own_init(self, name: str) -> Tensor | None:
        # LN starts as LN-S under every parameterization: gain 1, bias 0
        return torch.ones(1, self.fan_out) if name == "gain" else torch.zeros(1, self.fan_out)

    def forward(self, z: Tensor) -> Tensor:
        # z: (K, B, ..., width); gain, bias broadcast over the middle axes
        shape = (self.runs,) + (1,) * (z.dim() - 2) + (self.fan_out,)
        return z * self.gain.view(shape) + self.bias.view(shape)


class Embedding(Atom):
    """A lookup table: token id i -> row i of the weight (PyTorch's nn.Embedding), for K runs.

    As a matrix it is a Linear on one-hot inputs: fan_in = `num` rows (the vocabulary or
    the context length), fan_out = `dim` (the width), stored (K, num, dim), which is
    already the (fan_in, fan_out) view. Role `input`: a fixed-size input to the width.
    No bias. `kind` "embedding": each parameterization states its own rule for it.

    ids: (B, T) shared by every run, or (K, B, T) -> (K, B, T, dim).
    """

    kind = "embedding"
    TENSORS = ("weight",)

    def __init__(self, num: int, dim: int, *, runs: int, tag: str | None = None) -> None:
        super().__init__(num, dim, role=INPUT, runs=runs, tag=tag)
        self.weight = nn.Parameter(torch.empty(runs, num, dim))

    def torch_init(self, gen: torch.Generator) -> Tensor:
        """nn.Embedding's init: every entry N(0, 1)."""
        return torch.randn(self.fan_in, self.fan_out, generator=gen)

    @property
    def torch_fan_in(self) -> int:
        """nn.Embedding's weight is (num, dim), so prod(weight.shape[1:]) is dim (what
        torch.nn.init.kaiming_normal_ on it uses), not the number of rows."""
        return self.fan_out

    def forward(self, ids: Tensor) -> Tensor:
        K, num = self.runs, self.fan_in
        # run k reads rows k*num ... k*num + num - 1 of the (K * num, dim) table: no run sees
        # another's. (K, 1, 1) + ids (B, T) or (K, B, T) -> (K, B, T)
        offsets = torch.arange(K, device=ids.device).mul_(num).view(K, 1, 1)
        y = nn.functional.embedding(ids + offsets, self.weight.reshape(K * num, self.fan_out))  # (K, B, T, dim)
        return scaled(y, self.weight_mult)


@dataclass
class Slot:
    """One trained tensor: which atom it belongs to and its per-tensor multipliers of the
    optimizer's settings (the parameterization's, `Parameterization.slots`)."""

    atom: Atom
    name: str  # "weight" | "bias" | an atom's own tensor (Atom.TENSORS)
    tensor: Tensor  # (K, ...): leading run axis
    lr_mult: float | Tensor
    eps_mult: float | Tensor = 1.0  # x the optimizer's epsilon (Adam's), for this tensor
    wd_mult: float = 1.0  # x the weight decay, for this tensor
    # x 1 - beta1 and x 1 - beta2 (Adam's moments' rates, the inverse of their windows), for this tensor:
    # the optimizer's betas become this tensor's own (`optim.betas`); 1 keeps them exactly
    beta1_mult: float = 1.0
    beta2_mult: float = 1.0
    # the tensor's own beta1 and beta2 (hp.<role>.beta1): in place of the optimizer's, the rule's
    # multipliers above then applied to it; a float, or (K,) float64 values of the runs; None: the optimizer's
    beta1: float | Tensor | None = None
    beta2: float | Tensor | None = None
    # x the weight decay after the parameterization's rule for it (`decay_mults`): hp.<role>.wd_mult.
    # lr_mult and eps_mult hold hp.<role>.lr_mult and eps_mult already. Each of the three a float, or
    # (K,) float64 values of the runs where the runs have their own
    wd_tuned: float | Tensor = 1.0


def is_hidden_matrix(atom: Atom, name: str) -> bool:
    """A weight that maps the width to the width (conv kernels included, as matrices): what
    a matrix optimizer (Muon) orthogonalises. Embeddings, the readout, biases and gains are not."""
    return name == "weight" and atom.role == HIDDEN


def is_one_dimensional(slot: Slot) -> bool:
    """A bias, a norm's gain or another tensor of one dimension per run: what nanoGPT's and GPT-2's
    recipes leave undecayed (`decay_1d: false`; they decay only tensors of 2+ dimensions)."""
    return slot.name in ("bias", "gain") or (slot.name == "tensor" and slot.tensor.dim() <= 2)

"""The nodes without weights of their own: bonds (nonlinearities, reshapes, pooling, layer
norm's standardising) and compounds (composition, residual, weighted sum, layer norm).

Each states the modular norm's bookkeeping for itself: a bond has mass 0 and its own
sensitivity; a compound combines its children's masses and sensitivities, and hands a
target norm on to them in `split` (see `atoms.Module`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor, nn

from lrtransfer.nn.atoms import Gain, Module, scaled, set_scalar


class Enumerate(Module):
    """A bond: token ids (..., T) -> the positions 0 ... T-1 as shared ids (1, T), to read a
    position embedding (Modula's Enumerate)."""

    def forward(self, ids: Tensor) -> Tensor:
        return torch.arange(ids.shape[-1], device=ids.device).unsqueeze(0)


def _scaled(f):
    return lambda x: math.sqrt(2.0) * f(x)


class Activation(Module):
    """A bond: an elementwise nonlinearity (mass 0).

    Its sensitivity is the modular norm's bookkeeping, under one of two conventions
    (`convention`, set by the parameterization; `param.sensitivity`):
    - `modula`, PyTorch Modula 0.0.0.0.0.2's: ReLU and GELU 1/sqrt(2) (on a centred
      Gaussian input they keep half the RMS), their sqrt(2)-scaled forms 1;
    - `lipschitz`: the Lipschitz constant max |f'|, a bound that holds for every
      input: ReLU and tanh 1, (exact) GELU 1.129, the scaled forms sqrt(2) times that.
    tanh, which Modula does not have, is 1 under both.

    A unit-scaled nonlinearity (u-muP's, `unit_scale`) computes gain * f(mult * x) / mult: its
    input multiplier and an output gain that keeps a unit Gaussian input's output at unit scale.
    """

    FUNCTIONS = {"relu": torch.relu, "gelu": nn.functional.gelu, "tanh": torch.tanh,
                 "scaled_relu": _scaled(torch.relu), "scaled_gelu": _scaled(nn.functional.gelu)}
    SENSITIVITY = {
        "modula": {"relu": 0.5**0.5, "gelu": 0.5**0.5, "tanh": 1.0, "scaled_relu": 1.0, "scaled_gelu": 1.0},
        "lipschitz": {"relu": 1.0, "gelu": 1.1289, "tanh": 1.0, "scaled_relu": 2**0.5, "scaled_gelu": 2**0.5 * 1.1289},
    }

    def __init__(self, name: str) -> None:
        super().__init__()
        self.name = name
        self.fn = self.FUNCTIONS[name]
        self.convention = "modula"
        self.mult, self.out = 1.0, 1.0  # gain * f(mult * x) / mult = out * f(mult * x)

    def unit_scale(self, mult: float | Tensor, gain: float | Tensor) -> None:
        """Compute gain * f(mult * x) / mult from now on: floats, or (K,) tensors, one per run."""
        set_scalar(self, "mult", mult)
        set_scalar(self, "out", gain / mult)

    def forward(self, x: Tensor) -> Tensor:
        # x: (K, B, ..., d) where mult or out is a (K,) tensor
        return scaled(self.fn(scaled(x, self.mult)), self.out)

    @property
    def sensitivity(self) -> float:
        return self.SENSITIVITY[self.convention][self.name]

    def extra_repr(self) -> str:
        unit = "" if isinstance(self.out, float) and self.out == self.mult == 1.0 else ", unit-scaled"
        return self.name + unit


class Flatten(Module):
    """A bond: merges each example's trailing `ndim` axes into one, (..., C, H, W) -> (..., C*H*W)."""

    def __init__(self, ndim: int) -> None:
        super().__init__()
        self.ndim = ndim

    def forward(self, x: Tensor) -> Tensor:
        return x.flatten(-self.ndim)

    def extra_repr(self) -> str:
        return f"last {self.ndim} axes"


class Standardize(Module):
    """A bond: LN-S(z) = (z - mean(z)) / std(z) over the last axis, with the population std
    (the lecture notes, eq. 7.40); `eps` inside the square root keeps a constant z finite.

    Computed by torch's fused layer norm with no gain or bias, which is this formula: on a
    CPU the mean-and-variance composition (`z.var`'s kernel over a last axis) ran its
    forward and backward many times slower (docs/performance.md)."""

    def __init__(self, eps: float = 1e-5) -> None:
        super().__init__()
        self.eps = eps

    def forward(self, z: Tensor) -> Tensor:
        return nn.functional.layer_norm(z, z.shape[-1:], eps=self.eps)


class Pool(Module):
    """A bond: average pooling over the spatial axes of (..., C, *spatial) inputs.

    `size` > 0 averages size^dims windows (halving each axis for size 2); `size` = 0
    averages everything (global pooling) and drops the spatial axes. An average has
    RMS no larger than its inputs': sensitivity 1.
    """

    def __init__(self, dims: int, size: int = 0) -> None:
        super().__init__()
        self.dims, self.size = dims, size

    def forward(self, x: Tensor) -> Tensor:
        if self.size == 0:
            return x.mean(dim=tuple(range(-self.dims, 0)))
        lead = x.shape[: -self.dims - 1]  # (B,) or (K, B)
        flat = x.reshape(-1, *x.shape[-self.dims - 1 :])
        pool = nn.functional.avg_pool1d if self.dims == 1 else nn.functional.avg_pool2d
        y = pool(flat, self.size)
        return y.view(*lead, *y.shape[1:])

    def extra_repr(self) -> str:
        return f"dims={self.dims}, size={'global' if self.size == 0 else self.size}"


class Sequential(Module):
    """Composition: the first child is applied first. Sensitivity multiplies."""

    def __init__(self, layers: Sequence[Module]) -> None:
        super().__init__()
        self.layers = nn.ModuleList(layers)

    def forward(self, x: Tensor) -> Tensor:
        for layer in self.layers:
            x = layer(x)
        return x

    @property
    def sensitivity(self) -> float:
        return math.prod(layer.sensitivity for layer in self.layers)

    def split(self, target: float) -> list[tuple[Module, float]]:
        """Composition: layer i gets (mass_i / mass) * target / (product of later sensitivities).

        (Pairwise, M2 o M1 hands M1 (mu1/mu) T / s2 and M2 (mu2/mu) T; the rule is
        associative, so a chain needs no nesting.)
        """
        mass = self.mass
        if mass <= 0:
            return [(layer, 0.0) for layer in self.layers]
        out, after = [], 1.0  # after: product of the sensitivities of the layers that follow
        for layer in reversed(self.layers):
            out.append((layer, layer.mass / mass * target / after if after > 0 else 0.0))
            after *= layer.sensitivity
        return out[::-1]


class Residual(Module):
    """z -> skip * z + branch * block(z): the residual rule is the parameterization's choice.
    skip, branch: floats, or (K,) tensors, one per run (u-muP's taus under a per-run option)."""

    def __init__(self, block: Module, *, skip: float | Tensor = 1.0, branch: float | Tensor = 1.0) -> None:
        super().__init__()
        self.block = block
        set_scalar(self, "skip", skip)
        set_scalar(self, "branch", branch)

    def forward(self, z: Tensor) -> Tensor:
        return scaled(self.block(z), self.branch) + scaled(z, self.skip)

    @property
    def sensitivity(self) -> float:
        return abs(self.skip) + abs(self.branch) * self.block.sensitivity

    def split(self, target: float) -> list[tuple[Module, float]]:
        """skip * Identity + branch * block: a tuple whose identity has mass 0, so the
        block gets the whole target, divided by |branch| (scalar multiple rule)."""
        if self.block.mass <= 0 or self.branch == 0:
            return [(self.block, 0.0)]
        return [(self.block, target / abs(self.branch))]


class Sum(Module):
    """x -> sum_i a_i * M_i(x): parts reading the same input, weighted and added.

    The compound rules of a tuple followed by Add (sensitivity 1) and scalar
    multiples: mass sum_i mu_i, sensitivity sum_i |a_i| s_i; part i gets
    (mu_i / mu) * T / |a_i|.
    """

    def __init__(self, parts: Sequence[Module], scales: Sequence[float]) -> None:
        super().__init__()
        if len(parts) != len(scales) or any(a == 0 for a in scales):
            raise ValueError("Sum needs one nonzero scale per part")
        self.parts_list = nn.ModuleList(parts)
        self.scales = tuple(float(a) for a in scales)

    def forward(self, x: Tensor) -> Tensor:
        out = None
        for a, part in zip(self.scales, self.parts_list):
            y = part(x) if a == 1.0 else a * part(x)
            out = y if out is None else out + y  # broadcasting: a part may give (K, 1, T, d)
        return out

    @property
    def sensitivity(self) -> float:
        return sum(abs(a) * p.sensitivity for a, p in zip(self.scales, self.parts_list))

    def split(self, target: float) -> list[tuple[Module, float]]:
        mass = self.mass
        if mass <= 0:
            return [(p, 0.0) for p in self.parts_list]
        return [(p, p.mass / mass * target / abs(a)) for a, p in zip(self.scales, self.parts_list)]


class LayerNorm(Sequential):
    """LN(z) = beta + gamma * LN-S(z) (the lecture notes, eq. 7.41): a composition of the
    standardising bond and a learnable gain atom."""

    def __init__(self, width: int, *, runs: int) -> None:
        super().__init__([Standardize(), Gain(width, runs=runs)])

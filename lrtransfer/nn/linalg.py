"""The matrix arithmetic that parameterizations and optimizers share, on tensors with a
leading run axis K: norms and their estimates, the Newton-Schulz orthogonalisation,
and the matrix view of a stored weight.

One implementation of each, because three users need them and must agree: the modular
norm (its `normalize` and `dualize` updates), the spectral parameterization (updates
rescaled to a spectral norm) and Muon (momentum orthogonalised by Newton-Schulz).
"""

from __future__ import annotations

import weakref

import torch
from torch import Tensor

from lrtransfer.nn.atoms import Atom


def run_view(v: Tensor, like: Tensor) -> Tensor:
    """A per-run vector (K,) shaped to broadcast against a (K, ...) tensor."""
    return v.view(-1, *([1] * (like.dim() - 1)))


TINY = 1e-30  # a norm below this is a zero update (a frozen run); never divide by it


# ---------------------------------------------------------------- norms
class Norm:
    """A norm on one kind of tensor, (K, ...) with a leading run axis, and its two update maps."""

    def value(self, d: Tensor) -> Tensor:
        """(K,): the exact norm of each run's slice."""
        raise NotImplementedError

    def estimate(self, d: Tensor, state: dict) -> Tensor:
        """(K,): the norm as training measures it; `state` persists across steps for this tensor."""
        return self.value(d)

    def dual(self, d: Tensor, steps: int) -> Tensor:
        """A tensor of norm 1 per run that is `d`'s steepest direction in this norm."""
        return d / run_view(self.value(d).clamp_min(TINY), d)

    def normalize_(self, d: Tensor, target: Tensor, state: dict, exact: bool) -> Tensor:
        """Scale `d` in place so that each run's slice has norm target (K,), as measured
        exactly or by training's estimate (`state` persists across steps)."""
        n = self.value(d) if exact else self.estimate(d, state)
        return d.mul_(run_view(target / n.clamp_min(TINY), d))


class RMS(Norm):
    """||v||_2 / sqrt(n) over everything but the run axis: the RMS of a vector (a bias)."""

    def value(self, d: Tensor) -> Tensor:
        return d.flatten(1).pow(2).mean(1).sqrt()


class Spectral(Norm):
    """The spectral norm of each run's matrix (the last two axes).

    `estimate` runs a power iteration warm-started from the previous step's
    right singular vector (10 iterations the first time, `iters` after), so it
    costs a few matrix-vector products per step; it never overestimates.
    """

    def __init__(self, iters: int = 1) -> None:
        self.iters = iters

    def value(self, d: Tensor) -> Tensor:
        return torch.linalg.matrix_norm(d, ord=2)

    def estimate(self, d: Tensor, state: dict) -> Tensor:
        v = state.get("v")
        iters = self.iters
        if v is None:  # the same fixed start for every run: a run's numbers never depend on K
            gen = torch.Generator().manual_seed(0)
            v0 = torch.randn(d.shape[-1], 1, generator=gen, dtype=torch.float64)
            v = (v0 / v0.norm()).to(d).expand(*d.shape[:-2], -1, -1).clone()
            state["v0"] = v.clone()
            iters = max(iters, 10)
        for _ in range(iters):
            w = d.mT @ (d @ v)  # (..., n, 1)
            n = w.norm(dim=-2, keepdim=True)
            # a zero matrix (a frozen run) keeps its vector instead of producing NaN
            v = torch.where(n > TINY, w / n.clamp_min(TINY), state.get("v0", v))
        state["v"] = v
        return (d @ v).norm(dim=(-2, -1))

    def dual(self, d: Tensor, steps: int) -> Tensor:
        return orthogonalize(d, steps)

# ---------------------------------------------------------------- Newton-Schulz
# `steps` quintic steps x -> a x + b x^3 + c x^5 on the singular values of X scaled to
# Frobenius norm 1. (a, b, c) are Jordan's (Muon): the slope at 0 is a = 3.4445, so small
# singular values grow fast, and the iteration maps [0, 1] into a band around 1 rather
# than onto 1. Iterated from any start in (0, 1] it settles in NS_BAND = [0.6818, 1.1344]
# (the attractor of the scalar map; the first step can overshoot to 1.2024). After 5
# steps every singular value that started at >= 0.01 of the Frobenius norm lies in
# NS_BAND (computed from the scalar map; `tests/test_muon.py` checks it on matrices).
# Muon uses this rough orthogonalisation as it is; the modular norm's `dualize` adds
# cubic polishing steps x -> 1.5x - 0.5x^3, which converge quadratically to 1, for a
# factor orthogonal to ~1e-3.
QUINTIC = (3.4445, -4.7750, 2.0315)
NS_BAND = (0.6818, 1.1344)
POLISH_STEPS = 4


def newton_schulz(d: Tensor, steps: int, polish: int = 0) -> Tensor:
    """Each matrix (last two axes) of d pushed towards its orthogonal factor U V^T: `steps`
    quintic steps, then `polish` cubic ones. A zero matrix (a frozen run) stays zero."""
    tall = d.shape[-2] > d.shape[-1]
    x = d.mT if tall else d  # (..., a, b) with a <= b: the Gram matrix is the small one
    x = x / x.norm(dim=(-2, -1), keepdim=True).clamp_min(TINY)
    a, b, c = QUINTIC
    for _ in range(steps):
        g = x @ x.mT
        x = a * x + (b * g + c * (g @ g)) @ x
    for _ in range(polish):
        x = 1.5 * x - 0.5 * (x @ x.mT) @ x
    return x.mT if tall else x


def orthogonalize(d: Tensor, steps: int) -> Tensor:
    """The orthogonal factor U V^T of each matrix of d, to ~1e-3: quintic steps, then polishing."""
    return newton_schulz(d, steps, POLISH_STEPS)


# ---------------------------------------------------------------- a stored weight as a matrix
_layouts: weakref.WeakKeyDictionary[Atom, tuple[int, int]] = weakref.WeakKeyDictionary()


def matrix_shape(atom: Atom) -> tuple[int, int]:
    """The shape in which the atom's stored weight, flattened, reads as its (fan_in, fan_out)
    matrix, (fan_in, fan_out), or as its transpose, (fan_out, fan_in): found once per atom
    from `Atom.from_matrix` alone (it stores an index matrix and reads where each entry
    went), so any atom that states `from_matrix`, a user's module's included, works."""
    shape = _layouts.get(atom)
    if shape is None:
        fi, fo = atom.fan_in, atom.fan_out
        idx = torch.arange(fi * fo, dtype=torch.float64).view(fi, fo)
        flat = atom.from_matrix(idx).reshape(-1)
        if torch.equal(flat, idx.reshape(-1)):
            shape = (fi, fo)
        elif torch.equal(flat, idx.t().reshape(-1)):
            shape = (fo, fi)
        else:
            raise ValueError(f"{type(atom).__name__} stores its weight neither as its matrix nor as its transpose")
        _layouts[atom] = shape
    return shape


def as_matrices(atom: Atom, t: Tensor) -> Tensor:
    """(K, *storage) -> (K, a, b): each run's weight as the atom's matrix or its transpose
    (spectral norms and orthogonal factors do not care which). Reshape the result back
    with `.reshape(t.shape)`."""
    return t.reshape(t.shape[0], *matrix_shape(atom))


def orthogonal(rows: int, cols: int, gen: torch.Generator) -> Tensor:
    """A uniformly random (rows, cols) matrix with orthonormal rows or columns: all singular values 1."""
    a = torch.randn(max(rows, cols), min(rows, cols), generator=gen, dtype=torch.float64)
    q, r = torch.linalg.qr(a)
    q = q * torch.sign(torch.diagonal(r)).where(torch.diagonal(r) != 0, torch.ones(()).double())
    return (q if rows >= cols else q.T).float()

"""A job's `hp.<role>.<name>` values (`options/hp.py`) resolved for each trained tensor.

The parameterization holds one `Tuning` (`Parameterization.tune`) and applies it on top of its
own rules: the LR and epsilon multipliers in its slots, the weight decay after its own decay
rule (`decays`), the init multiplier after its init (`initialize`). Each value is a float (the
job's), or a (K,) float64 tensor on the host where the runs have their own (a search, a grid):
computed with in float64 and rounded once, where a float would be, so that a run with value v
computes exactly what a job with the key set to v computes.
"""

from __future__ import annotations

from torch import Tensor

from lrtransfer.nn import FIXED, HIDDEN, INPUT, OUTPUT, VECTOR, Atom
from lrtransfer.options.hp import NAMES, ROLES, SPECIFIC_FIRST

Value = float | Tensor  # a float, or (K,) float64 values of the runs


def base_role(atom: Atom, name: str) -> str | None:
    """The tensor's base role (embedding, hidden, readout, vector), None for a fixed one."""
    if name in ("bias", "gain"):
        return "vector"
    if name == "tensor":  # a tensor outside any layer (model=custom): by its growing dimensions
        return {HIDDEN: "hidden", VECTOR: "vector"}.get(atom.role)
    return {INPUT: "embedding", HIDDEN: "hidden", OUTPUT: "readout"}.get(atom.role) if atom.role != FIXED else None


def roles_of(atom: Atom, name: str) -> tuple[str, ...]:
    """Every role that holds the tensor, most specific first: `group` (every tensor of the layers
    its glob names), `attention` or `mlp` (the hidden matrices of those parts), its base role."""
    base = base_role(atom, name)
    parts = [r for r in SPECIFIC_FIRST if r in atom.within and (r == "group" or base == "hidden")]
    return (*parts, *((base,) if base else ()))


class Tuning:
    """role -> name -> value, for the names set (per job or per run); `value` looks a tensor's up."""

    def __init__(self, values: dict[str, dict[str, Value]] | None = None) -> None:
        self.values = {r: dict(v) for r, v in (values or {}).items() if v}
        for role, named in self.values.items():
            assert role in ROLES and set(named) <= set(NAMES), (role, named)

    def __bool__(self) -> bool:
        return bool(self.values)

    def value(self, atom: Atom, name: str, what: str) -> Value | None:
        """The tensor's `what` from the most specific role that sets it; None where none does."""
        for role in roles_of(atom, name):
            found = self.values.get(role, {}).get(what)
            if found is not None:
                return found
        return None

    def times(self, base, atom: Atom, name: str, what: str):
        """`base` (a rule's multiplier) times the tensor's `what`: base itself where none is set, so
        that a job without `hp.*` computes what it did."""
        found = self.value(atom, name, what)
        return base if found is None else base * found

    def used_roles(self, tensors) -> set[str]:
        """The roles that hold a tensor of (atom, name) pairs `tensors`."""
        return {r for atom, name in tensors for r in roles_of(atom, name)}


def on(x: Value, device, dtype=None, cache: dict | None = None) -> Value:
    """A value as a float, or its runs' values on `device` in `dtype` (None: kept float64), kept in
    `cache` so that a step replayed as a CUDA graph copies nothing."""
    if not isinstance(x, Tensor):
        return x
    dtype = dtype or x.dtype
    if x.device == device and x.dtype == dtype:
        return x
    k = (id(x), device, dtype)
    if cache is not None and k in cache:
        return cache[k][1]
    out = x.to(device=device, dtype=dtype)
    if cache is not None:
        cache[k] = (x, out)  # x kept alive with its copy, so that its id names no other tensor
    return out


def product(terms, device) -> Value:
    """terms[0] * terms[1] * ..., left to right, in float64 where a term is per run (moved to
    `device`): the very numbers the Python floats' product gives, for the caller to round once."""
    out = on(terms[0], device)
    for t in terms[1:]:
        out = out * on(t, device)
    return out

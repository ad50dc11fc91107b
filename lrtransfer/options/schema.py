"""What every option's typed options are made of: the error they raise, the input kinds,
the choices shared by several options, and the value checks.

An option module (a model, parameterization, optimizer or dataset) defines its own
options dataclass next to its code and names it `OPTIONS`; `options/__init__.py` finds it
there. This module is the floor they all stand on: it imports no torch and nothing
else of lrtransfer but `errors`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from lrtransfer.errors import ConfigError  # noqa: F401  (what every option's `check` raises)


# What one example of a task is (see lrtransfer/options/data/__init__.py). A data option's
# options declare their kind as `INPUTS`, a model's the kinds it can read as
# `READS` (both default to vectors), so a model that cannot read the data is
# refused before anything loads.
VECTOR, IMAGE, TOKENS, SIGNAL = "vector", "image", "tokens", "signal"
INPUT_KINDS = {VECTOR: "feature vectors", IMAGE: "images", TOKENS: "token sequences", SIGNAL: "1-D signals"}

# The kind of update an optimizer's direction makes, declared by the optimizer as
# `UPDATE` (a ClassVar: it decides rules, it is no part of a job's identity). A
# parameterization whose rule depends on it (muP's per-tensor LR, equalized's LR
# grid) reads the kind, never the optimizer's name.
ADAPTIVE = "adaptive"  # scale-free per coordinate, like Adam: m / sqrt(v)
GRADIENT = "gradient"  # proportional to the gradient, like SGD (with momentum)
ORTHOGONALIZED = "orthogonalized"  # an orthogonalised matrix, like Muon (its other tensors: ADAPTIVE, `param.base.tensor_update`)
UPDATE_KINDS = (ADAPTIVE, GRADIENT, ORTHOGONALIZED)


@dataclass(frozen=True)
class Grid:
    """Learning rates 2**log2_min ... 2**log2_max, log2_step octaves apart: the grid an
    optimizer (`LR_GRID`) or a parameterization (`lr_grid`) declares as its default."""

    log2_min: float
    log2_max: float
    log2_step: float = 1.0


class Activation(str, Enum):
    """`auto`: the model's own nonlinearity (its options' ACTIVATION) in the form its
    parameterization's models use (`scaled_*` under param=modular, as Modula's models:
    `config.activation_of`). `scaled_relu`, `scaled_gelu`: sqrt(2) * f (Modula's
    ScaledReLU, ScaledGELU)."""

    auto = "auto"
    relu = "relu"
    gelu = "gelu"
    tanh = "tanh"
    scaled_relu = "scaled_relu"
    scaled_gelu = "scaled_gelu"


class MatrixInit(str, Enum):
    """How a parameterization that fixes weights' spectral norms draws them (param=modular,
    param=spectral): a uniformly random semi-orthogonal matrix (every singular value equal),
    or Gaussian entries, then scaled."""

    orthogonal = "orthogonal"
    gaussian = "gaussian"


class NormEstimate(str, Enum):
    """How a spectral norm is measured every step (param=modular, param=spectral)."""

    power = "power"  # warm-started power iteration, a few matrix-vector products a step
    exact = "exact"  # SVD: exact, slow at large widths


class ResidualRule(str, Enum):
    """z -> skip * z + branch * block(z) over L blocks: the parameterization's own rule
    (`auto`: SP, equalized and muP use `one` unless param.depth_exponent says
    otherwise, the modular norm `convex`), or one named rule for every parameterization."""

    auto = "auto"
    one = "one"  # skip 1, branch 1 (the lecture notes' ResNet-S)
    sqrt_depth = "sqrt_depth"  # skip 1, branch 1/sqrt(L) (depth-muP)
    convex = "convex"  # skip 1 - 1/L, branch 1/L (the modular norm, Modula)


class DecayScaling(str, Enum):
    """How weight decay relates to the learning rate.

    `independent` (default): w <- w - wd * schedule(t) * w, so an LR sweep does not
    also sweep the decay. `lr`: w <- w - lr * wd * schedule(t) * w, as torch's AdamW.
    """

    independent = "independent"
    lr = "lr"


def location(default: Any) -> Any:
    """A field that says where something is, not what is computed: it is no part of a job's identity."""
    return field(default=default, metadata={"location": True})


def content(default: Any, with_files: tuple[str, ...] = (), read_unless: str = "") -> Any:
    """A path to data whose file or folder is part of a job's identity by what it holds
    (`contents.fingerprint`), not by where it is: moving it keeps finished jobs, changing it
    retrains. `with_files`: files beside it that travel with it (nanoGPT's meta.pkl), part of
    the identity only where they are read: not while the key `read_unless` (data.vocab_size,
    which then replaces meta.pkl) is set."""
    return field(default=default, metadata={"content": True, "with_files": with_files, "read_unless": read_unless})


def fingerprint(default: Any) -> Any:
    """A field whose value is itself what some files hold (model.source: a hash of the model's local
    source files): part of a job's identity as it is, and, with the `content` fields' fingerprints,
    what a record keeps of its inputs (`config.identity.inputs`), so that readers tell apart jobs
    built from two versions of the same files."""
    return field(default=default, metadata={"fingerprint": True})


def added(default: Any, *, before: Any = None, idle_while: tuple[str, Any] | None = None) -> Any:
    """A field added to an option after jobs ran without it: at the value that computes what they
    computed (`before`; by default the default) it is left out of a job's identity, so their ids
    (and records) stay. A default that computes something new (`before` another value) is in it.
    `idle_while` (key, value): it is left out, at any value, while the option's `key` is `value`,
    where it computes nothing (param.base_steps while param.sde_rule is none)."""
    return field(default=default, metadata={"added": True, "before": default if before is None else before,
                                            "idle_while": idle_while})


def inert(default: Any) -> Any:
    """A field that computes nothing: it names a reference point a reader sees (`inspect`), as
    param.base_batch_size, which cancels out of the SDE rule's kappa. No part of a job's identity."""
    return field(default=default, metadata={"inert": True})


def odd_kernel(k: int) -> None:
    """Same-size zero padding needs an odd filter, k = 2l + 1 (the lecture notes' Conv1D-S)."""
    if not (k > 0 and k % 2 == 1):
        raise ConfigError(f"model.kernel_size must be a positive odd number (same-size padding), got {k}")


def positive(name: str, value: float) -> None:
    if not value > 0:
        raise ConfigError(f"{name} must be positive, got {value!r}")


def non_negative(name: str, value: float) -> None:
    if not value >= 0:  # also refuses NaN
        raise ConfigError(f"{name} must be >= 0, got {value!r}")


def in_unit(name: str, value: float) -> None:
    """A decay rate (Adam's betas, momentum): in [0, 1); 1 would never forget, above 1 grows without bound."""
    if not 0 <= value < 1:
        raise ConfigError(f"{name} must be in [0, 1), got {value!r}")


MAX_DEPTH = 1024  # layers or blocks: sizing a deeper model alone (training.memory.check_fits) takes minutes


def within(key: str, value: float, bound: float, unit: str) -> None:
    """A value beyond a sane bound (`1e99` meaning "no limit") is refused, not taken at its word."""
    if not value <= bound:
        raise ConfigError(f"{key}={value:g} is beyond the sane bound of {bound:,} {unit}")


def scaled_beta(beta: float, mult: float) -> float:
    """1 - (1 - beta) x mult: a decay rate whose rate of forgetting, 1 - beta, is scaled (a tensor's
    own beta, `Slot.beta1_mult`; the SDE rule's x kappa); exactly `beta` where mult is 1."""
    return beta if mult == 1.0 else 1.0 - (1.0 - beta) * mult


def finite_fields(group: str, node: Any) -> None:
    for key, value in vars(node).items():
        if isinstance(value, (int, float)) and not isinstance(value, bool) and not math.isfinite(value):
            raise ConfigError(f"{group}.{key} must be finite, got {value!r}")


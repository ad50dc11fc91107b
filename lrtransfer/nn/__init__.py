"""The building blocks every model is made of, each weight with a leading run axis K, and
the linear algebra on them.

`atoms.py`: the leaves that hold weights (Linear, Conv, Embedding, Gain) and the tree
they hang in (`Module`), each atom with its role (input, hidden, output); `compounds.py`:
the nodes without weights (nonlinearities, pooling, composition, residuals, layer norm);
`linalg.py`: norms, Newton-Schulz and a weight's matrix view, shared by the modular norm,
the spectral parameterization and Muon; `roles.py` and `wrapped.py`: a user's own
`nn.Module` seen as atoms (`model=custom`), `causal.py` whether it reads ahead, `taps.py`
its modules' outputs for the coordinate check.

What this folder may import: torch, nothing of lrtransfer but `errors`. Everything
above (the options, the engine) builds on it.
"""

from lrtransfer.nn.atoms import (
    FIXED,
    HIDDEN,
    INPUT,
    OUTPUT,
    ROLES,
    VECTOR,
    Atom,
    Conv,
    Embedding,
    Gain,
    Linear,
    Module,
    Slot,
    is_hidden_matrix,
    is_one_dimensional,
    scaled,
    tare,
)
from lrtransfer.nn.compounds import (
    Activation,
    Enumerate,
    Flatten,
    LayerNorm,
    Pool,
    Residual,
    Sequential,
    Standardize,
    Sum,
)

__all__ = ["FIXED", "HIDDEN", "INPUT", "OUTPUT", "ROLES", "VECTOR", "Activation", "Atom", "Conv", "Embedding",
           "Enumerate", "Flatten", "Gain", "LayerNorm", "Linear", "Module", "Pool", "Residual", "Sequential", "Slot",
           "Standardize", "Sum", "is_hidden_matrix", "is_one_dimensional", "scaled", "tare"]

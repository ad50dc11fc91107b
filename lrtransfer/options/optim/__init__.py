"""Base optimizers, vectorized over the run axis.

An optimizer here only turns gradients into *directions* (SGD: the momentum
buffer; Adam: m_hat / (sqrt(v_hat) + eps); Muon: the orthogonalised momentum of each
hidden matrix, AdamW's direction for the rest). The parameterization then turns
directions into updates (`Parameterization.updates`), which is where per-run
learning rates, per-tensor multipliers and the modular norm's normalisation live;
the engine applies them and the decoupled weight decay. Splitting the step this
way lets one optimizer serve every parameterization.

`conf/optim/<name>.yaml` is implemented by `lrtransfer/options/optim/<name>.py`, which
defines its options (`OPTIONS`, a dataclass declaring as ClassVars the kind of update
it makes, `UPDATE`, its LR grid, `LR_GRID`, and the numeric keys that may differ
between a job's runs, `PER_RUN`: `grid.optim.<key>=[...]` hands such a key to the
code as a (K,) tensor instead of a float) and a class
`Optimizer(options, slots)` with `directions(grads)` and a `state` list of tensors
(what a checkpoint saves). It receives the parameterization's `Slot`s, each trained
tensor with its atom (role, fan_in, fan_out), so an optimizer that treats matrices
differently (Muon orthogonalises the hidden ones) needs nothing else. The returned directions are
scratch tensors: the caller may scale them in place, and they are overwritten by
the next call. Adam's go through `kernels.py`, the one user of PyTorch's private
fused kernel.
"""

"""Architectures. `conf/model/<name>.yaml` is implemented by `lrtransfer/options/model/<name>.py`,
which defines its options (`OPTIONS`, a dataclass) and
`build(options, param, *, width, depth, runs, input_shape, output_dim) -> Module`.

`input_shape` is one example's shape: (d,) for vectors, (C, H, W) for images, (C, L) for
signals, (T,) for token ids in [0, output_dim). Which kinds a model reads is declared by its
options (`READS`) and checked before any job starts. A model takes inputs with or
without a leading run axis: (B, *input_shape) or (K, B, *input_shape). A residual
trunk is built by `param.residual_stack(blocks, rule=..., mass=...)`: the model
passes its residual rule option and its trunk's own mass under the modular norm.
"""

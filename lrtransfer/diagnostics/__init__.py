"""Looking inside one model before a study: what a parameterization does to it.

`compose.py` composes one config per width from sweep-style overrides;
`inspect.py` lists each trained tensor's role, init, multipliers and LR
(`lrtransfer inspect`); `coordcheck.py` trains a few steps at several widths and
measures every layer's activation scale (`lrtransfer coord-check`).

What this folder may import: `training` (to build models and run the engine's
ensemble), `config`, `options`, `reporting.style` (the coordinate check's figure),
`store` (the job-id resolver the configs name), `errors`.
"""

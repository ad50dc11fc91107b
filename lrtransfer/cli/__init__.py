"""The command line: `lrtransfer sweep | summary | plot | report | predict | export | list |
coord-check | inspect | import`.

`app.py` defines the commands (`importing.py` the import's, which `app.py` registers),
`show.py` what they print, `catalog.py` and `completion.py` what can be typed after
`lrtransfer sweep` (for `-h` and the shell).
Only typer loads at start-up: torch, Hydra, pandas and matplotlib load inside the
command that needs them, so `lrtransfer --help` answers at once.

What this folder may import: every stage below it (`sweeps`, `diagnostics`, `analysis`,
`reporting`, `importing`, `config`), lazily; nothing imports it.
"""

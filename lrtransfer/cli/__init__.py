"""The command line: `lrtransfer sweep | summary | plot | report | predict | export | list |
coord-check | inspect | import`.

`app.py` is the app and registers the commands, each defined by the module of its kind:
`sweeping.py` (sweep), `reading.py` (summary, plot, report, predict, export, list),
`checking.py` (coord-check, inspect), `importing.py` (import); `outputs.py` checks where
they write (`--out`), `show.py` what they print, `catalog.py` and `completion.py` what can
be typed after `lrtransfer sweep` (for `-h` and the shell).
Only typer loads at start-up: torch, Hydra, pandas and matplotlib load inside the
command that needs them, so `lrtransfer --help` answers at once.

What this folder may import: every stage below it (`sweeps`, `diagnostics`, `analysis`,
`reporting`, `importing`, `config`), lazily; nothing imports it.
"""

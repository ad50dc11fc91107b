"""Runs you already have: a table of finished runs (a W&B or MLflow export, a shell loop's CSV)
made into a study's records, which every reading command then reads as it reads a sweep's.

`tables` reads the file (CSV, JSON lines, Parquet) by plain parsing, `columns` checks the
columns named on the command line against it, and `study` turns its rows into records (a
job per scale and group, a run per row), naming the rows it cannot use, and writes them.

What this folder may import: `store` (writing records in the layout the analysis reads),
`config` (its bounds on a record's numbers), `errors`. Never the engine, the sweep, the
analysis or the figures, and nothing heavy: `lrtransfer import` needs neither torch nor
pandas (pyarrow only for a Parquet file).
"""

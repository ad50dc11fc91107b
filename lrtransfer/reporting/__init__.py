"""Numbers made into what a researcher keeps: figures, the HTML report, tables.

`plots.py` draws each family of groups (loss vs LR, optimum vs scale, training
curves) in the house style of `style.py`; `families.py` says which groups share a
figure and how panels are labelled; `html.py` puts tables, figures and configs in one
self-contained file; `export.py` writes the runs table as CSV or Parquet.

What this folder may import: `analysis` (groups, their statistics), `config` (which
keys are run settings), `errors`. Never the engine: it reads what the analysis made
of the records.
"""

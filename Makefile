# The two set-up commands of the README. Each creates .venv on first use.
#   make demo   install, run the default study, write its figure
#   make test   install, run the test suite (one worker per core: pytest-xdist; an idle worker
#               takes tests queued for a busy one, so the longest tests do not end the run alone)
# Both install into .venv: `source .venv/bin/activate` then puts `lrtransfer` on a shell's PATH.
# ARGS adds overrides to the demo's sweep (make demo ARGS="seed=0,1,2").
# TORCH picks the PyTorch build: the default is the CPU-or-CUDA wheel of 2.13.0
# (on this project's CI machines, a CPU build on local disk).
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
BIN := $(VENV)/bin
ARGS ?=

.PHONY: demo test install

install: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet "$(TORCH)"
	$(BIN)/pip install --quiet -e ".[test]"
	touch $@

demo: install
	$(BIN)/lrtransfer sweep study=width $(ARGS)
	$(BIN)/lrtransfer plot results/width

test: install
	$(BIN)/python -m pytest -n auto --dist worksteal

# make docs   install; build the documentation site (docs/, mkdocs.yml) into site/
.PHONY: docs

docs: install
	$(BIN)/mkdocs build --strict --site-dir site

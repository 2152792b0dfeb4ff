# The two commands: `make test` and `make demo`. Each sets itself up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: test demo install lint bench clean

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: a loose range pulls a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP)
	bash tests/pg-up.sh
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest

demo: $(STAMP)
	$(BIN)/gpu-kpi demo

bench: $(STAMP)
	$(BIN)/python bench/tracker_overhead.py
	$(BIN)/python bench/callback_overhead.py

clean:
	rm -rf $(VENV) .gpu-kpi-demo .pytest_cache .mypy_cache .ruff_cache *.egg-info

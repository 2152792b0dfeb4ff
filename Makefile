# The two commands: `make test` and `make demo`. Each sets itself up on a fresh clone.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DOCS_STAMP := $(VENV)/.docs-installed
# pytest-xdist workers of `make test`: much of the suite waits (Slurm jobs to finish, servers,
# subprocesses), so two share two cores well; a test module runs whole on one worker
TEST_WORKERS ?= 2

.PHONY: test test-fast demo install lint bench gpu-check clean smoke docs

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# torch first and pinned: a loose range pulls a multi-GB CUDA build
	$(BIN)/pip install --quiet torch==2.13.0
	$(BIN)/pip install --quiet -e '.[all,dev]'
	touch $(STAMP)

install: $(STAMP)

lint: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy

test: $(STAMP)
	bash tests/pg-up.sh
	bash tests/prom-up.sh
	bash tests/slurm-up.sh
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	$(BIN)/mypy
	$(BIN)/pytest -n $(TEST_WORKERS) --dist loadfile
	# the speed guard: a 100,800-run week's steps against DuckDB, held to bench/baseline.json
	$(BIN)/python bench/smoke.py
	# a time-sliced GPU's per-process query: every 10 s at most, under 0.1% of a core per GPU
	$(BIN)/python bench/process_query.py

# the inner loop: no PostgreSQL, Chromium, Prometheus, Slurm, DDP, real trainers or end-to-end service runs;
# the whole suite is `make test`. PYTHONDONTWRITEBYTECODE= (empty): bytecode and pytest's rewritten
# test modules are cached even where the environment turns caching off (they cost ~5 s of CPU a run)
test-fast: $(STAMP)
	$(BIN)/ruff format --check .
	$(BIN)/ruff check .
	PYTHONDONTWRITEBYTECODE= GPU_KPI_TEST_FAST=1 $(BIN)/pytest -q -m "not postgres and not chromium and not prometheus and not slurm and not ddp and not slow and not trainer and not service" --ignore=tests/trainer

demo: $(STAMP)
	$(BIN)/gpu-kpi demo

bench: $(STAMP)
	$(BIN)/python bench/tracker_overhead.py
	$(BIN)/python bench/callback_overhead.py
	$(BIN)/python bench/store_writes.py

# MkDocs Material into the project venv on first use (the `docs` extra; not in `all`)
$(DOCS_STAMP): $(STAMP)
	$(BIN)/pip install --quiet -e '.[docs]'
	touch $(DOCS_STAMP)

# the user docs (mkdocs.yml, docs/) into site/; --strict: a broken link or anchor fails the build.
# First docs/reading.md's picture, fresh: the demo's week page in headless Chromium (needs chromium)
docs: $(DOCS_STAMP)
	$(BIN)/python docs_tools/week_screenshot.py --out docs/img/week-page.png
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# on a machine with an NVIDIA GPU: tests/gpu, sampler cost, utilization vs nvidia-smi, MFU (< 5 min)
gpu-check: $(STAMP)
	$(BIN)/python bench/gpu_check.py

# the built wheel in fresh venvs outside the checkout ([reports] and core-only); needs pip's index
smoke:
	bash .ci/wheel-smoke

clean:
	rm -rf $(VENV) site .gpu-kpi-demo .pytest_cache .mypy_cache .ruff_cache *.egg-info

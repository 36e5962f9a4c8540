# The README's commands. Everything installs itself into .venv on first use.
PYTHON ?= python3
VENV   ?= .venv
BIN     = $(VENV)/bin

.PHONY: install demo test lint typecheck pytest docs docs-build system-deps soak bench screenshots clean

# $(call venv_with,SPEC): create $(VENV) if needed, and pip install -e SPEC into it.
define venv_with
	$(PYTHON) scripts/check_python.py
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '$(1)'
endef

# Everything: the backends' drivers, the dev tools, the docs site. It holds
# what the demo needs too. (A variable: a comma in $(call ...) splits arguments.)
EVERYTHING = .[all,dev,docs]
$(BIN)/.installed: pyproject.toml
	$(call venv_with,$(EVERYTHING))
	touch $@ $(BIN)/.installed-demo

# The demo needs tenure alone (SQLite is built in): no extra, no dev tool.
$(BIN)/.installed-demo: pyproject.toml
	$(call venv_with,.)
	touch $@

install: $(BIN)/.installed

## make demo: enqueue jobs, kill -9 a worker mid-job, watch the jobs come back (SQLite).
demo: $(BIN)/.installed-demo
	$(BIN)/python examples/demo.py

## make test: lint, format check, mypy --strict, the docs site, then the whole test suite.
test: $(BIN)/.installed system-deps lint typecheck docs-build pytest

lint: $(BIN)/.installed
	$(BIN)/ruff check src tests examples docs/hooks
	$(BIN)/ruff format --check src tests examples docs/hooks
	$(BIN)/lint-imports --no-cache  # the layers (pyproject.toml); 0.3 s, no cache folder to keep
	$(BIN)/python scripts/check_layout.py

typecheck: $(BIN)/.installed
	$(BIN)/mypy --strict src

## The suite in two passes: tests that only wait on storage and processes, two at a
## time (pytest-xdist, a file per process); then, alone, those whose figures are
## timings under faults (marked serial in tests/conftest.py).
pytest: $(BIN)/.installed
	$(BIN)/python -m pytest -n 2 --dist loadfile -m "not soak and not serial" $(PYTEST_ARGS)
	$(BIN)/python -m pytest -m "serial and not soak" $(PYTEST_ARGS)

## make docs: serve the documentation site on http://127.0.0.1:8000, rebuilt on every edit.
docs: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

## make docs-build: build it into site/ with --strict: a broken link, a page missing from the
## reference or a policy field without its docstring fails.
docs-build: $(BIN)/.installed
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

## Debian packages the backends' tests need (postgresql, redis-server), when missing.
system-deps:
	scripts/system-deps.sh

## make soak [SOAK_SECONDS=300]: long fault soaks, kept out of `make test`: the nemesis for
## SOAK_SECONDS per backend and per delivery mode, and Redis with `appendfsync everysec`
## (its loss window); prints the history checker's table of each run.
SOAK_SECONDS ?= 300
soak: $(BIN)/.installed system-deps
	TENURE_SOAK_SECONDS=$(SOAK_SECONDS) $(BIN)/python -m pytest -m soak $(PYTEST_ARGS)

## make bench [QUICK=1]: tenure and its peers on the same servers (benchmarks/run.py, which
## creates benchmarks/.venv with the pinned peers); prints the table, writes benchmarks/results/.
bench: system-deps
	$(PYTHON) benchmarks/run.py $(if $(QUICK),--quick) $(BENCH_ARGS)

## make screenshots: the dashboard's browser test, saving its pages' screenshots in docs/img/.
screenshots: $(BIN)/.installed system-deps
	TENURE_SCREENSHOTS=docs/img $(BIN)/python -m pytest tests/web/test_browser.py $(PYTEST_ARGS)

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache site

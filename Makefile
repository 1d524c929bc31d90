# Epochal: `make demo` runs the example on a local cluster, `make test` runs the whole suite.
# Everything lives in .venv; nothing is installed outside this directory.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=

.PHONY: install demo test lint docker browser torch down

install: $(STAMP)

# Re-run only when pyproject.toml changed (or the virtualenv is missing).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test,bench]'
	touch $(STAMP)

demo: install
	$(BIN)/epochal cluster up
	$(BIN)/epochal experiment create examples/digits/grid.yaml examples/digits --follow
	$(BIN)/epochal cluster status

# Lint and type checks first, so CI (`make test`) fails on them too; then the suite, which
# starts the PostgreSQL and Temporal servers it needs (tests/conftest.py).
test: lint docker browser torch
	$(BIN)/python -m pytest -q -ra -p no:cacheprovider --durations=25 $(PYTEST_ARGS)

# PyTorch (CPU) for the distributed example's tests, apart from `install` so `make demo` stays
# light.
TORCH_STAMP := $(VENV)/.torch-installed
torch: $(TORCH_STAMP)
$(TORCH_STAMP): $(STAMP)
	$(BIN)/python -m pip install --quiet -e '.[torch]'
	touch $(TORCH_STAMP)

# The Docker runtime's tests need an engine and the task image: in CI (or as root) this installs
# Debian's docker.io, starts dockerd if none answers and builds the image once (cached by content
# hash); elsewhere without an engine it says so and those tests skip.
docker: install
	$(BIN)/python -m deploy.docker_engine --build-image

# The dashboard's browser tests drive Debian's chromium through Playwright: in CI (or as root)
# this installs it when /usr/bin/chromium is missing; elsewhere it says how to.
browser: install
	$(BIN)/python -m deploy.browser --check

# ruff and mypy come with the `test` extra; mypy reads its packages and options from
# [tool.mypy] in pyproject.toml.
lint: install
	$(BIN)/ruff check .
	$(BIN)/mypy

down: install
	$(BIN)/epochal cluster down

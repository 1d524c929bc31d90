# Epochal: `make demo` runs the example on a local cluster, `make test` runs the whole suite.
# Everything lives in .venv; nothing is installed outside this directory.

PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PYTEST_ARGS ?=
# Three workers, for CI's two cores: they keep both cores 94-100 % busy through the cluster
# tests (`time` shows less: trials and servers are not its descendants). Five took longer
# (1,245 s of pytest against 1,080 s) and four missed clusters' deadlines (docs/ARCHITECTURE.md).
PYTEST_WORKERS ?= 3
# Each stage of `make test` notes its wall time here (deploy/stages.py); `test` prints them last.
ifndef EPOCHAL_STAGES_FILE
export EPOCHAL_STAGES_FILE := $(shell mktemp -u -t epochal-stages.XXXXXX)
endif
STAGE := $(PYTHON) -m deploy.stages run

.PHONY: install demo test lint docker browser torch determined down

install: $(STAMP)

# uv installs what pip would (the same releases, from the same index): 38-47 s for the venv and
# torch where pip took 77-80. It reads no pip.conf: a machine's folder of wheels named by
# PIP_FIND_LINKS is passed on. Compiled to bytecode, as pip does: trials run as another user,
# who cannot write __pycache__ here, and without it each trial compiled torch's sources anew
# (pytest took 1,219 s instead of 943).
UV := $(BIN)/uv pip install --quiet --compile-bytecode --python $(BIN)/python
export UV_LINK_MODE ?= copy
ifdef PIP_FIND_LINKS
export UV_FIND_LINKS ?= $(PIP_FIND_LINKS)
endif

# Re-run only when pyproject.toml changed (or the virtualenv is missing).
$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(STAGE) install -- $(PYTHON) -m venv $(VENV)
	test -x $(BIN)/uv || $(STAGE) install -- $(BIN)/python -m pip install --quiet 'uv>=0.9,<1'
	$(STAGE) install -- $(UV) -e '.[test,bench]'
	touch $(STAMP)

demo: install
	$(BIN)/epochal cluster up
	$(BIN)/epochal experiment create examples/digits/grid.yaml examples/digits --follow
	$(BIN)/epochal cluster status

# Lint and type checks first, so CI (`make test`) fails on them too, side by side with the rest
# of the setup, which on a fresh machine waits mostly on downloads and apt (Docker and its task
# image, Chromium, torch, Determined's venv; apt-get takes turns through a lock); then the suite,
# which starts the PostgreSQL and Temporal servers it needs (tests/conftest.py). At the end, pass
# or fail, the wall time of each stage.
SETUP := lint docker browser torch determined
test: install
	$(MAKE) --no-print-directory -j$(words $(SETUP)) --output-sync=target $(SETUP)
	$(STAGE) pytest -- $(BIN)/python -m pytest -q -ra -p no:cacheprovider --durations=25 \
		-n $(PYTEST_WORKERS) --dist loadgroup $(PYTEST_ARGS); status=$$?; $(PYTHON) -m deploy.stages report; exit $$status

# PyTorch (CPU) for the distributed example's tests, apart from `install` so `make demo` stays
# light. Only the extra's requirements (`-r pyproject.toml`), not the project again: reinstalled,
# its editable .pth file went missing for a moment, and lint-imports, alongside, found none of
# our packages.
TORCH_STAMP := $(VENV)/.torch-installed
torch: $(TORCH_STAMP)
$(TORCH_STAMP): $(STAMP)
	$(STAGE) torch -- $(UV) -r pyproject.toml --extra torch
	touch $(TORCH_STAMP)

# Determined 0.38.1's client and a task environment for its training code, in a venv apart,
# cached by content under ~/.cache/epochal (tests/determined/det_venv.py): built once per machine.
determined: install
	$(STAGE) determined -- $(BIN)/python -m tests.determined.det_venv

# The Docker runtime's tests need an engine and the task image: in CI (or as root) this installs
# Debian's docker.io, starts dockerd if none answers and builds the image once (cached by content
# hash); elsewhere without an engine it says so and those tests skip.
docker: install
	$(STAGE) docker -- $(BIN)/python -m deploy.dockerd --build-image

# The dashboard's browser tests drive Debian's chromium through Playwright: in CI (or as root)
# this installs it when /usr/bin/chromium is missing; elsewhere it says how to.
browser: install
	$(STAGE) browser -- $(BIN)/python -m deploy.browser --check

# ruff and mypy come with the `test` extra; mypy reads its packages and options from
# [tool.mypy] in pyproject.toml.
lint: install
	$(STAGE) lint -- $(BIN)/ruff check .
	$(STAGE) lint -- $(BIN)/mypy
	$(STAGE) lint -- $(BIN)/lint-imports

down: install
	$(BIN)/epochal cluster down

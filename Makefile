# Two commands for a fresh machine (README.md):
#   make run    — the app at http://127.0.0.1:8000 on an embedded PostgreSQL (no DATABASE_URL needed)
#   make test   — ruff, then the whole pytest suite
# Both create .venv when it is missing and reinstall only when pyproject.toml changed (a stamp file).

PYTHON ?= python3
VENV   := .venv
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8000

.PHONY: run demo test lint venv clean

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Jobdesk needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) -V 2>&1). Set PYTHON=python3.11 (or newer)."; exit 1; }
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# Links in alerts and in `jobdesk demo` use JOBDESK_BASE_URL; follow HOST/PORT unless it is set.
run: $(STAMP)
	JOBDESK_BASE_URL="$${JOBDESK_BASE_URL:-http://$(HOST):$(PORT)}" $(VENV)/bin/jobdesk serve --host $(HOST) --port $(PORT)

# `make demo EMAIL=you@example.com`: the demo against the app that `make run` (same HOST/PORT) serves.
demo: $(STAMP)
	@test -n "$(EMAIL)" || { echo "Usage: make demo EMAIL=you@example.com [PORT=$(PORT)]"; exit 2; }
	JOBDESK_BASE_URL="$${JOBDESK_BASE_URL:-http://$(HOST):$(PORT)}" $(VENV)/bin/jobdesk demo --email "$(EMAIL)"

test: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/pytest

lint: $(STAMP)
	$(VENV)/bin/ruff check .

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache

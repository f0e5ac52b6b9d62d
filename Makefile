# Commands for a fresh machine (README.md):
#   make run        — the app at http://127.0.0.1:8000 on an embedded PostgreSQL (no DATABASE_URL needed)
#   make test       — ruff, the format check, mypy, then the whole pytest suite (what CI runs)
#   make check      — the same checks with the fast tests only (no slow, browser or chaos tests)
#   make fmt        — format the tree and apply ruff's safe fixes
#   make typecheck  — mypy with pyproject's [tool.mypy] settings
#   make screenshots — the browser tests, then their screenshots copied into docs/screenshots
# Each creates the venv when it is missing and reinstalls only when pyproject.toml changed (a stamp file).
# VENV=path uses another virtualenv (e.g. one shared by several checkouts).

PYTHON ?= python3
VENV   ?= .venv
STAMP  := $(VENV)/.installed-stamp
HOST   ?= 127.0.0.1
PORT   ?= 8000
FAST   := not slow and not browser and not chaos

.PHONY: run demo test check compile fmt lint typecheck venv clean screenshots

$(STAMP): pyproject.toml
	@$(PYTHON) -c 'import sys; sys.exit(sys.version_info < (3, 11))' || \
		{ echo "Jobdesk needs Python 3.11 or newer; $(PYTHON) is $$($(PYTHON) -V 2>&1). Set PYTHON=python3.11 (or newer)."; exit 1; }
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/python -m pip install --quiet --upgrade pip
	$(VENV)/bin/python -m pip install --quiet -e '.[dev]'
	@touch $(STAMP)

venv: $(STAMP)

# Links in alerts and in `jobdesk demo` use JOBDESK_BASE_URL; follow HOST/PORT unless it is set.
# `jobdesk serve` exits 128 + the signal's number after a graceful stop (130 after Ctrl+C, 143 after
# SIGTERM): that is a stop asked for and carried out, so `make run` ends with 0 instead of printing
# "make: *** Error 143". Any other status (3: the stop did not take its course, 1: it failed) stays
# make's error.
# SIGTERM sent to make reaches only this recipe's shell, which would die and leave the server running
# without a parent: the shell passes it on and waits for the server's own stop. Ctrl+C reaches the
# server directly (the terminal signals the whole group), so the shell only waits then: passing that
# one on too would be a second signal, which hurries the stop. A SIGTERM to the whole group (a service
# manager, `kill -TERM -- -<pgid>`) reaches the server directly and from the shell, which cannot tell
# the two cases apart: the server counts a SIGTERM within half a second of the one before as the same
# request (app/worker/signals.py), whereas each Ctrl+C counts.
run: $(STAMP)
	@trap : INT; trap 'kill -TERM $$server 2>/dev/null' TERM; \
		JOBDESK_BASE_URL="$${JOBDESK_BASE_URL:-http://$(HOST):$(PORT)}" $(VENV)/bin/jobdesk serve --host $(HOST) --port $(PORT) & server=$$!; \
		while :; do wait $$server; status=$$?; kill -0 $$server 2>/dev/null || break; done; \
		if [ $$status -eq 130 ] || [ $$status -eq 143 ]; then echo "Jobdesk stopped."; exit 0; fi; exit $$status

# `make demo EMAIL=you@example.com`: the demo against the app that `make run` (same HOST/PORT) serves.
demo: $(STAMP)
	@test -n "$(EMAIL)" || { echo "Usage: make demo EMAIL=you@example.com [PORT=$(PORT)]"; exit 2; }
	JOBDESK_BASE_URL="$${JOBDESK_BASE_URL:-http://$(HOST):$(PORT)}" $(VENV)/bin/jobdesk demo --email "$(EMAIL)"

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: $(STAMP)
	$(VENV)/bin/mypy

fmt: $(STAMP)
	$(VENV)/bin/ruff check --fix .
	$(VENV)/bin/ruff format .

# Three pytest processes for most tests, then the timing-bound `serial` ones apart from them
# (tests/conftest.py): three of those at a time, a file each, since they mostly wait on their own worker
# and server processes rather than compete for the CPU as the others do; last, alone, the `alone` tests,
# which compare throughput measured in adjacent rounds. Three, not two, on two cores: a test spends much
# of its time waiting on PostgreSQL, a server it started or a browser, and a third process fills that
# (738 + 232 s here, against 1,140 s, partly beside other work, + 311 s with two).
# `compile` first: every server, worker and command the tests start imports the app anew, and where
# PYTHONDONTWRITEBYTECODE is set (this machine's environment sets it) Python caches nothing it compiles, so
# each process compiled the app's 218 modules from source again: 2.6 s to a server's first answer
# instead of 1.9 s here.
test: lint typecheck compile
	$(VENV)/bin/pytest -n 3 --dist loadfile -m "not serial"
	$(VENV)/bin/pytest -n 3 --dist loadfile -m "serial and not alone"
	$(VENV)/bin/pytest -m alone

check: lint typecheck compile
	$(VENV)/bin/pytest -n 3 --dist loadfile -m "$(FAST) and not serial"
	$(VENV)/bin/pytest -n 3 --dist loadfile -m "$(FAST) and serial and not alone"
	$(VENV)/bin/pytest -m "$(FAST) and alone"

compile: $(STAMP)
	$(VENV)/bin/python -m compileall -q app tests worker.py

# The browser tests write their screenshots to tests/artifacts/ only; this copies the ones docs/ shows.
screenshots: $(STAMP)
	$(VENV)/bin/pytest -n 2 --dist loadfile -m browser
	$(VENV)/bin/python docs/screenshots/refresh.py

clean:
	rm -rf .venv .pytest_cache .ruff_cache .mypy_cache

# Everything a new machine needs, in two targets:
#   make demo   set up .venv and serve the bundled demo at http://127.0.0.1:8791/
#   make test   set up .venv (test extras) and Debian's Chromium, then run every test
# For development:
#   make test-fast  every test but the browser ones (marker `browser`), no Chromium needed
#   make lint       ruff (pinned in the `test` extra; rules in pyproject.toml)
#   make bench      every script in benchmarks/, each on its small default input
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PORT    ?= 8791
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast lint setup setup-test chromium protos demo-data bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

NATIVE  := setup.py $(wildcard src/profscope/*/_*.c)

$(VENV)/.installed: pyproject.toml $(NATIVE) | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml $(NATIVE) | $(VENV)/bin/python
	$(PY) -m pip install -q -e '.[test]'
	touch $(VENV)/.installed $@

setup: $(VENV)/.installed

setup-test: $(VENV)/.installed-test chromium

# Browser tests drive Debian's Chromium through Playwright; never a downloaded browser.
chromium:
	@command -v chromium >/dev/null 2>&1 || { $(SUDO) apt-get update -q && $(SUDO) apt-get install -y -q chromium; }

demo: setup
	$(VENV)/bin/profscope serve --demo --port $(PORT)

test: setup-test
	$(PY) -m pytest

test-fast: $(VENV)/.installed-test
	$(PY) -m pytest -m "not browser"

lint: $(VENV)/.installed-test
	$(PY) -m ruff check src tests scripts benchmarks

# Regenerate src/profscope/{model,formats}/protos/*_pb2.py from protos/*.proto (pinned grpcio-tools).
protos: $(VENV)/.installed-test
	$(PY) scripts/gen_protos.py

# Regenerate the bundled demo with real JAX programs (needs a venv with jax[cpu]==0.10.2).
demo-data:
	$(PYTHON) -m venv .venv-jax && .venv-jax/bin/pip install -q 'jax[cpu]==0.10.2'
	.venv-jax/bin/python scripts/make_demo.py --out src/profscope/demo

# Each benchmark runs standalone on a small input it makes itself; ones that compare with
# XProf do so only when XPROF_PYTHON names a venv's python with xprof==2.24.2.
bench: $(VENV)/.installed-test
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) .venv-jax .pytest_cache build dist src/*.egg-info

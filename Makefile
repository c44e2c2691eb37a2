# Everything a new machine needs, in two targets:
#   make demo   set up .venv and serve the bundled demo at http://127.0.0.1:8791/
#   make test   set up .venv (test extras) and Debian's Chromium, then run every test
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PORT    ?= 8791
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test setup setup-test chromium protos demo-data bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip

$(VENV)/.installed: pyproject.toml | $(VENV)/bin/python
	$(PY) -m pip install -q -e .
	touch $@

$(VENV)/.installed-test: pyproject.toml | $(VENV)/bin/python
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

# Regenerate src/profscope/formats/protos/*_pb2.py from protos/*.proto (pinned grpcio-tools).
protos: $(VENV)/.installed-test
	$(PY) scripts/gen_protos.py

# Regenerate the bundled demo with real JAX programs (needs a venv with jax[cpu]==0.10.2).
demo-data:
	$(PYTHON) -m venv .venv-jax && .venv-jax/bin/pip install -q 'jax[cpu]==0.10.2'
	.venv-jax/bin/python scripts/make_demo.py --out src/profscope/demo

bench: setup
	$(PY) benchmarks/bench_listing.py

clean:
	rm -rf $(VENV) .venv-jax .pytest_cache build dist src/*.egg-info

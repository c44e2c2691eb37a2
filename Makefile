# Everything a new machine needs, in two targets:
#   make demo   set up .venv and serve the bundled demo at http://127.0.0.1:8791/
#   make test   set up .venv (test extras), Debian's Chromium and Node.js, the pinned downloads,
#               then run every test
# For development:
#   make test-fast  every test but the browser ones (marker `browser`) and the long ones
#                   (marker `slow`: fuzz and hostile-input campaigns, long walks); no
#                   Chromium needed. Tests that read ../shared/fixtures carry `shared`
#                   (skipped where it is missing, an error under CI): -m "not shared".
#   make lint       ruff (pinned in the `test` extra; rules in pyproject.toml)
#   make bench      every script in benchmarks/, each on its small default input
VENV    ?= .venv
PYTHON  ?= python3
PY      := $(VENV)/bin/python
PORT    ?= 8791
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)

.PHONY: demo test test-fast lint setup setup-test chromium nodejs downloads protos demo-data jax-memory-data bench clean

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

setup-test: $(VENV)/.installed-test chromium downloads

# Browser tests drive Debian's Chromium through Playwright; never a downloaded browser.
# apt waits (up to 10 min) for another process's dpkg/apt lock instead of failing: `install`
# through DPkg::Lock::Timeout; `update` (apt 2.6) does not apply it to the lists lock, so
# it is tried again every 10 s for as long.
APT := $(SUDO) apt-get -o DPkg::Lock::Timeout=600 -o Acquire::Retries=3
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  for i in $$(seq 60); do $(APT) update -q && break; \
	    [ $$i = 60 ] && exit 1; echo "apt-get update failed (another process holds apt's lock?): again in 10 s"; sleep 10; done; \
	  $(APT) install -y -q chromium; }

# Azurite (the Azure Storage emulator of tests/test_object_stores.py) runs on Node.js: Debian's
# nodejs and npm, installed as chromium is when missing.
nodejs:
	@{ command -v node && command -v npm; } >/dev/null 2>&1 || { \
	  for i in $$(seq 60); do $(APT) update -q && break; \
	    [ $$i = 60 ] && exit 1; echo "apt-get update failed (another process holds apt's lock?): again in 10 s"; sleep 10; done; \
	  $(APT) install -y -q nodejs npm; }

# What the tests need from the network, fetched here, before pytest starts (a test never
# downloads), kept in the git-ignored .cache/: XProf 2.24.2's wheel (its static files are
# the web UI that tests/test_xprof_frontend.py drives), pinned by version and sha256 in
# src/profscope/testing/xprof_frontend.py; Azurite 3.35.0 from npm (`npm ci` of the
# lockfile in src/profscope/testing/azurite_npm/; moto's S3 server is a pip package of
# the test extra).
downloads: $(VENV)/.installed-test nodejs
	PROFSCOPE_TEST_CACHE=$(CURDIR)/.cache $(PY) -m profscope.testing.xprof_frontend fetch
	PROFSCOPE_TEST_CACHE=$(CURDIR)/.cache $(PY) -m profscope.testing.azurite_emulator fetch

demo: setup
	$(VENV)/bin/profscope serve --demo --port $(PORT)

# The suite runs in PYTEST_WORKERS processes (pytest-xdist), a module's tests in one of
# them so that its module-scoped servers, jobs and browser start once; PYTEST_WORKERS=0
# runs it in this process.
PYTEST_WORKERS ?= 2
PYTEST := $(PY) -m pytest $(if $(filter 0,$(PYTEST_WORKERS)),,-n $(PYTEST_WORKERS) --dist loadscope)

test: setup-test
	$(PYTEST)

test-fast: $(VENV)/.installed-test
	$(PYTEST) -m "not slow and not browser"

lint: $(VENV)/.installed-test
	$(PY) -m ruff check src tests scripts benchmarks

# Regenerate src/profscope/{model,formats}/protos/*_pb2.py from protos/*.proto (pinned grpcio-tools).
protos: $(VENV)/.installed-test
	$(PY) scripts/gen_protos.py

# Regenerate the bundled demo with real JAX programs (needs a venv with jax[cpu]==0.10.2).
demo-data:
	$(PYTHON) -m venv .venv-jax && .venv-jax/bin/pip install -q 'jax[cpu]==0.10.2'
	.venv-jax/bin/python scripts/make_demo.py --out src/profscope/demo

# Regenerate the JAX device-memory profiles (pprof) the tests read, with the same pin.
jax-memory-data:
	$(PYTHON) -m venv .venv-jax && .venv-jax/bin/pip install -q 'jax[cpu]==0.10.2'
	rm -rf tests/data/jax_memory_profiles/mlp tests/data/jax_memory_profiles/leak
	.venv-jax/bin/python scripts/make_jax_memory_profiles.py --out tests/data/jax_memory_profiles

# Each benchmark runs standalone on a small input it makes itself; ones that compare with
# XProf do so only when XPROF_PYTHON names a venv's python with xprof==2.24.2.
bench: $(VENV)/.installed-test
	@set -e; for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b; done

clean:
	rm -rf $(VENV) .venv-jax .pytest_cache build dist src/*.egg-info

"""Shared pytest fixtures."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

#: ``shared/`` sits beside the checkout: <root>/main (this repo) and <root>/shared.
SHARED_FIXTURES = Path(__file__).resolve().parents[2] / "shared" / "fixtures"


@pytest.fixture(scope="session")
def shared_fixtures() -> Path:
    """The real-data fixtures folder, ``../shared/fixtures`` next to the checkout.

    Skips when it is missing, except under CI (``CI`` set), where that is an error.
    """
    if not SHARED_FIXTURES.is_dir():
        message = f"shared fixtures not found at {SHARED_FIXTURES}"
        if os.environ.get("CI"):
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_FIXTURES


# -- profscope fixtures ------------------------------------------------------------------

import shutil  # noqa: E402

from fastapi.testclient import TestClient  # noqa: E402

from profscope.cache.store import DiskCache  # noqa: E402
from profscope.cache.workspace import Workspace  # noqa: E402
from profscope.cli import demo_logdir as _demo_logdir  # noqa: E402
from profscope.server import create_app  # noqa: E402
from profscope.storage import LogDir  # noqa: E402

DEMO = _demo_logdir()


@pytest.fixture(scope="session")
def demo_logdir() -> Path:
    """The demo bundled in the package: real JAX profiles and an XLA dump."""
    assert DEMO.is_dir(), f"bundled demo missing at {DEMO}"
    return DEMO


@pytest.fixture(scope="session")
def demo_expected(demo_logdir) -> dict:
    """What the demo generator recorded from JAX itself (module names, memory analysis)."""
    import json

    return json.loads((demo_logdir.parent / "expected.json").read_text())


@pytest.fixture
def demo_copy(tmp_path, demo_logdir) -> Path:
    """A private copy of the demo log directory that a test may change."""
    dest = tmp_path / "logdir"
    shutil.copytree(demo_logdir, dest)
    return dest


@pytest.fixture
def make_client(tmp_path):
    """``make_client(url_or_path)`` -> a TestClient over a fresh workspace and cache."""

    def make(url, **storage_options) -> TestClient:
        cache = DiskCache(tmp_path / "cache")
        ws = Workspace(LogDir(str(url), storage_options=storage_options or None, listing_ttl=0), cache)
        return TestClient(create_app(ws))

    return make


@pytest.fixture
def demo_client(make_client, demo_logdir) -> TestClient:
    return make_client(demo_logdir)

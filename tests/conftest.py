"""Shared pytest fixtures, one family per plugin module under ``tests/fixtures/``.

Test modules import ``ARTIFACTS`` and ``profscope_server`` from here; the real-data
folder comes from the ``shared_fixtures`` fixture only.

Markers (pyproject.toml): ``browser`` (headless Chromium), ``slow`` (long campaigns and
walks: ``make test-fast`` leaves both out), ``shared`` (needs ``../shared/fixtures``:
added here to every test that uses the ``shared_fixtures`` fixture, directly, through
another fixture or through a fixture a parameter names; a test that asks for it some
other way, e.g. per case, marks those cases itself).
"""

from __future__ import annotations

import os

import pytest

from profscope.testing.local_server import profscope_server
from tests.fixtures.paths import ARTIFACTS, REPO

__all__ = ["ARTIFACTS", "profscope_server"]

pytest_plugins = [
    "tests.fixtures.shared",   # shared_fixtures: ../shared/fixtures beside the checkout
    "tests.fixtures.demo",     # demo_logdir, demo_expected, demo_copy
    "tests.fixtures.clients",  # make_client, demo_client
    "tests.fixtures.servers",  # demo_server
    "tests.fixtures.browser",  # browser, open_page
]

# Files fetched for tests by `make` before pytest starts (XProf's frontend:
# profscope.testing.xprof_frontend) are kept in the checkout's git-ignored .cache/ unless
# PROFSCOPE_TEST_CACHE says otherwise. No test downloads anything.
os.environ.setdefault("PROFSCOPE_TEST_CACHE", str(REPO / ".cache"))


def _needs_shared_fixtures(item) -> bool:
    """Whether the test asks for ``shared_fixtures``: itself or through its fixtures, or
    through a fixture a parameter names (``request.getfixturevalue(server_fixture)``)."""
    names = set(getattr(item, "fixturenames", ()))
    if "shared_fixtures" in names:
        return True
    callspec = getattr(item, "callspec", None)
    todo = [v for v in (callspec.params.values() if callspec else ()) if isinstance(v, str)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name == "shared_fixtures":
            return True
        if name in seen:
            continue
        seen.add(name)
        try:
            defs = item.session._fixturemanager.getfixturedefs(name, item) or ()
        except Exception:  # noqa: BLE001 - not a fixture's name (or another pytest's API)
            defs = ()
        for fixturedef in defs:
            todo += list(fixturedef.argnames)
    return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _needs_shared_fixtures(item):
            item.add_marker(pytest.mark.shared)

"""Shared pytest fixtures, one family per plugin module under ``tests/fixtures/``.

Test modules import ``ARTIFACTS``, ``SHARED_FIXTURES`` and ``profscope_server`` from here.
"""

from __future__ import annotations

import os

from profscope.testing.local_server import profscope_server
from tests.fixtures.paths import ARTIFACTS, REPO, SHARED_FIXTURES

__all__ = ["ARTIFACTS", "SHARED_FIXTURES", "profscope_server"]

pytest_plugins = [
    "tests.fixtures.shared",   # shared_fixtures: ../shared/fixtures beside the checkout
    "tests.fixtures.demo",     # demo_logdir, demo_expected, demo_copy
    "tests.fixtures.clients",  # make_client, demo_client
    "tests.fixtures.servers",  # demo_server
    "tests.fixtures.browser",  # browser, open_page
]

# Downloads made for tests (XProf's frontend: profscope.testing.xprof_frontend) are kept
# in the checkout's git-ignored .cache/ unless PROFSCOPE_TEST_CACHE says otherwise.
os.environ.setdefault("PROFSCOPE_TEST_CACHE", str(REPO / ".cache"))

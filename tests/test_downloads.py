"""Nothing is downloaded while the tests run (issue 30): what they need from the network
(XProf 2.24.2's wheel, for tests/test_xprof_frontend.py) is fetched by ``make`` first,
pinned by sha256, and a test only reads it from the cache folder."""

from __future__ import annotations

import re
import subprocess

import pytest

from profscope.testing import xprof_frontend
from tests.fixtures.paths import REPO


@pytest.fixture
def no_subprocess(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError(f"a test started a process to fetch something: {args[:1]}")

    monkeypatch.setattr(subprocess, "run", refuse)
    monkeypatch.setattr(subprocess, "Popen", refuse)


def test_the_frontend_is_never_downloaded_by_a_test(tmp_path, no_subprocess):
    with pytest.raises(xprof_frontend.FrontendUnavailable, match=r"make downloads"):
        xprof_frontend.xprof_static(tmp_path)


def test_a_wheel_that_is_not_the_pinned_one_is_refused_and_removed(tmp_path, no_subprocess):
    wheel = tmp_path / xprof_frontend.WHEEL_NAME
    wheel.write_bytes(b"not the wheel")
    with pytest.raises(xprof_frontend.FrontendUnavailable, match=xprof_frontend.WHEEL_SHA256):
        xprof_frontend.xprof_static(tmp_path)
    assert not wheel.exists()


def test_make_fetches_before_pytest_starts():
    """``make test`` -> setup-test -> downloads, which runs the one fetch into .cache/."""
    makefile = (REPO / "Makefile").read_text()
    rules = dict(re.findall(r"(?m)^([\w-]+):([^\n=]*)$", makefile))
    assert "downloads" in rules["setup-test"].split() and "setup-test" in rules["test"].split()
    recipe = makefile.split("\ndownloads:", 1)[1].split("\n\n", 1)[0]
    assert "PROFSCOPE_TEST_CACHE=$(CURDIR)/.cache" in recipe and "profscope.testing.xprof_frontend fetch" in recipe
    # apt waits for another process's lock instead of failing
    assert "DPkg::Lock::Timeout" in makefile

"""`make lint` as a test: ruff (pinned in the `test` extra, rules in pyproject.toml) over
everything the project ships and tests with. Ten helpers committing in parallel left an
unused import and a fixture shadowed by a parameter that no test caught (fixed beside this test)."""

from __future__ import annotations

import subprocess
import sys

from tests.fixtures.paths import REPO


def test_ruff_finds_nothing():
    res = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "scripts", "benchmarks"],
                         cwd=REPO, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-4000:] + res.stderr[-2000:]

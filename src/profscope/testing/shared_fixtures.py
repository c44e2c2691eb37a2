"""Where the real-data fixtures are when this machine has them: the folder that the test
suite's ``shared_fixtures`` fixture names (tests/fixtures/shared.py), for the helpers and
benchmarks that run outside pytest.

``$PROFSCOPE_SHARED_FIXTURES`` when set, else ``shared/fixtures`` beside the source
checkout this package runs from (``<root>/main/src/profscope/testing/`` ->
``<root>/shared/fixtures``, as an editable install has it). Nothing here knows a
machine's absolute paths.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The source checkout profscope runs from (an editable install): ``<checkout>/src/profscope``.
CHECKOUT = Path(__file__).resolve().parents[3]


def default_shared_fixtures() -> Path:
    """The folder the fixtures are looked for in, whether it exists or not."""
    env = os.environ.get("PROFSCOPE_SHARED_FIXTURES")
    return Path(env) if env else CHECKOUT.parent / "shared" / "fixtures"


def shared_fixtures_dir() -> Path | None:
    """:func:`default_shared_fixtures`, or None where it is not a folder."""
    p = default_shared_fixtures()
    return p if p.is_dir() else None

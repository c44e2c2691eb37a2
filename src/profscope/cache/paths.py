"""Where the cache lives by default: a module of its own so that ``profscope serve`` can
name the cache's (and the capture folder's) place before it imports the cache itself
(server/quick_start.py answers first)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "profscope"

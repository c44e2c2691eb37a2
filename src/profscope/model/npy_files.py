"""Reading the cache's ``.npy`` files from several threads at once.

numpy parses an ``.npy`` header with ``ast.literal_eval``. CPython 3.11's AST
conversion keeps its recursion-depth check in state every thread shares, so two threads
parsing at once can fail with ``SystemError: AST constructor recursion depth mismatch``
(python/cpython gh-106905 and the threaded programs that reported it). The server opens
index columns from many request threads at once, and it did: a 500 on a cold multi-host
run (tests/test_concurrent_requests.py). So every load takes one lock; with
``mmap_mode="r"`` reading the header is all ``np.load`` does.
"""

from __future__ import annotations

import threading

import numpy as np

from profscope.forksafe import renew_locks_after_fork


class _Loads:
    def __init__(self):
        self.lock = threading.Lock()
        renew_locks_after_fork(self, "lock")


_LOADS = _Loads()


def load(path, mmap_mode: str | None = None) -> np.ndarray:
    """``np.load(path, mmap_mode=mmap_mode)``, one at a time in this process."""
    with _LOADS.lock:
        return np.load(path, mmap_mode=mmap_mode)

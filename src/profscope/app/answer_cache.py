"""A bounded in-memory cache of whole answers, by key: the last answers kept up to a
total size, least recently used dropped first (XProf's ``trace_viewer@`` windows,
app/traces.py).

In memory rather than in the disk cache: what it saves is the server's own work of one
answer over data already on disk (the index, XProf's zoom levels), a fraction of a second,
which writing and reading a cache file (gzip, fsync, the accounting) would eat back; and
a window is asked again within a session (XProf's UI asks for the same window when it
zooms back out, or on a reload), so the answers of this process are the ones worth
keeping. Keys name the index folders the answer is made from, which are keyed by the
file's identity: a changed file is another key, never a stale answer."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Hashable, Iterator

from profscope.forksafe import renew_locks_after_fork


class AnswerCache:
    def __init__(self, max_bytes: int, max_entry: int):
        self.max_bytes = max_bytes
        self.max_entry = max_entry  # an answer over this is not kept (it would push out many)
        self._answers: OrderedDict[Hashable, bytes] = OrderedDict()
        self._size = 0
        self._lock = threading.Lock()
        renew_locks_after_fork(self, "_lock")

    def get(self, key: Hashable) -> bytes | None:
        with self._lock:
            got = self._answers.get(key)
            if got is not None:
                self._answers.move_to_end(key)
            return got

    def put(self, key: Hashable, answer: bytes) -> None:
        if len(answer) > self.max_entry:
            return
        with self._lock:
            old = self._answers.pop(key, None)
            self._size -= len(old) if old is not None else 0
            self._answers[key] = answer
            self._size += len(answer)
            while self._size > self.max_bytes:
                _, dropped = self._answers.popitem(last=False)
                self._size -= len(dropped)

    def keeping(self, key: Hashable, pieces: Iterator[bytes]) -> Iterator[bytes]:
        """``pieces`` as they come, kept under ``key`` once all came (unless too big)."""
        got: list[bytes] | None = []
        size = 0
        for piece in pieces:
            if got is not None:
                size += len(piece)
                if size <= self.max_entry:
                    got.append(piece)
                else:
                    got = None
            yield piece
        if got is not None:
            self.put(key, b"".join(got))

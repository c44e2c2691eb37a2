"""Byte streams shared by the format readers."""

from __future__ import annotations

import io
from typing import IO


class Prefixed(io.RawIOBase):
    """A read-only stream that returns ``head`` first, then the rest of ``raw``.

    Readers sniff a file's first bytes (gzip magic, ``{`` or ``[`` for JSON, a pickle's
    PROTO opcode) from streams that cannot seek back, such as a GCS object or a gzip
    stream; this puts those bytes back in front.
    """

    def __init__(self, head: bytes, raw: IO[bytes]):
        self._head = head
        self._raw = raw

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        if self._head:
            n = min(len(b), len(self._head))
            b[:n] = self._head[:n]
            self._head = self._head[n:]
            return n
        data = self._raw.read(len(b))
        n = len(data)
        b[:n] = data
        return n


def buffered(head: bytes, raw: IO[bytes], size: int = 1 << 20) -> io.BufferedReader:
    """``head`` then ``raw``, buffered (``read``, ``readline`` and ``peek`` work)."""
    return io.BufferedReader(Prefixed(head, raw), size)

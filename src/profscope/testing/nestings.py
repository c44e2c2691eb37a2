"""Degenerate nestings: Chrome traces whose events nest as no profiler writes them, at any
size, for the passes that walk a row's nesting (issue 32).

XProf's visibility rule (``RowVisibility::Depth``) scans a row's stack of kept ends for
every event; a trace whose events all nest makes that stack as deep as the trace is long,
and a pass that scans it quadratic: 633,000 identical nested events in a 97 KB gzipped
file held a server for minutes. Each shape here stresses one way a row can nest:

* ``identical``: ``n`` identical events (same start, same duration) on one thread, so
  each nests in the one before it: ``n`` deep, and every event kept at every resolution
  (each is the first at its depth). The issue's reproducer, gzipped.
* ``chain``: one deep chain of distinct events, each strictly inside the one before it
  (event ``i`` from ``i`` µs to ``2n - i`` µs): ``n`` deep.
* ``wide``: one parent holding ``n - 1`` siblings side by side (1 µs each, end to start):
  one level deep, ``n`` wide.
* ``zero``: zero-duration piles: ``n`` zero-length events at :data:`PILES` instants, so
  each pile is ``n / PILES`` events at the same time (nesting inside one another by the
  index's half-picosecond rule, ``trace_index._ends2``).

``SIZES`` are the sizes the hostile tests use (tests/test_hostile_chrome_trace.py); the
benchmark is benchmarks/bench_trace_nestings.py. The text is written in chunks, never
held whole (5 M events are about 300 MB of JSON)::

    from profscope.testing import nestings
    nestings.write(tmp / "deep.pt.trace.json", "chain", 1_000_000)
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

SHAPES = ("identical", "chain", "wide", "zero")
SIZES = (1_000_000, 5_000_000)
PILES = 10
CHUNK = 50_000  # events per piece of text

_EVENT = '{{"ph":"X","name":"{name}","pid":1,"tid":1,"ts":{ts},"dur":{dur}}}'


def _identical(n: int) -> Iterator[str]:
    one = _EVENT.format(name="op", ts=1, dur=10)
    for a in range(0, n, CHUNK):
        yield ",".join([one] * min(CHUNK, n - a))


def _chain(n: int) -> Iterator[str]:
    for a in range(0, n, CHUNK):
        yield ",".join(_EVENT.format(name="f", ts=i, dur=2 * (n - i)) for i in range(a, min(n, a + CHUNK)))


def _wide(n: int) -> Iterator[str]:
    yield _EVENT.format(name="parent", ts=0, dur=max(1, n - 1))
    for a in range(1, n, CHUNK):
        yield ",".join(_EVENT.format(name="child", ts=i - 1, dur=1) for i in range(a, min(n, a + CHUNK)))


def _zero(n: int) -> Iterator[str]:
    for a in range(0, n, CHUNK):
        yield ",".join(_EVENT.format(name="mark", ts=100 * (i % PILES), dur=0) for i in range(a, min(n, a + CHUNK)))


_MAKERS = {"identical": _identical, "chain": _chain, "wide": _wide, "zero": _zero}


def chunks(shape: str, n: int) -> Iterator[bytes]:
    """The trace's JSON text (``{"traceEvents": [...]}``) in pieces."""
    if shape not in _MAKERS:
        raise ValueError(f"unknown shape {shape!r}; shapes: {', '.join(SHAPES)}")
    yield b'{"traceEvents":['
    first = True
    for piece in _MAKERS[shape](n):
        yield piece.encode() if first else b"," + piece.encode()
        first = False
    yield b"]}"


def write(path: Path | str, shape: str, n: int, gz: bool | None = None) -> Path:
    """Write the trace of ``n`` events of ``shape`` at ``path``; gzipped when ``gz``
    (default: when the name ends in ``.gz``). Gzipped, a repeated event compresses
    ~1000:1, past the reader's bomb ratio above 256 MiB (chrome_trace.MAX_GZIP_RATIO):
    ``identical`` at 5 M events is then refused as a bomb, so the tests write it plain."""
    path = Path(path)
    if gz is None:
        gz = path.name.endswith(".gz")
    with (gzip.open(path, "wb", compresslevel=6) if gz else open(path, "wb")) as f:
        for piece in chunks(shape, n):
            f.write(piece)
    return path

"""glibc's malloc told to keep the memory a block frees, for a reader that makes and drops
the same chunk-sized temporaries thousands of times in a process that ends after it (a
conversion worker, cache/worker.py).

By default glibc hands freed memory back to the kernel (``M_TRIM_THRESHOLD``, and
``munmap`` of every chunk above ``M_MMAP_THRESHOLD``), so each of the xplane decoder's
~200 chunks of 64 Ki events asks the kernel for fresh, zeroed pages again: jax308's read
and decode (13.6 M events) took 334,000 page faults and 0.66-0.71 s of system time on
this VM, against 113,000 and 0.32-0.37 s with the freed memory kept (docs/performance.md,
issue 40). At the block's end the thresholds go back to glibc's defaults and the free
pages are trimmed, so what follows (the index build, whose peak RSS counts) starts from
what the block holds. glibc has no call to give back its *dynamic* thresholds (it raises
them as large chunks are freed), which ``mallopt`` turns off for the process: hence a
process that ends soon. Elsewhere (no glibc) the block changes nothing.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import functools
import threading

# malloc.h
M_TRIM_THRESHOLD, M_TOP_PAD, M_MMAP_THRESHOLD = -1, -2, -3
DEFAULT_THRESHOLD = 128 << 10  # both thresholds' defaults (malloc/malloc.c)

_lock = threading.Lock()
_depth = 0


@functools.cache
def _glibc():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc if hasattr(libc, "mallopt") and hasattr(libc, "malloc_trim") else None
    except OSError:
        return None


@contextlib.contextmanager
def freed_memory_kept():
    """Freed memory stays in the process for the block (nestable across threads)."""
    global _depth
    libc = _glibc()
    if libc is None:
        yield
        return
    with _lock:
        if _depth == 0:
            libc.mallopt(M_MMAP_THRESHOLD, 256 << 20)  # chunks up to 256 MiB from the heap
            libc.mallopt(M_TRIM_THRESHOLD, 1 << 30)
            libc.mallopt(M_TOP_PAD, 64 << 20)
        _depth += 1
    try:
        yield
    finally:
        with _lock:
            _depth -= 1
            if _depth == 0:
                libc.mallopt(M_MMAP_THRESHOLD, DEFAULT_THRESHOLD)
                libc.mallopt(M_TRIM_THRESHOLD, DEFAULT_THRESHOLD)
                libc.mallopt(M_TOP_PAD, 0)
                libc.malloc_trim(0)


def give_back() -> None:
    """Hand the heap's free memory back to the kernel now (``malloc_trim(0)``), unless a
    :func:`freed_memory_kept` block is running. Arrays freed between 128 KiB and 32 MiB
    stay in the heap after glibc has raised its dynamic ``M_MMAP_THRESHOLD`` (it does
    when a bigger chunk is freed) and count in RSS until the heap's top is trimmed:
    93 MB of the zoom levels' worker on jax308 once its flow pre-pass (2.4 M flow slices,
    sorts and ``np.unique`` of int64 arrays) was done, held through the walk of every
    row that sets its peak (trace_visibility.ZoomLevels._levels_native)."""
    libc = _glibc()
    if libc is None:
        return
    with _lock:
        if _depth == 0:
            libc.malloc_trim(0)

"""Python's cyclic garbage collector paused for a block, for every layer that builds
many objects at once (model/ is the layer formats/, tools/ and app/ may all import).

What pays for it: an unpickled PyTorch snapshot (millions of dicts and lists, 2.5x the
unpickling time of a 250 MB snapshot with the collector on), the steps of a long CPU
profile (44,000 step dicts of the 308 MB profile: 0.2 of the 0.54 s of user time of a
cold Steps & ops answer after its index build) and the ops table's step windows made
beside them (0.08-0.11 s). None of these objects is in a cycle, and every collection
their allocations trigger walks every object the process holds, for nothing; reference
counting still frees them (docs/performance.md).
"""

from __future__ import annotations

import contextlib
import gc


@contextlib.contextmanager
def gc_paused():
    """The collector off for the block. Nestable, across threads too: only the block
    that paused it resumes it."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()

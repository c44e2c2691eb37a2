"""State to renew in a forked child (conversions run in forked workers, cache/worker.py).

A fork copies only the thread that called it: a lock another thread held at that moment
stays locked in the child forever, and a client bound to an event-loop thread (gcsfs)
has no loop there. Objects holding such state register what to renew; the weak
reference lets them be collected as usual. And what a conversion worker's answer leaves
behind need not be freed before its ``os._exit`` (:func:`keep_until_exit`).
"""

from __future__ import annotations

import contextlib
import os
import threading
import weakref
from typing import Callable


def renew_after_fork(obj: object, renew: Callable[[object], None]) -> None:
    """Call ``renew(obj)`` in every child forked after this, while ``obj`` lives."""
    if not hasattr(os, "register_at_fork"):
        return
    ref = weakref.ref(obj)

    def after_in_child() -> None:
        o = ref()
        if o is not None:
            renew(o)

    os.register_at_fork(after_in_child=after_in_child)


def renew_locks_after_fork(obj: object, *names: str) -> None:
    """Fresh ``threading.Lock`` objects in ``obj``'s attributes ``names`` in a child."""

    def renew(o: object) -> None:
        for name in names:
            setattr(o, name, threading.Lock())

    renew_after_fork(obj, renew)


def imports_in_flight() -> list[str]:
    """Modules another thread of this process is importing at this moment.

    CPython imports a module under a per-module lock (importlib._bootstrap._module_locks:
    name → weak reference to a ``_ModuleLock`` whose ``owner`` is the importing thread's
    ident, None when free). A fork while another thread holds one leaves it held for
    ever in the child, by a thread the child does not have: the child's first import of
    that module, or of anything that module imports, never returns (issue 31: a worker
    forked while a request thread imported numpy hung until the idle watchdog, 300 s).
    Interpreters without that table answer []."""
    import importlib._bootstrap as bootstrap

    locks = getattr(bootstrap, "_module_locks", None) or {}
    me = threading.get_ident()
    busy = []
    for name, ref in list(locks.items()):
        lock = ref() if callable(ref) else None
        owner = getattr(lock, "owner", None)
        if owner is not None and owner != me:
            busy.append(name)
    return busy


def wait_for_imports(limit_s: float = 60.0) -> None:
    """Before a fork: wait (polling every few ms, ``limit_s`` at most) until no other
    thread is in the middle of an import (:func:`imports_in_flight`). An import takes
    milliseconds to a few tenths of a second (numpy), so a fork waits about that long,
    once, while the server warms up; after that every module is loaded and this returns
    at once."""
    import time

    deadline = time.monotonic() + limit_s
    while imports_in_flight() and time.monotonic() < deadline:
        time.sleep(0.002)


# What a conversion worker holds until it ends (keep_until_exit); None in any other
# process, where nothing is held.
_kept: list | None = None
# Whether this process is a conversion worker (keeping_until_exit was called): see disposable().
_disposable = False


def keeping_until_exit() -> None:
    """This process ends with ``os._exit`` right after its answer is sent (a conversion
    worker, cache/worker.py ``_child``): from now on :func:`keep_until_exit` holds what it
    is given, and :func:`disposable` is true."""
    global _kept, _disposable
    _kept = []
    _disposable = True


def disposable() -> bool:
    """Whether this process is a conversion worker, whose death is one failed conversion
    that its parent reports (cache/worker.py): a reader may then take a risk the server
    may not, such as mapping a file that a fault ends the process on if it is cut short
    under the map (formats/xplane_wire.py ``map_plane_bytes``). Nested conversions in the
    worker (:func:`not_keeping`) are in it too."""
    return _disposable


def keep_until_exit(obj: object) -> None:
    """Hold ``obj`` until the process ends, in a conversion worker; nothing elsewhere (the
    server, an in-process conversion). Freeing a conversion's objects one reference at a
    time just before the worker exits is work for nothing: the memory viewer's full
    result of compare_peers' 18.5 MB module (~3 million objects) and its page copy took
    0.040 + 0.025 CPU s to free (docs/performance.md), and ``os._exit`` returns the
    whole address space at once. Only for what would be freed as the worker answers: an
    object held earlier stays in memory through the rest of the conversion."""
    if _kept is not None:
        _kept.append(obj)


@contextlib.contextmanager
def not_keeping():
    """A conversion nested in a worker's (run inline, cache/worker.py): the worker goes on
    after it, so what it would hold (:func:`keep_until_exit`) is freed as usual: the OOM
    risk of a run of one module makes that module's memory-viewer page on its way."""
    global _kept
    was, _kept = _kept, None
    try:
        yield
    finally:
        _kept = was

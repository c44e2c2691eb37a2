"""State to renew in a forked child (conversions run in forked workers, cache/worker.py).

A fork copies only the thread that called it: a lock another thread held at that moment
stays locked in the child forever, and a client bound to an event-loop thread (gcsfs)
has no loop there. Objects holding such state register what to renew; the weak
reference lets them be collected as usual.
"""

from __future__ import annotations

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

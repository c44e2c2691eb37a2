"""XSpace profiles for the step database (formats/xplane_step_events.py) that the public
fixtures lack.

``pregrouped_cpu()``: a CPU-only profile already grouped when it was captured (as
TensorFlow's profiler writes them): every event carries its ``group_id``, each step's
root a ``step_name`` stat (``my step N``) and no ``train`` name, a worker thread's op
inside the step and an ``IteratorGetNext`` (XProf's "waiting for input") after it. XProf
2.24.2 reads it as 3 steps of 4 ms: 2.0 ms host compute, 0.3 ms input, 1.7 ms all others
(scripts/record_xprof_overview_golden.py records its answer).
"""

from __future__ import annotations

from profscope.testing.allocator_xplane import MS, US, Space, Str


def pregrouped_cpu(*, hostname: str = "pg-host") -> bytes:
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    py = host.line("python3", 1)
    worker = host.line("worker", 2)
    for s in range(3):
        t = 1 * MS + s * 5 * MS
        py.event("MyLoop", t, 4 * MS, [("group_id", s), ("step_name", Str(f"my step {s}"))])
        py.event("forward", t + 100 * US, 2 * MS, [("group_id", s)])
        worker.event("matmul_op", t + 500 * US, 1 * MS + s * 200 * US, [("group_id", s)])
        worker.event("IteratorGetNext", t + 3 * MS, 300 * US, [("group_id", s)])
    return sp.to_bytes()

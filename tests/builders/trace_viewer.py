"""Chrome traces and profile folders for the trace viewer's tests, built to order.

:func:`dense_trace` writes a trace (gzipped Chrome JSON, the Trace Event Format as
torch.profiler and Perfetto write it) far denser than the demo's: one long ``epoch``
slice spanning everything, ``block`` slices inside it, and a ``tick`` every few µs,
so a zoomed-out window holds many events per pixel; plus ``B``/``E`` pairs, instants,
a counter and metadata names on a second thread. It returns the events it wrote (as
``(name, tid, ts_us, dur_us)``) so tests can brute-force what a window must hold.
"""

from __future__ import annotations

import gzip
import json
import shutil
from pathlib import Path

PID = 7


def dense_trace(path: Path, *, ticks: int = 100_000, tick_every: float = 5.0, tick_dur: float = 1.0,
                block_every: float = 1000.0, block_dur: float = 400.0) -> list[tuple[str, int, float, float]]:
    span = ticks * tick_every
    events = [
        {"ph": "M", "name": "process_name", "pid": PID, "args": {"name": "dense"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": 1, "args": {"name": "main"}},
        {"ph": "M", "name": "thread_name", "pid": PID, "tid": 2, "args": {"name": "worker"}},
    ]
    truth: list[tuple[str, int, float, float]] = []

    def x(name, tid, ts, dur, **args):
        events.append({"ph": "X", "name": name, "pid": PID, "tid": tid, "ts": ts, "dur": dur, "args": args})
        truth.append((name, tid, ts, dur))

    x("epoch", 1, 100.0, span + 10, kind="spanning")
    b = 0
    while 100.0 + b * block_every + block_dur < span:
        x(f"block {b}", 1, 100.0 + b * block_every + 0.5, block_dur, block=b)
        b += 1
    for i in range(ticks):
        x(f"tick {i % 50}", 1, 100.0 + 1.0 + i * tick_every, tick_dur, i=i)
    # worker: B/E pairs (matched per thread), an instant, a counter
    for k in range(20):
        t0 = 100.0 + k * span / 20
        events.append({"ph": "B", "name": f"job {k}", "pid": PID, "tid": 2, "ts": t0, "args": {"k": k}})
        events.append({"ph": "E", "pid": PID, "tid": 2, "ts": t0 + span / 40, "args": {"done": True}})
        truth.append((f"job {k}", 2, t0, span / 40))
        events.append({"ph": "i", "name": "mark", "pid": PID, "tid": 2, "ts": t0 + 1, "s": "t"})
        truth.append(("mark", 2, t0 + 1, 0.0))
        events.append({"ph": "C", "name": "queue", "pid": PID, "ts": t0, "args": {"depth": k % 5}})
    data = json.dumps({"traceEvents": events, "displayTimeUnit": "ns"}).encode()
    Path(path).write_bytes(gzip.compress(data, compresslevel=1))
    return truth


def profile_session(root: Path, hosts: dict[str, Path], session: str = "2026_01_01_00_00_00") -> Path:
    """A profile run under ``root`` (a log directory) with one xplane per host, copied."""
    folder = Path(root) / "run" / "plugins" / "profile" / session
    folder.mkdir(parents=True, exist_ok=True)
    for host, src in hosts.items():
        shutil.copyfile(src, folder / f"{host}.xplane.pb")
    return folder

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


def builder_logdir(root: Path, hosts: dict[str, str]) -> Path:
    """A log directory with one run per ``profscope.testing.allocator_xplane`` scenario
    (``{scenario: host}``): ``<scenario>/plugins/profile/2026_01_01_00_00_00/<host>.xplane.pb``,
    as the goldens of XProf's answers on those scenarios were recorded."""
    from profscope.testing import allocator_xplane

    for case, host in hosts.items():
        folder = Path(root) / case / "plugins" / "profile" / "2026_01_01_00_00_00"
        folder.mkdir(parents=True)
        (folder / f"{host}.xplane.pb").write_bytes(getattr(allocator_xplane, case)())
    return Path(root)


def profile_session(root: Path, hosts: dict[str, Path], session: str = "2026_01_01_00_00_00") -> Path:
    """A profile run under ``root`` (a log directory) with one xplane per host, copied."""
    folder = Path(root) / "run" / "plugins" / "profile" / session
    folder.mkdir(parents=True, exist_ok=True)
    for host, src in hosts.items():
        shutil.copyfile(src, folder / f"{host}.xplane.pb")
    return folder


def crowded_xspace(*, seed: int = 11, hostname: str = "crowded") -> bytes:
    """A deterministic XSpace with about 640,000 events on one ``/host:CPU`` plane: more
    than XProf's 500,000-event threshold, so XProf's visibility filter applies (real
    profiles that large are not deterministic, so their goldens could not be re-made).

    Lines: ``flat`` (360k back-to-back slices, log-normal durations and gaps: rows where
    many slices share a pixel), ``nested`` (parents of ~1 ms holding ~40 children of
    ~15 µs, each holding 2 of ~3 µs), ``bursty`` (bursts of 1-ns-apart slices separated
    by long idle gaps). Encoded with numpy (seconds)."""
    import numpy as np

    from profscope.formats.protos import xplane_pb2
    from profscope.testing.allocator_xplane import Space, _Rows, _tag, _varint_bytes

    rng = np.random.default_rng(seed)
    sp = Space(hostname)
    host = sp.plane("/host:CPU", 0)
    names = [host.event_id(f"op_{i}") for i in range(24)]
    lines = []

    def line(name, line_id, start, dur):
        o = np.lexsort((-dur, start))  # XLines come sorted: by offset, longer first
        start, dur = start[o], dur[o]
        mids = np.asarray(names)[rng.integers(0, len(names), len(start))]
        ev = _Rows(len(start)).const(_tag(1, 0)).varint(mids).const(_tag(2, 0)).varint(start)
        ev.const(_tag(3, 0)).varint(dur)
        flat, _ = _Rows(len(start)).field(4, ev).flat()
        head = xplane_pb2.XLine(id=line_id, name=name, timestamp_ns=1_000_000).SerializeToString(deterministic=True)
        lines.append(head + flat.tobytes())

    n = 360_000
    dur = np.maximum(1, rng.lognormal(np.log(800_000), 1.2, n)).astype(np.int64)  # ~0.8 µs
    gap = rng.lognormal(np.log(300_000), 1.5, n).astype(np.int64)
    start = np.cumsum(dur + gap) - dur - gap
    line("flat", 1, start, dur)

    parents, kids, grand = 2_000, 40, 2
    p_start = np.arange(parents, dtype=np.int64) * 1_200_000_000
    p_dur = rng.integers(900_000_000, 1_100_000_000, parents)
    c_off = np.sort(rng.integers(0, 880_000_000, (parents, kids)), axis=1)
    c_start = (p_start[:, None] + c_off).reshape(-1)
    c_dur = rng.integers(5_000_000, 20_000_000, parents * kids)
    g_start = (c_start[:, None] + np.array([100_000, 2_500_000])).reshape(-1)
    g_dur = rng.integers(500_000, 2_300_000, parents * kids * grand)
    line("nested", 2, np.concatenate([p_start, c_start, g_start]), np.concatenate([p_dur, c_dur, g_dur]))

    bursts, per = 400, 100
    b_start = (np.arange(bursts, dtype=np.int64) * 6_000_000_000)[:, None] + np.arange(per) * 1_000
    line("bursty", 3, b_start.reshape(-1), rng.integers(1, 3_000, bursts * per))

    plane = xplane_pb2.XPlane()
    plane.CopyFrom(host.p)
    del plane.lines[:]
    out = bytearray(plane.SerializeToString(deterministic=True))
    for lb in lines:
        out += _tag(3, 2) + _varint_bytes(len(lb)) + lb
    space = _tag(1, 2) + _varint_bytes(len(out)) + bytes(out)
    return space + xplane_pb2.XSpace(hostnames=[hostname]).SerializeToString()


def build_index(path: Path, out: Path, *, windows: bool = True):
    """The trace index of one profile or Chrome trace as the app builds it (app/traces.py):
    events streamed to the writer, an xplane's event args read back from the file;
    ``windows=False`` leaves the resolution tiers out, as Steps & ops' build does. Returns
    the index, opened."""
    from profscope.formats import chrome_trace, xplane_trace
    from profscope.tools import trace_index

    path, out = Path(path), Path(out)
    out.mkdir(parents=True, exist_ok=True)
    xplane = path.name.endswith((".xplane.pb", ".xplane.pb.gz"))
    writer = trace_index.IndexWriter(out, source=str(path) if path.name.endswith(".xplane.pb") else None)
    try:
        with open(path, "rb") as f:
            events = xplane_trace.read_trace(f, str(path), 0, "host", sink=writer) if xplane \
                else chrome_trace.trace_columns(f, str(path), sink=writer)
    finally:
        writer.close()
    writer.finish(events, windows=windows)
    return trace_index.TraceIndex(out, decoder=xplane_trace)

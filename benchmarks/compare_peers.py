#!/usr/bin/env python3
"""profscope against XProf 2.24.2 and xprof-rs 0.1.3, cold, same inputs: time and peak RSS.

The proof of issue 15: one table, one row per request, each tool run cold (a fresh
process, a fresh cache folder, a fresh copy of the log directory) and the tools
interleaved per row (profscope, XProf, xprof-rs, then again for ``--repeat`` in an order
rotated by one each time), the median reported, with the ratios profscope/xprof-rs and
profscope/XProf in wall and in CPU seconds, and issue 40's targets with the distance to
each (``TARGETS``).

How each tool is driven:

* profscope: a child of this interpreter (``--worker MODE LOGDIR CACHE``) builds a
  ``Workspace`` as ``profscope serve`` does (conversions in forked workers) and times one
  request: ``trace_viewer@`` (XProf's JSON, resolution 8000, what
  ``/data/plugin/profile/data?tag=trace_viewer@`` streams), ``memory_profile``,
  ``oom_risk``, or a snapshot's first chart (overview + whole-trace timeline, what
  ``bench_torch_snapshot.py`` measures). The trace worker also times 10 later windows (1 %
  of the span each, 8000 px, JSON-encoded) on the index it built.
* XProf: a child of the peers venv's python times
  ``xprof.convert.raw_to_tool_data.xspace_to_tool_data([path], tool, params)`` with the
  params its ``profile_plugin.py`` passes (trace: ``trace_viewer_options.resolution=8000``).
* xprof-rs: its server (``xprof-rs --logdir DIR --port N``, binds 127.0.0.1) is spawned
  and the time is spawn to the full answer of the same ``data?...`` request; it preloads
  sessions itself, so the time to the answer is what a user waits for.
* ``--http``: profscope (``profscope serve``) and XProf (its server, see below) are timed
  as xprof-rs is, spawn to the full answer of the ``data?...`` request; their times then
  include the server's start and imports.
* gs:// against local: ``bench_gcs.py --repeat 1`` (GCS emulator on loopback), its
  ``report`` line.
* Server start: spawn to the first answer of ``/data/plugin/profile/runs``. XProf's own
  server binds the wildcard address and starts a gRPC worker service on 0.0.0.0; it is
  started here bound to 127.0.0.1 and without that service (unused by a single server).

Import time of profscope and XProf is not in their times (in-process calls, like the
issue's measurements); xprof-rs's includes its start (~15 ms). CPU seconds (user +
system) are the whole process tree's: for profscope's and XProf's children, counted by
the child around the timed call (itself, the conversion workers it reaped, and those
still running read from /proc); for a server, its whole life from ``os.wait4`` (start
included, as in its time). On this shared 2-core machine they move far less than wall
time with the load. Peak RSS is each child's ``ru_maxrss`` from ``os.wait4`` (Linux
counts the reaped descendants too: profscope's conversion workers); profscope's workers'
own peak is reported apart (``worker_rss_mib``, the target "RSS ≤ 1× the file"). Every run has a ``--timeout`` (the child's process group is killed,
the cell says "timeout"); everything listens on loopback only.

The peers live in a scratch venv, never project dependencies: ``--peers-venv`` (default
``$XDG_CACHE_HOME/profscope-bench/peers``), made on first use with
``python3 -m venv DIR && DIR/bin/pip install xprof==2.24.2 xprof-rs==0.1.3``.

Inputs are made once into ``--inputs`` (default ``/tmp/profscope-bench``) and reused:
a real JAX profile (``scripts/make_big_jax_profile.py``, 44000 steps ≈ 320 MB, 7000 ≈ 50 MB),
an XSpace with 2 M allocator events (``profscope.testing.allocator_xplane.bulk_xspace``,
the file ``bench_memory_profile.py --events 2000000`` also uses), a 1 GB CUDA snapshot
(``scripts/make_big_snapshot.py``). ``--sizes small`` uses the 50 MB profile, 200 k
allocator events and a 100 MB snapshot (under a minute once they exist).

Usage::

    .venv/bin/python benchmarks/compare_peers.py --sizes small
    .venv/bin/python benchmarks/compare_peers.py --markdown /tmp/peers.md   # full: 3 min (+4 min to make inputs)
    .venv/bin/python benchmarks/compare_peers.py --only trace308,memprof308 --repeat 3
    .venv/bin/python benchmarks/compare_peers.py --skip-xprof --only snapshot
    .venv/bin/python benchmarks/compare_peers.py --http --only trace308,memprof-alloc
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pathlib
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field
from typing import Callable

REPO = pathlib.Path(__file__).resolve().parent.parent
PEERS = {"xprof": "2.24.2", "xprof-rs": "0.1.3"}
SESSION = "2026_01_01_00_00_00"  # the session folder every staged profile gets
TOOLS = ("profscope", "xprof", "xprof-rs")
HEADERS = {"profscope": "profscope", "xprof": f"XProf {PEERS['xprof']}", "xprof-rs": f"xprof-rs {PEERS['xprof-rs']}"}


# ---------------------------------------------------------------- profscope worker (child)

def cpu_now(pids=()) -> float:
    """CPU seconds (user + system) of this process, its reaped children (profscope's
    conversion workers that ended) and the live processes ``pids`` (the workers still
    running, read from /proc)."""
    import resource

    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        u = resource.getrusage(who)
        total += u.ru_utime + u.ru_stime
    for pid in list(pids):
        try:
            fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        except OSError:
            continue  # it ended meanwhile (and is then in RUSAGE_CHILDREN once reaped)
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def worker(mode: str, logdir: str, cache: str) -> dict:
    import resource

    import orjson

    from profscope.app.queries import MemoryProfileQuery, OomRiskQuery, SnapshotQuery, TraceQuery, XprofTraceQuery
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.storage import LogDir

    ws = Workspace(LogDir(logdir, listing_ttl=0), DiskCache(cache))
    run = ws.runs()[0]
    out = {}
    live = ws.cache.workers._children  # the conversion workers running now (their pids)
    cpu0 = cpu_now()
    t0 = time.perf_counter()
    first = None
    if mode == "trace":
        body = ws.trace_xprof_json(run, XprofTraceQuery(resolution=8000))
    elif mode == "trace_page":  # the page's first picture: the build's preview, else the window
        import threading

        from profscope.app import trace_preview

        query = TraceQuery(resolution=1500)
        answer = {}
        building = threading.Thread(target=lambda: answer.setdefault("w", ws.trace_window(run, query)))
        building.start()
        first = None
        while building.is_alive():
            got = trace_preview.window(ws, run, query)  # /api/trace/preview's answer
            if got.get("preview"):
                body = orjson.dumps(got)
                first = time.perf_counter() - t0
                out["cpu_s"] = cpu_now(live) - cpu0  # the index's worker is still running
                break
            time.sleep(0.02)  # ("pending": no preview yet)
        building.join()
        out["index_s"] = time.perf_counter() - t0
        out["index_cpu_s"] = cpu_now() - cpu0
        if first is None:
            first, body = out["index_s"], orjson.dumps(answer["w"])
            out["cpu_s"] = out["index_cpu_s"]
    elif mode == "memory_profile":
        body = ws.tool_data(run, ws.tool_named("memory_profile"), MemoryProfileQuery())
    elif mode == "oom_risk":
        body = ws.tool_data(run, ws.tool_named("oom_risk"), OomRiskQuery(device_memory="80GiB"))
    elif mode == "snapshot":
        body = ws.snapshot_view(run, "overview", SnapshotQuery())
        body += ws.snapshot_view(run, "timeline", SnapshotQuery())
    else:
        raise SystemExit(f"unknown worker mode {mode!r}")
    out["s"] = first if mode == "trace_page" else time.perf_counter() - t0
    if mode != "trace_page":
        out["cpu_s"] = cpu_now() - cpu0
    # the conversion workers' peak (Linux: the largest reaped child's), beside the
    # process tree's that wait4 gives the parent
    out["worker_rss_mib"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    out["bytes"] = len(body)
    if mode == "snapshot":  # the model itself: parsed in the first process, its cached columns in a later one
        t = time.perf_counter()
        ws.snapshot(run)
        out["model_s"] = time.perf_counter() - t
    if mode == "trace":  # later windows on the index just built: 1 % of the span, here and there
        out["traceEvents"] = len(orjson.loads(body)["traceEvents"])
        # (the route's whole-trace window: an index built for XProf's answer has its
        # resolution tiers made here, once, as the page's first window would)
        span = ws.trace_window(run, TraceQuery(resolution=100))["fullTimespan"][1]
        # the route's bytes: the JSON answer and the page's binary one (format=columns), alternated
        times: dict[str, list] = {"later_s": [], "later_columns_s": []}
        for k in range(10):
            start = span * (0.2 + 0.06 * k)
            q = TraceQuery(start_ms=start, end_ms=start + span / 100, resolution=8000)
            for key, answer in (("later_s", ws.trace_window_json), ("later_columns_s", ws.trace_window_columns)):
                t = time.perf_counter()
                answer(run, q)
                times[key].append(time.perf_counter() - t)
        out.update({key: statistics.median(v) for key, v in times.items()})
    return out


# ---------------------------------------------------------------- child processes

@dataclass
class Measure:
    seconds: float | None = None
    rss_mib: float | None = None
    status: str = "ok"  # ok, timeout, failed: ..., skipped
    extra: dict = field(default_factory=dict)
    cpu_s: float | None = None  # user + system CPU seconds of the process tree (see cpu_now / reap)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def spawn(cmd: list[str], log: pathlib.Path) -> subprocess.Popen:
    """``cmd`` with its output in ``log`` and a temporary folder of its own next to it:
    XProf keeps results in ``$TMPDIR`` and xprof-rs its copies in ``$XPROF_CACHE_DIR``
    (default the temporary folder), so a shared one would make the next run warm."""
    tmp = log.parent / "tmp"
    tmp.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmp), "XPROF_CACHE_DIR": str(tmp)}
    # Its own session: a timeout kills the whole group (profscope's workers included).
    with open(log, "wb") as f:
        return subprocess.Popen([str(c) for c in cmd], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, env=env)


def reap(proc: subprocess.Popen, deadline: float, stop: bool = False) -> tuple[int | None, float, float]:
    """Wait for the child until ``deadline`` (or stop it now: SIGTERM, then SIGKILL);
    returns (exit status or None on timeout, its peak RSS in MiB, its CPU seconds).
    ``wait4``'s usage counts the child and every descendant it reaped itself (profscope's
    conversion workers, waited for by its WorkerPool), not those killed with it."""
    if stop:
        _signal(proc, signal.SIGTERM)
        deadline = time.monotonic() + 10
    timed_out = False
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() > deadline:
            timed_out = not stop
            _signal(proc, signal.SIGKILL)
            pid, status, usage = os.wait4(proc.pid, 0)
            break
        time.sleep(0.02)
    _signal(proc, signal.SIGKILL)  # what the group left behind (a server's worker)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return (None if timed_out else proc.returncode), usage.ru_maxrss / 1024, usage.ru_utime + usage.ru_stime


def _signal(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


def run_child(cmd: list, scratch: pathlib.Path, timeout: float) -> Measure:
    """A child that prints one JSON line with ``s`` (the seconds it timed)."""
    log = scratch / "child.log"
    proc = spawn(cmd, log)
    code, rss, cpu = reap(proc, time.monotonic() + timeout)
    text = log.read_text(errors="replace")
    if code is None:
        return Measure(rss_mib=rss, status="timeout")
    lines = [ln for ln in text.splitlines() if ln.startswith("{")]
    if code or not lines:
        return Measure(rss_mib=rss, status=f"failed: exit {code}: {text.strip()[-300:]}")
    res = json.loads(lines[-1])
    # The child's own count around the timed call (imports and set-up left out, as its
    # time leaves them out), else the whole process's
    return Measure(res.pop("s"), rss, cpu_s=res.pop("cpu_s", cpu), extra=res)


def get(url: str, proc: subprocess.Popen, deadline: float) -> bytes:
    """``url``'s body once the server answers: retries while nothing listens yet."""
    while True:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited ({proc.returncode})")
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        try:
            with urllib.request.urlopen(url, timeout=left) as r:
                return r.read()
        except urllib.error.HTTPError:
            raise
        except (urllib.error.URLError, ConnectionError) as e:
            if isinstance(getattr(e, "reason", None), TimeoutError):
                raise TimeoutError from e
            time.sleep(0.005)


def time_server(cmd: list, port: int, path: str | list[str], scratch: pathlib.Path, timeout: float) -> Measure:
    """Spawn a server, time spawn to the full answer of ``path`` (of each path of a
    list, one after the other: the last one's body is kept), stop it."""
    t0 = time.monotonic()
    proc = spawn(cmd, scratch / "server.log")
    try:
        for one in [path] if isinstance(path, str) else path:
            body = get(f"http://127.0.0.1:{port}{one}", proc, t0 + timeout)
        took = time.monotonic() - t0
        status = "ok" if body else "failed: empty answer"
    except TimeoutError:
        took, body, status = None, b"", "timeout"
    except Exception as e:  # noqa: BLE001 - the cell says what happened
        took, body, status = None, b"", f"failed: {e}: {(scratch / 'server.log').read_text(errors='replace')[-300:]}"
    _, rss, cpu = reap(proc, 0, stop=True)
    if body[:2] == b"\x1f\x8b":  # XProf's server gzips whatever the request accepts
        body = gzip.decompress(body)
    extra = {"bytes": len(body)}
    if "trace_viewer%40" in path and body:
        extra["traceEvents"] = len(json.loads(body).get("traceEvents", []))
    # the server's whole life, its start included (as its time is): idle after the answer
    return Measure(took, rss, status, extra, cpu_s=cpu if took is not None else None)


# ---------------------------------------------------------------- inputs

@dataclass
class Input:
    path: pathlib.Path  # the file
    host: str  # the host name a profile's file gives (its name before .xplane.pb)

    @property
    def is_profile(self) -> bool:
        return self.path.name.endswith(".xplane.pb")


def jax_profile(out: pathlib.Path, steps: int) -> Input:
    found = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
    if not found:
        print(f"making {out} ({steps} steps) ...", flush=True)
        subprocess.run([sys.executable, REPO / "scripts" / "make_big_jax_profile.py", "--out", out,
                        "--steps", str(steps)], check=True, timeout=1800)
        found = sorted(out.glob("plugins/profile/*/*.xplane.pb"))
    return Input(found[-1], "bighost")


def allocator_profile(inputs: pathlib.Path, events: int) -> Input:
    # bench_memory_profile.py's file name and defaults (200 steps, 2 allocators, 4 threads).
    path = inputs / f"bulk_e{events}_s200_a2_t4.xplane.pb"
    if not path.exists():
        print(f"making {path} ...", flush=True)
        code = ("import os, sys\nfrom profscope.testing.allocator_xplane import bulk_xspace\n"
                f"data = bulk_xspace({events}, steps=200, allocators=2, threads=4)\n"
                "open(sys.argv[1] + '.tmp', 'wb').write(data)\nos.replace(sys.argv[1] + '.tmp', sys.argv[1])\n")
        subprocess.run([sys.executable, "-c", code, str(path)], check=True, timeout=1800)
    return Input(path, "bulk-host")


def snapshot(inputs: pathlib.Path, mb: int) -> Input:
    path = inputs / f"snapshot_{mb}mb.pickle"
    if not path.exists():
        print(f"making {path} ...", flush=True)
        subprocess.run([sys.executable, REPO / "scripts" / "make_big_snapshot.py", f"{path}.tmp",
                        "--target-mb", str(mb)], check=True, timeout=3600, stdout=subprocess.DEVNULL)
        os.replace(f"{path}.tmp", path)
    return Input(path, "cuda:0")


MODULE = "synthetic_big(1)"  # the module of module_profile(): its name and program id as XProf lists them


def module_profile(inputs: pathlib.Path, buffers: int, events: int) -> Input:
    """A profile whose ``/host:metadata`` plane holds one compiled module (its HloProto in
    the "Hlo Proto" stat, program_id 1: where XLA's profiler puts them), built by
    bench_memory_viewer.py's synthetic HloProto (the structure XLA writes)."""
    path = inputs / f"module{buffers}" / "bighost.xplane.pb"
    if not path.is_file():
        import importlib.util

        spec = importlib.util.spec_from_file_location("bench_memory_viewer", REPO / "benchmarks" / "bench_memory_viewer.py")
        bench = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(bench)
        from profscope.formats.protos import xplane_pb2

        space = xplane_pb2.XSpace()
        plane = space.planes.add(id=1, name="/host:metadata")
        for sid, name in ((1, "Hlo Proto"), (2, "program_id")):
            plane.stat_metadata[sid].id, plane.stat_metadata[sid].name = sid, name
        meta = plane.event_metadata[1]
        meta.id, meta.name = 1, MODULE.split("(")[0]
        meta.stats.add(metadata_id=1, bytes_value=bench.build_synthetic(buffers, events))
        meta.stats.add(metadata_id=2, int64_value=1)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(space.SerializeToString())
    return Input(path, "bighost")


INPUTS: dict[str, Callable[[pathlib.Path], Input]] = {
    "jax308": lambda d: jax_profile(d / "jax308", 44000),
    "jax50": lambda d: jax_profile(d / "jax50", 7000),
    "alloc2m": lambda d: allocator_profile(d, 2_000_000),
    "alloc200k": lambda d: allocator_profile(d, 200_000),
    "snap1000": lambda d: snapshot(d, 1000),
    "snap100": lambda d: snapshot(d, 100),
    "demo": lambda d: Input(REPO / "src" / "profscope" / "demo" / "logdir", ""),
    "module18": lambda d: module_profile(d, 70_000, 700_000),
}


INPUT_ORIGINS = {
    "jax308": "`scripts/make_big_jax_profile.py --steps 44000` (a real JAX profile, no allocator events)",
    "jax50": "the same with `--steps 7000`",
    "alloc2m": "`allocator_xplane.bulk_xspace(2_000_000)` (2 M BFC allocator events, as bench_memory_profile.py)",
    "alloc200k": "`allocator_xplane.bulk_xspace(200_000)`",
    "snap1000": "`scripts/make_big_snapshot.py --target-mb 1000`",
    "snap100": "`scripts/make_big_snapshot.py --target-mb 100`",
    "demo": "the bundled demo's transformer run",
    "module18": "one compiled module in a profile's `/host:metadata` plane: bench_memory_viewer.py's synthetic HloProto, "
                "70,000 buffers, 700,000 heap events",
}


def stage(inp: Input, scratch: pathlib.Path) -> tuple[pathlib.Path, str]:
    """A fresh log directory holding only ``inp`` (hard-linked; XProf writes its caches
    next to the xplane), and the run's name as XProf and xprof-rs list it."""
    logdir = scratch / "logdir"
    if inp.is_profile:
        session = logdir / "run" / "plugins" / "profile" / SESSION
        session.mkdir(parents=True)
        target = session / f"{inp.host}.xplane.pb"
    else:
        logdir.mkdir(parents=True)
        target = logdir / inp.path.name
    try:
        os.link(inp.path, target)
    except OSError:  # another file system
        shutil.copyfile(inp.path, target)
    return logdir, f"run/{SESSION}"


# ---------------------------------------------------------------- runners: (ctx, input, scratch) -> Measure

@dataclass
class Ctx:
    peers: pathlib.Path
    timeout: float

    @property
    def peers_python(self) -> pathlib.Path:
        return self.peers / "bin" / "python"


def ps_worker(mode: str):
    def run(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
        logdir, _ = stage(inp, scratch)
        cache = scratch / "cache"
        m = run_child([sys.executable, __file__, "--worker", mode, logdir, cache], scratch, ctx.timeout)
        m.extra["cache_bytes"] = sum(p.stat().st_size for p in cache.rglob("*") if p.is_file())
        return m
    return run


def ps_snapshot(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
    """First chart with an empty cache, then again in a new process from that cache."""
    logdir, _ = stage(inp, scratch)
    cmd = [sys.executable, __file__, "--worker", "snapshot", logdir, scratch / "cache"]
    first = run_child(cmd, scratch, ctx.timeout)
    if first.status == "ok":
        again = run_child(cmd, scratch, ctx.timeout)
        first.extra.update(reopen_s=again.seconds, reopen_rss_mib=again.rss_mib,
                           reopen_model_s=again.extra.get("model_s"))
    return first


XPROF_CALL = r"""
import json, resource, sys, time
from xprof.convert import raw_to_tool_data as r
def cpu():
    a, b = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return a.ru_utime + a.ru_stime + b.ru_utime + b.ru_stime
params = json.loads(sys.argv[3])
c, t = cpu(), time.perf_counter()
data, _ = r.xspace_to_tool_data([sys.argv[1]], sys.argv[2], params)
s, c = time.perf_counter() - t, cpu() - c
if not data:
    sys.exit("XProf returned no data")
out = {"s": s, "cpu_s": c, "bytes": len(data)}
if sys.argv[2] == "trace_viewer@":
    out["traceEvents"] = len(json.loads(data)["traceEvents"])
print(json.dumps(out))
"""

# XProf's server, but on loopback only: its _get_wildcard_address binds "::"/0.0.0.0 and
# start_server starts a gRPC worker service on 0.0.0.0:grpc_port (for distributed
# conversion, which one server does not need).
XPROF_SERVER = r"""
import sys
from xprof import server
from xprof.convert import _pywrap_profiler_plugin
server._get_wildcard_address = lambda port: "127.0.0.1"
_pywrap_profiler_plugin.start_grpc_server = lambda *a, **k: None
server.start_server(logdir=sys.argv[1], port=int(sys.argv[2]), grpc_port=int(sys.argv[3]),
                    worker_service_address="127.0.0.1:" + sys.argv[3])
"""


def xprof_call(tool: str):
    def run(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
        logdir, _ = stage(inp, scratch)
        path = next(logdir.rglob("*.xplane.pb"))
        params: dict = {"hosts": [inp.host], "memory_space": "0"}
        if tool == "trace_viewer@":
            params["trace_viewer_options"] = {"resolution": 8000, "full_dma": False}
        return run_child([ctx.peers_python, "-c", XPROF_CALL, path, tool, json.dumps(params)], scratch, ctx.timeout)
    return run


def server_cmd(tool: str, ctx: Ctx, logdir: pathlib.Path, port: int, scratch: pathlib.Path) -> list:
    if tool == "profscope":
        return [sys.executable, "-m", "profscope", "serve", logdir, "--port", str(port), "--cache-dir", scratch / "cache"]
    if tool == "xprof":
        return [ctx.peers_python, "-c", XPROF_SERVER, logdir, str(port), str(free_port())]
    return [ctx.peers / "bin" / "xprof-rs", "--logdir", logdir, "--port", str(port)]


def http_data(tool: str, tag: str, **params: str):
    """Spawn ``tool``'s server on a fresh copy, time to the full answer of XProf's
    ``data?run=..&tag=..&host=..`` (xprof-rs always; profscope and XProf with --http)."""
    def run(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
        logdir, run_name = stage(inp, scratch)
        port = free_port()
        q = {"run": run_name, "tag": tag, "host": inp.host, **params}
        if tag == "trace_viewer@":
            q["resolution"] = "8000"
        path = "/data/plugin/profile/data?" + urllib.parse.urlencode(q)
        m = time_server(server_cmd(tool, ctx, logdir, port, scratch), port, path, scratch, ctx.timeout)
        if tool == "profscope":
            m.extra["cache_bytes"] = sum(p.stat().st_size for p in (scratch / "cache").rglob("*") if p.is_file())
        return m
    return run


def http_memory_viewer(tool: str):
    """Spawn ``tool``'s server, time to the answers of what its page asks for a module,
    one after the other: the module list, then the memory viewer's data (profscope's
    page: ``/api/module_peaks`` and ``view=page``; XProf's frontend, which xprof-rs
    serves: ``module_list`` and the full payload)."""
    def run(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
        logdir, run_name = stage(inp, scratch)
        port = free_port()
        data = {"run": run_name, "tag": "memory_viewer", "host": inp.host, "module_name": MODULE, "memory_space": "0"}
        if tool == "profscope":
            paths = [f"/api/module_peaks?{urllib.parse.urlencode({'run': run_name, 'memory_space': '0'})}",
                     f"/data/plugin/profile/data?{urllib.parse.urlencode({**data, 'view': 'page'})}"]
        else:
            paths = [f"/data/plugin/profile/module_list?{urllib.parse.urlencode({'run': run_name, 'tag': 'memory_viewer', 'host': inp.host})}",
                     f"/data/plugin/profile/data?{urllib.parse.urlencode(data)}"]
        return time_server(server_cmd(tool, ctx, logdir, port, scratch), port, paths, scratch, ctx.timeout)
    return run


def _server_cpu(pid: int) -> float:
    """A server's CPU seconds so far, its reaped workers' included (proc(5) stat 14-17)."""
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in f[11:15]) / os.sysconf("SC_CLK_TCK")


def _x_events(body: bytes) -> list:
    """An answer's complete events as (name, tid, ts ns, dur ns), sorted: what XProf's
    filter picked, comparable between tools (each writes µs floats its own way)."""
    return sorted((e["name"], e["tid"], round(e["ts"] * 1e3), round(e["dur"] * 1e3))
                  for e in json.loads(body)["traceEvents"] if e.get("ph") == "X")


def http_later_windows(tool: str):
    """Spawn ``tool``'s server, ask XProf's ``trace_viewer@`` for the whole trace at 8000 px
    (not timed: the conversion, the first window row's), then time ten later windows (1 % of
    the span, here and there, at 8000 px, as XProf's frontend asks when zoomed in), each
    asked once and at once again (a window asked again: an answer cache's case). The
    server's CPU over the ten is kept, and each answer's events, to compare the tools'."""
    def run(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
        logdir, run_name = stage(inp, scratch)
        port = free_port()
        q = {"run": run_name, "tag": "trace_viewer@", "host": inp.host, "resolution": "8000"}
        url = f"http://127.0.0.1:{port}/data/plugin/profile/data?"
        t0 = time.monotonic()
        proc = spawn(server_cmd(tool, ctx, logdir, port, scratch), scratch / "server.log")
        try:
            lo, hi = json.loads(get(url + urllib.parse.urlencode(q), proc, t0 + ctx.timeout))["fullTimespan"]
            fresh, again, events = [], [], []
            cpu0 = _server_cpu(proc.pid)
            for k in range(10):
                s = lo + (hi - lo) * (0.2 + 0.06 * k)
                one = url + urllib.parse.urlencode({**q, "start_time_ms": repr(s), "end_time_ms": repr(s + (hi - lo) / 100)})
                t = time.monotonic()
                body = get(one, proc, t + ctx.timeout)
                fresh.append(time.monotonic() - t)
                t = time.monotonic()
                get(one, proc, t + ctx.timeout)
                again.append(time.monotonic() - t)
                events.append(_x_events(body))
            cpu = _server_cpu(proc.pid) - cpu0
            status = "ok"
        except TimeoutError:
            status = "timeout"
        except Exception as e:  # noqa: BLE001 - the cell says what happened
            status = f"failed: {e}: {(scratch / 'server.log').read_text(errors='replace')[-300:]}"
        _, rss, _ = reap(proc, 0, stop=True)
        if status != "ok":
            return Measure(rss_mib=rss, status=status)
        # jax308's activity ends near the middle of its span: the later windows there hold
        # one event each, so the median over the ten also mixes empty windows in; "busy"
        # is the median over the windows of at least 1,000 events alone
        busy = [t for t, ev in zip(fresh, events) if len(ev) >= 1000] or fresh
        return Measure(statistics.median(fresh), rss, extra={"again_s": statistics.median(again), "first_later_s": fresh[0],
                                                             "busy_s": statistics.median(busy), "busy_windows": len(busy),
                                                             "events": events,
                                                             "traceEvents": sum(map(len, events))}, cpu_s=cpu / 10)
    return run


RUNS_PATH = "/data/plugin/profile/runs"


def http_start(tool: str):
    """Spawn to the first answer of a cheap route (the run list)."""
    def run(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
        logdir, _ = stage(inp, scratch)
        port = free_port()
        return time_server(server_cmd(tool, ctx, logdir, port, scratch), port, RUNS_PATH, scratch, ctx.timeout)
    return run


def ps_gcs(ctx: Ctx, inp: Input, scratch: pathlib.Path) -> Measure:
    """bench_gcs.py's cold ``report`` over the emulator (gs://) and on local disk."""
    log = scratch / "gcs.log"
    proc = spawn([sys.executable, REPO / "benchmarks" / "bench_gcs.py", "--repeat", "1"], log)
    code, rss, _ = reap(proc, time.monotonic() + ctx.timeout)
    text = log.read_text(errors="replace")
    rows = [ln.split() for ln in text.splitlines() if ln.startswith("report")]
    if code is None:
        return Measure(rss_mib=rss, status="timeout")
    if code or not rows:
        return Measure(rss_mib=rss, status=f"failed: exit {code}: {text.strip()[-300:]}")
    local, remote = float(rows[0][1]), float(rows[0][2])
    return Measure(remote, None, extra={"local_s": local})


# ---------------------------------------------------------------- the rows

@dataclass
class Row:
    key: str
    name: str
    input: str  # a key of INPUTS
    runners: dict[str, Callable]  # tool -> runner; a tool without one gets "–"
    derived: list[tuple[str, str]] = field(default_factory=list)  # (row name, profscope extra key): more rows


def rows_for(sizes: str, http: bool) -> list[Row]:
    big, alloc, snap = ("jax308", "alloc2m", "snap1000") if sizes == "full" else ("jax50", "alloc200k", "snap100")

    def tools(tag: str, mode: str) -> dict[str, Callable]:
        if http:
            return {t: http_data(t, tag) for t in TOOLS}
        return {"profscope": ps_worker(mode), "xprof": xprof_call(tag), "xprof-rs": http_data("xprof-rs", tag)}

    trace, memprof = tools("trace_viewer@", "trace"), tools("memory_profile", "memory_profile")
    oom = {"profscope": http_data("profscope", "oom_risk", device_memory="80GiB") if http else ps_worker("oom_risk")}
    start = {t: http_start(t) for t in TOOLS}
    rows = [Row("trace308" if sizes == "full" else "trace", "trace viewer first window, res 8000", big, trace,
                [("later window (warm), 1 % of the span, median of 10", "later_s"),
                 ("the same, the page's binary columns (format=columns)", "later_columns_s")])]
    if not http:  # xprof-rs again beside it: its first window is what a user of it waits for
        rows.append(Row("page308" if sizes == "full" else "page", "trace viewer page, first picture (preview), 1500 px",
                        big, {"profscope": ps_worker("trace_page"), "xprof-rs": http_data("xprof-rs", "trace_viewer@")},
                        [("trace viewer page, full index ready", "index_s")]))
    if sizes == "full" and not http:
        rows.append(Row("xwin308", "XProf JSON later window, 1 % of the span, res 8000 (median of 10)", big,
                        {t: http_later_windows(t) for t in TOOLS if t != "xprof"},
                        [("the same, windows of 1,000 events or more only (median)", "busy_s"),
                         ("the same window asked again, median of 10", "again_s")]))
    if sizes == "full":
        rows.append(Row("trace50", "trace viewer first window, res 8000", "jax50", trace))
    rows += [
        Row("memviewer", "memory viewer, 18 MB module (list + view)", "module18",
            {t: http_memory_viewer(t) for t in TOOLS if t != "xprof"}),
        Row("memprof308" if sizes == "full" else "memprof", "memory profile, no allocator events", big, memprof),
        Row("memprof-alloc", "memory profile, allocator events", alloc, memprof),
        Row("oom308" if sizes == "full" else "oom", "OOM risk, no allocator events", big,
            oom),
        Row("oom-alloc", "OOM risk, allocator events", alloc, oom),
        Row("snapshot", "CUDA snapshot, first chart", snap, {"profscope": ps_snapshot},
            [("CUDA snapshot, reopen: first chart from the cache", "reopen_s"),
             ("CUDA snapshot, reopen: model from its cached columns", "reopen_model_s")]),
        Row("gcs", "report over gs:// (emulator), 0.67 MB demo profile", "demo", {"profscope": ps_gcs}),
        Row("start", "server start to first answer (runs)", "jax50", start),
    ]
    return rows


# ---------------------------------------------------------------- table

def fmt_s(s: float | None) -> str:
    if s is None:
        return "–"
    return f"{s * 1000:.1f} ms" if s < 0.1 else f"{s:.2f} s" if s < 10 else f"{s:.1f} s"


def cell(ms: list[Measure]) -> tuple[str, float | None, float | None]:
    """The median of a tool's runs as a table cell, the median seconds and CPU seconds."""
    if not ms:
        return "–", None, None
    ok = [m for m in ms if m.status == "ok"]
    if not ok:
        return ms[0].status.split(":")[0], None, None
    s = statistics.median(m.seconds for m in ok)
    cpus = [m.cpu_s for m in ok if m.cpu_s is not None]
    cpu = statistics.median(cpus) if cpus else None
    rss = [m.rss_mib for m in ok if m.rss_mib is not None]
    text = fmt_s(s) + (f" (CPU {fmt_s(cpu)})" if cpu is not None else "") + \
        (f", {statistics.median(rss):,.0f} MiB" if rss else "")
    return text + (f" ({len(ok)}/{len(ms)} ok)" if len(ok) < len(ms) else ""), s, cpu


def ratio(a: float | None, b: float | None) -> str:
    if not (a and b):
        return "–"
    return f"{a / b:.2f}×" if a / b >= 0.1 else f"{a / b:.1g}×"


def ratios(a: tuple[float | None, float | None], b: tuple[float | None, float | None]) -> str:
    """Wall and CPU ratios of two cells."""
    wall, cpu = ratio(a[0], b[0]), ratio(a[1], b[1])
    return wall if cpu == "–" else f"{wall} wall, {cpu} CPU"


# Issue 40's targets, per row: ("cpu_vs_rs", x): profscope's CPU seconds at most x times
# xprof-rs's; ("wall_at_most", s): profscope's time at most s seconds; ("worker_rss_vs_file",
# x): the conversion workers' peak RSS at most x times the file; ("index_vs_file", x): the
# trace index on disk at most x times the file.
TARGETS = {
    "trace308": [("cpu_vs_rs", 0.5), ("worker_rss_vs_file", 1.0), ("index_vs_file", 1.5)],
    "trace50": [("cpu_vs_rs", 0.5), ("index_vs_file", 1.5)],
    "trace": [("cpu_vs_rs", 0.5), ("worker_rss_vs_file", 1.0), ("index_vs_file", 1.5)],
    "start": [("wall_at_most", 0.1)],
    "xwin308": [("wall_vs_rs", 1.0)],
    "memviewer": [("cpu_vs_rs", 0.4)],
}


def against_targets(row: Row, inp: Input | None, ms: dict[str, list[Measure]]) -> str:
    """Each target of ``row``: the measured figure, and met / missed by how much."""
    ok = [m for m in ms.get("profscope", []) if m.status == "ok"]
    if not ok:
        return ""
    ps, rs = cell(ms.get("profscope", [])), cell(ms.get("xprof-rs", []))
    size = inp.path.stat().st_size if inp is not None and inp.path.is_file() else None
    parts = []
    for kind, bound in TARGETS.get(row.key, []):
        got = None
        if kind == "cpu_vs_rs" and ps[2] and rs[2]:
            got, what = ps[2] / rs[2], f"CPU ≤ {bound}× xprof-rs"
        elif kind == "wall_vs_rs" and ps[1] and rs[1]:
            got, what = ps[1] / rs[1], f"≤ {bound}× xprof-rs's time"
        elif kind == "wall_at_most":
            got, what = ps[1], f"≤ {fmt_s(bound)}"
        elif kind == "worker_rss_vs_file" and size and all("worker_rss_mib" in m.extra for m in ok):
            got, what = statistics.median(m.extra["worker_rss_mib"] for m in ok) * 2**20 / size, \
                f"worker RSS ≤ {bound}× the file"
        elif kind == "index_vs_file" and size and all("cache_bytes" in m.extra for m in ok):
            got, what = statistics.median(m.extra["cache_bytes"] for m in ok) / size, f"index ≤ {bound}× the file"
        if got is None:
            continue
        shown = fmt_s(got) if kind == "wall_at_most" else f"{got:.2f}×"
        verdict = "met" if got <= bound else f"missed: {got / bound:.1f}× the bound"
        parts.append(f"{what}: {shown}, {verdict}")
    return "; ".join(parts)


def note(row: Row, inp: Input | None, ms: dict[str, list[Measure]]) -> str:
    parts = []
    if inp is not None and inp.path.is_file():
        parts.append(f"file {inp.path.stat().st_size / 1e6:,.0f} MB")
    ok = [m for m in ms.get("profscope", []) if m.status == "ok"]
    if ok and "cache_bytes" in ok[0].extra and row.key.startswith("trace") and inp is not None:
        index = statistics.median(m.extra["cache_bytes"] for m in ok)
        parts.append(f"profscope cache on disk {index / 1e6:,.0f} MB = {index / inp.path.stat().st_size:.2f}× the file")
        # The same JSON format from all three (trace_viewer@ at 8000 px): a check that they did the same work.
        for what, key, scale in (("answer MB", "bytes", 1e6), ("events", "traceEvents", 1)):
            vals = [next((f"{m.extra[key] / scale:,.{1 if scale > 1 else 0}f}" for m in ms.get(t, [])
                          if m.status == "ok" and key in m.extra), "–") for t in TOOLS]
            parts.append(f"{what} {' / '.join(vals)}")
    rs = [m for m in ms.get("xprof-rs", []) if m.status == "ok"]
    if ok and rs and "events" in ok[0].extra:  # the later windows: the same events as xprof-rs (XProf's rule)?
        a, b = ok[0].extra["events"], rs[0].extra["events"]
        same = sum(x == y for x, y in zip(a, b))
        extra = sum(len(set(x) - set(y)) for x, y in zip(a, b))
        missing = sum(len(set(y) - set(x)) for x, y in zip(a, b))
        parts.append(f"events {sum(map(len, a)):,} / {sum(map(len, b)):,} (profscope / xprof-rs, 10 windows); "
                     f"{same} of {len(b)} windows the same event set ({extra:,} events only profscope's, "
                     f"{missing:,} only xprof-rs's)")
    if ok and "local_s" in ok[0].extra:
        local = statistics.median(m.extra["local_s"] for m in ok)
        gs = statistics.median(m.seconds for m in ok)
        parts.append(f"local {fmt_s(local)}: gs/local {gs / local:.2f}×")
    return "; ".join(parts)


def table(results: list[tuple[Row, Input | None, dict[str, list[Measure]]]]) -> list[list[str]]:
    out = [["request", "input", HEADERS["profscope"], HEADERS["xprof"], HEADERS["xprof-rs"],
            "profscope / xprof-rs", "profscope / XProf", "issue 40's targets", "note"]]
    for row, inp, ms in results:
        texts, secs, cpus = zip(*(cell(ms.get(t, [])) for t in TOOLS))
        out.append([row.name, row.input, *texts, ratios((secs[0], cpus[0]), (secs[2], cpus[2])),
                    ratios((secs[0], cpus[0]), (secs[1], cpus[1])), against_targets(row, inp, ms), note(row, inp, ms)])
        for name, key in row.derived:
            vals = [m.extra[key] for m in ms.get("profscope", []) if m.status == "ok" and m.extra.get(key) is not None]
            rss = [m.extra["reopen_rss_mib"] for m in ms.get("profscope", [])  # the reopening process's peak
                   if key == "reopen_model_s" and m.extra.get("reopen_rss_mib") is not None]
            if not vals:  # not measured this way (--http)
                continue
            text = fmt_s(statistics.median(vals))
            if rss:
                text += f", {statistics.median(rss):,.0f} MiB"
            rs = [m.extra[key] for m in ms.get("xprof-rs", []) if m.status == "ok" and m.extra.get(key) is not None]
            rs_text = fmt_s(statistics.median(rs)) if rs else "–"  # (xprof-rs's later windows asked again)
            out.append([name, row.input, text, "–", rs_text, ratio(statistics.median(vals), statistics.median(rs)) if rs
                        else "–", "–", "", ""])
    return out


def print_table(rows: list[list[str]]) -> None:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for k, r in enumerate(rows):
        print("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


def markdown(rows: list[list[str]], args, took: float) -> str:
    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    head = (f"Measured {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} with `benchmarks/compare_peers.py "
            f"{' '.join(sys.argv[1:])}` on {os.cpu_count()} cores, {mem:.0f} GiB; load average at the start "
            f"{args.load_at_start:.2f}; median of {args.repeat} cold run(s) per tool, interleaved; the whole run "
            f"took {took / 60:.1f} min. Cells: time (CPU seconds of the process tree), peak RSS.\n\nInputs: " + "; ".join(
                f"{k} = {v}" for k, v in INPUT_ORIGINS.items() if k in {r[1] for r in rows[1:]}) + ".\n\n")
    lines = ["| " + " | ".join(rows[0]) + " |", "|" + "---|" * len(rows[0])]
    lines += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows[1:]]
    return head + "\n".join(lines) + "\n"


# ---------------------------------------------------------------- main

def compile_profscope() -> None:
    """profscope's modules compiled to bytecode before any timing, as ``pip install``
    leaves an installed package (and the peers' venv, and every dependency): where
    ``PYTHONDONTWRITEBYTECODE`` is set (this project's machines) an editable install
    never writes its ``__pycache__``, and each spawned server compiled every profscope
    module it imports from source: the start row 0.129 against 0.081 s with them, the
    memviewer row 2.62 against 2.48 CPU s (five interleaved runs each, load 1.5;
    docs/performance.md, issue 40's third pass)."""
    import compileall

    import profscope

    compileall.compile_dir(os.path.dirname(profscope.__file__), quiet=1)


def ensure_peers(venv: pathlib.Path) -> None:
    marker = venv / ".installed"
    want = " ".join(f"{k}=={v}" for k, v in PEERS.items())
    if marker.exists() and marker.read_text().strip() == want:
        return
    print(f"setting up the peers in {venv}: {want} ...", flush=True)
    if not (venv / "bin" / "python").exists():
        subprocess.run(["python3", "-m", "venv", venv], check=True, timeout=600)
    subprocess.run([venv / "bin" / "pip", "install", "-q", *want.split()], check=True, timeout=1800)
    marker.write_text(want + "\n")


def default_peers() -> pathlib.Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return pathlib.Path(base) / "profscope-bench" / "peers"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 epilog="rows: trace308 trace50 memviewer memprof308 memprof-alloc oom308 oom-alloc "
                                        "snapshot gcs start (--sizes small: trace memviewer memprof memprof-alloc oom "
                                        "oom-alloc snapshot gcs start)")
    ap.add_argument("--sizes", choices=("full", "small"), default="full")
    ap.add_argument("--only", help="comma-separated row keys (see below); default: all")
    ap.add_argument("--repeat", type=int, default=1, help="cold runs per tool and row; the median is reported")
    ap.add_argument("--timeout", type=float, default=900, help="seconds one run may take (default 900)")
    ap.add_argument("--inputs", type=pathlib.Path, default=pathlib.Path(tempfile.gettempdir()) / "profscope-bench")
    ap.add_argument("--peers-venv", type=pathlib.Path, default=default_peers())
    ap.add_argument("--http", action="store_true",
                    help="time profscope and XProf through their servers too (spawn to the answer, as xprof-rs)")
    ap.add_argument("--skip-xprof", action="store_true")
    ap.add_argument("--skip-xprof-rs", action="store_true")
    ap.add_argument("--markdown", type=pathlib.Path, metavar="FILE", help="also write the table here (Markdown)")
    ap.add_argument("--worker", nargs=3, metavar=("MODE", "LOGDIR", "CACHE"), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        print(json.dumps(worker(*args.worker)), flush=True)
        return

    t_start = time.monotonic()
    args.load_at_start = os.getloadavg()[0]
    rows = rows_for(args.sizes, args.http)
    if args.only:
        keys = args.only.split(",")
        unknown = set(keys) - {r.key for r in rows}
        if unknown:
            ap.error(f"unknown rows {sorted(unknown)}; rows: {' '.join(r.key for r in rows)}")
        rows = [r for r in rows if r.key in keys]
    skip = {t for t, flag in (("xprof", args.skip_xprof), ("xprof-rs", args.skip_xprof_rs)) if flag}
    if {t for r in rows for t in r.runners} - {"profscope"} - skip:
        ensure_peers(args.peers_venv)
    ctx = Ctx(args.peers_venv, args.timeout)
    compile_profscope()
    args.inputs.mkdir(parents=True, exist_ok=True)
    inputs: dict[str, Input] = {}
    for key in dict.fromkeys(r.input for r in rows):  # all made before any timing
        inputs[key] = INPUTS[key](args.inputs)

    results = []
    for row in rows:
        inp = inputs[row.input]
        ms: dict[str, list[Measure]] = {}
        for rep in range(args.repeat):
            # the order rotated per repeat: whoever runs first meets a cold page cache and
            # the previous row's load, and the machine's state drifts over a row
            order = list(row.runners.items())
            order = order[rep % len(order):] + order[:rep % len(order)]
            for tool, runner in order:
                if tool in skip:
                    continue
                scratch = pathlib.Path(tempfile.mkdtemp(prefix="cmp-", dir=args.inputs))
                try:
                    m = runner(ctx, inp, scratch)
                finally:
                    shutil.rmtree(scratch, ignore_errors=True)
                ms.setdefault(tool, []).append(m)
                what = fmt_s(m.seconds) if m.status == "ok" else m.status
                what += f" (CPU {m.cpu_s:.2f} s)" if m.status == "ok" and m.cpu_s is not None else ""
                rss = f", {m.rss_mib:,.0f} MiB" if m.rss_mib is not None else ""
                shown = {k: v for k, v in m.extra.items() if k != "events"}  # (the later windows' event lists)
                print(f"  {row.key:<14} {tool:<10} #{rep + 1}: {what}{rss}"
                      f"{'  ' + json.dumps(shown) if shown else ''}", flush=True)
        results.append((row, inp if inp.path.is_file() else None, ms))

    tab = table(results)
    print()
    print_table(tab)
    took = time.monotonic() - t_start
    print(f"\n{took / 60:.1f} min in all")
    if args.markdown:
        args.markdown.write_text(markdown(tab, args, took))
        print(f"wrote {args.markdown}")


if __name__ == "__main__":
    main()

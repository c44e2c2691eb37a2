"""Feed mutants straight into profscope's readers (the formats/ and tools/ functions the
Workspace calls), one run folder per line of stdin, one JSON result per line of stdout.

Run as a script by ``profscope/testing/fuzz/driver.py`` under whichever profscope ``PYTHONPATH``
names (the current tree or an older checkout), so it imports nothing from ``profscope.testing``. It
is a separate process so that a hang can be killed and a memory blow-up bounded
(``RLIMIT_AS``) without losing the campaign. Each line of stdin is
``{"dir": <run folder>, "fmt": <format>}``; each answer lists every reader step with
``ok`` / ``4xx`` (a ProfscopeError, with its status) / ``bug`` (any other exception),
its CPU seconds (``cpu``: this process's, what the driver's hang limit counts, so that a
busy machine does not make a step slow) and wall seconds (``secs``), and the peak RSS
over the RSS before the mutant (VmHWM, reset per mutant).
"""

from __future__ import annotations

import json
import os
import resource
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path

from profscope.errors import ProfscopeError


def _status_kb(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def _reset_hwm() -> None:
    try:  # "5" resets the peak resident set size (VmHWM) to the current one
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass


def _files(d: Path, suffix: str) -> list[Path]:
    return sorted(p for p in d.rglob("*") if p.is_file() and p.name.endswith(suffix))


def steps_for(fmt: str, d: Path, tmp: Path):
    """(name, thunk) pairs: what the Workspace calls for this kind of run."""
    from profscope.formats import buffer_assignment_text as bat
    from profscope.formats import chrome_trace, hlo_proto, live_range_text, xplane
    from profscope.formats import snapshot_pickle as snap_format
    from profscope.model import snapshot as snapshot_model
    from profscope.formats import xplane_allocator, xplane_devices, xplane_module_time, xplane_trace
    from profscope.tools import memory_viewer, memory_viewer_text, trace_index
    from profscope.tools import memory_profile_torch
    from profscope.tools import memory_profile_allocator
    from profscope.tools import memory_profile_snapshot as snap_tool

    def opened(p, fn):
        def run():
            with open(p, "rb") as f:
                return fn(f, str(p))
        return run

    def index(reader, p):
        def run():
            folder = Path(tempfile.mkdtemp(dir=tmp))
            writer = trace_index.IndexWriter(folder)
            try:
                with open(p, "rb") as f:
                    events = reader(f, writer)
            finally:
                writer.close()
            writer.finish(events)
        return run

    out = []
    if fmt == "xplane":
        for p in _files(d, ".xplane.pb") + _files(d, ".xplane.pb.gz"):
            def modules(p=p):
                with open(p, "rb") as f:
                    mods = xplane.hlo_modules(f, str(p))
                for m in mods[:3]:
                    with open(p, "rb") as f:
                        data = xplane.hlo_proto_bytes(f, str(p), m.display_name)
                    if data is not None:
                        hlo = hlo_proto.parse(data, str(p))
                        memory_viewer.summary(hlo, 0)
                        memory_viewer.from_hlo(hlo, 0)
            out += [("xplane.hlo_modules+memory_viewer", modules),
                    ("xplane_trace.read_trace", index(lambda f, w, p=p: xplane_trace.read_trace(f, str(p), 0, "host", sink=w), p)),
                    ("xplane_allocator+memory_profile", opened(p, lambda f, n: memory_profile_allocator.from_allocator_events(xplane_allocator.read_allocator_events(f, n)))),
                    ("xplane_devices.device_capabilities", opened(p, xplane_devices.device_capabilities)),
                    ("xplane_module_time.module_run_times", opened(p, xplane_module_time.module_run_times))]
    elif fmt in ("trace", "memory_timeline"):
        traces = _files(d, ".json") + _files(d, ".json.gz")
        timelines = [p for p in traces if ".memory_timeline." in p.name]
        traces = [p for p in traces if p not in timelines]
        for p in traces:
            def iterate(f, n):
                for _ in chrome_trace.iter_events(f, n, {}):
                    pass
            if fmt == "trace":
                out += [("chrome_trace.iter_events", opened(p, iterate)),
                        ("chrome_trace.trace_columns", index(lambda f, w, p=p: chrome_trace.trace_columns(f, str(p), sink=w), p))]
            def memory(p=p):
                tl = None
                for t in timelines:
                    tl = chrome_trace.parse_memory_timeline(t.read_bytes(), str(t))
                with open(p, "rb") as f:
                    mem = chrome_trace.memory_events(f, str(p))
                memory_profile_torch.from_memory_events(mem, tl)
            out.append(("chrome_trace.memory_events+torch_memory" + ("+timeline" if fmt != "trace" else ""), memory))
    elif fmt == "snapshot":
        for p in _files(d, ".pickle"):
            def snapshot(p=p):
                with open(p, "rb") as f:
                    snap = snap_format.load_snapshot(f, str(p))
                folder = Path(tempfile.mkdtemp(dir=tmp))
                snapshot_model.save_model(snap, folder)
                snap = snapshot_model.load_model(folder)
                for dev in snap.devices[:2]:
                    snap_tool.overview(snap, dev)
                    snap_tool.timeline(snap, dev)
                    snap_tool.state_at(snap, dev, None)
                    snap_tool.stacks_at(snap, dev, None)
                    snap_tool.xprof_memory_profile(snap, dev, f"cuda:{dev}")
                    snap_tool.compare(snap, snap, dev, dev)
                snap_tool.stack(snap, 0)
            out.append(("torch_snapshot.load_snapshot+views", snapshot))
    elif fmt == "hlo":
        for p in _files(d, ".hlo.pb") + _files(d, ".hlo.pb.gz"):
            def hlo(p=p):
                h = hlo_proto.parse(p.read_bytes(), str(p))
                memory_viewer.summary(h, 0)
                memory_viewer.from_hlo(h, 0)
            out.append(("hlo_proto.parse+memory_viewer", hlo))
    elif fmt == "dump_text":
        bas = _files(d, "-buffer-assignment.txt")
        reports = _files(d, "-memory-usage-report.txt")
        for p in bas:
            def ba(p=p):
                parsed = bat.parse_buffer_assignment(bat.decode_dump_text(p.read_bytes(), str(p)), str(p))
                report = None
                for r in reports:
                    report = bat.parse_memory_usage_report(bat.decode_dump_text(r.read_bytes(), str(r)), str(r))
                memory_viewer_text.from_dump_text(parsed, report, "m")
            out.append(("buffer_assignment_text+memory_viewer_text", ba))
        for p in _files(d, "-live-range.txt"):
            out.append(("live_range_text.parse_live_range",
                        lambda p=p: live_range_text.parse_live_range(p.read_bytes().decode("utf-8", "replace"), str(p))))
    return out


def run_one(fmt: str, d: Path, tmp: Path) -> dict:
    results = []
    rss0 = _status_kb("VmRSS")
    _reset_hwm()
    t0, c0 = time.monotonic(), time.process_time()
    try:
        steps = steps_for(fmt, d, tmp)
    except Exception as e:  # noqa: BLE001 - an import error means the checkout lacks a reader
        return {"steps": [{"step": "import", "outcome": "bug", "exc": type(e).__name__, "msg": str(e)[:300],
                           "cpu": 0.0, "secs": 0.0}]}
    for name, fn in steps:
        t, c = time.monotonic(), time.process_time()
        rec = {"step": name}
        try:
            fn()
            rec["outcome"] = "ok"
        except ProfscopeError as e:
            rec.update(outcome="4xx", status=e.status, exc=type(e).__name__, msg=str(e.message)[:300])
        except BaseException as e:  # noqa: BLE001 - any other exception is the bug we look for
            if isinstance(e, KeyboardInterrupt):
                raise
            tb = traceback.extract_tb(e.__traceback__)
            frame = next((f for f in reversed(tb) if "profscope" in f.filename), tb[-1] if tb else None)
            where = f"{Path(frame.filename).name}:{frame.lineno} {frame.name}" if frame else ""
            rec.update(outcome="bug", exc=type(e).__name__, msg=str(e)[:300], where=where)
        rec["cpu"] = round(time.process_time() - c, 3)
        rec["secs"] = round(time.monotonic() - t, 3)
        results.append(rec)
    hwm = _status_kb("VmHWM")
    return {"steps": results, "secs": round(time.monotonic() - t0, 3), "cpu": round(time.process_time() - c0, 3),
            "rss_over_mb": round(max(0, hwm - rss0) / 1024, 1)}


def main() -> None:
    limit = int(os.environ.get("FUZZ_WORKER_AS_BYTES", str(6 << 30)))
    # Bound what one mutant may take (a 2^30 memo asks for 16 GiB): past it, MemoryError.
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    tmp = Path(tempfile.mkdtemp(prefix="fuzzw"))
    try:  # import every reader now, so that the first mutant's RSS does not count the imports
        steps_for("xplane", tmp, tmp)
    except Exception:  # noqa: BLE001 - reported per mutant by run_one
        pass
    print(json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        task = json.loads(line)
        res = run_one(task["fmt"], Path(task["dir"]), tmp)
        res["id"] = task.get("id")
        shutil.rmtree(tmp, ignore_errors=True)  # trace indexes and snapshot columns of this mutant
        tmp.mkdir()
        print(json.dumps(res), flush=True)


if __name__ == "__main__":
    main()

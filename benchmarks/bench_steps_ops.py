#!/usr/bin/env python3
"""Steps & ops (``GET /api/steps_ops``, issue 34) against the trace index build it reads
from, and XProf's own ``hlo_stats`` / ``op_profile`` conversions of the same files.

Per profile, each in a forked child of its own (so that its CPU seconds and peak memory
are its own), through the workspace the server uses (conversions in the calling process:
``WorkerPool(enabled=False)``, so the CPU seconds are all of the work):

- **index build**: a cold cache, the host's trace index only (``Workspace.trace_index``:
  what the first timeline request costs anyway);
- **cold answer**: a cold cache, ``Workspace.steps_ops`` (the index build, the op metrics'
  decode of an xplane, the breakdown and the ops table);
- **warm answer**: ``steps_ops`` again on that cache, the index built (median of
  ``--repeat``);
- **after index**: ``steps_ops`` in a new process on a cache where only the trace index
  was built for the timeline (the index build's child's cache): the step reader and the
  tables (the warm answer also has the steps cached);
- **after index + prefetch**: ``steps_ops`` in a new process on a copy of the
  timeline-built cache where the steps were made first (``Workspace.xplane_steps(...,
  load=False)`` in a child of its own, not counted: what the server's background
  prefetch after a timeline window does, app/traces.py ``_prefetch_steps``);
- **index + steps** and **after steps index**: the same two for the index as Steps & ops
  builds it (``Workspace.trace_index(..., steps=True)``: a CPU-only profile's host steps
  grouped from the build's own decode into the folder), what the issue's "from a built
  trace index" bar measures once the Summary or Steps & ops has opened the run;
- **XProf**: ``xspace_to_tool_data([copy], "hlo_stats" | "op_profile", {})`` in XProf's
  scratch environment (``--xprof-python`` or ``$XPROF_PYTHON``; left out without one),
  timed inside its process around the call (its start-up and imports not counted), on a
  fresh copy of the file (it writes side files beside what it reads).

Profiles: the public xplanes and PyTorch traces (``--fixtures``, default
``$PROFSCOPE_SHARED_FIXTURES`` or ``<repo>/../shared/fixtures``) and any log directory
given with ``--logdir`` (every host of every profile run in it: the 308 MB JAX profile of
``scripts/make_big_jax_profile.py --steps 44000``, written under /tmp, never the repo).
Prints one line per measurement and, with ``--json FILE``, all of them; never asserts.

Usage::

    .venv/bin/python benchmarks/bench_steps_ops.py --xprof-python /tmp/trace/venv-xprof/bin/python \\
        --logdir /tmp/big/jax308
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import resource
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_XPROF = r"""
import json, resource, sys, time
from xprof.convert import raw_to_tool_data as r
t, c = time.perf_counter(), time.process_time()
data = r.xspace_to_tool_data([sys.argv[1]], sys.argv[2], {})[0]
wall, cpu = time.perf_counter() - t, time.process_time() - c
print(json.dumps({"wall_s": wall, "cpu_s": cpu, "bytes": len(data or b""),
                  "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}))
"""


def _workspace(logdir: str, cache: Path):
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir

    return Workspace(LogDir(logdir, listing_ttl=0), DiskCache(cache, workers=WorkerPool(enabled=False)))


def _timed(fn) -> dict:
    t, c = time.perf_counter(), time.process_time()
    out = fn()
    return {"wall_s": time.perf_counter() - t, "cpu_s": time.process_time() - c, "out": out}


def _index_build(logdir: str, run: str, host: str, cache: Path, steps: bool = False) -> dict:
    from profscope.app.queries import TraceQuery

    ws = _workspace(logdir, cache)
    r = ws.run(run)
    name, info, _pos = ws._trace_hosts(r, TraceQuery(host=host))[0]
    got = _timed(lambda: ws.trace_index(r, name, info, steps=steps).n)
    return {"wall_s": got["wall_s"], "cpu_s": got["cpu_s"], "events": got["out"]}


def _answers(logdir: str, run: str, host: str, cache: Path, repeat: int) -> dict:
    from profscope.app.queries import TraceQuery

    ws = _workspace(logdir, cache)
    query = TraceQuery(host=host)
    cold = _timed(lambda: ws.steps_ops(ws.run(run), query))
    warm = [_timed(lambda: ws.steps_ops(ws.run(run), query)) for _ in range(repeat)]
    out = cold["out"]
    return {"wall_s": cold["wall_s"], "cpu_s": cold["cpu_s"],
            "warm_wall_s": statistics.median(w["wall_s"] for w in warm) if warm else None,
            "warm_cpu_s": statistics.median(w["cpu_s"] for w in warm) if warm else None,
            "steps": len(out.get("steps") or []), "ops": len(out.get("ops") or []),
            "step_source": (out.get("summary") or {}).get("step_source")}


def _prefetch(logdir: str, run: str, host: str, cache: Path) -> dict:
    """The steps made on a timeline-built cache, as the server's prefetch makes them."""
    ws = _workspace(logdir, cache)
    r = ws.run(run)
    return _timed(lambda: ws.xplane_steps(r, host, load=False) and None)


def _prime(mib: int) -> dict:
    """``mib`` MiB touched and let go (``--prime-mib``)."""
    import numpy as np

    np.ones(mib << 20, np.uint8)
    return {}


def _child(conn, fn, args) -> None:
    try:
        got = fn(*args)
        ru = resource.getrusage(resource.RUSAGE_SELF)  # a forked child's own, from zero
        got.update(max_rss_mib=ru.ru_maxrss / 1024, user_s=ru.ru_utime, sys_s=ru.ru_stime, minflt=ru.ru_minflt)
        conn.send(got)
    except Exception as e:  # a profile the tool refuses is a line of the table, not a crash
        conn.send({"error": f"{type(e).__name__}: {getattr(e, 'message', e)}"})
    conn.close()


def in_child(fn, *args) -> dict:
    """``fn(*args)`` in a forked child: its own CPU seconds and peak memory."""
    ctx = multiprocessing.get_context("fork")
    parent, child = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_child, args=(child, fn, args))
    p.start()
    child.close()
    got = parent.recv()
    p.join()
    return got


def xprof(python: str, path: Path, tool: str, work: Path) -> dict:
    folder = Path(tempfile.mkdtemp(dir=work))
    copy = folder / path.name
    shutil.copyfile(path, copy)
    try:
        proc = subprocess.run([python, "-c", _XPROF, str(copy), tool], capture_output=True, text=True,
                              timeout=1800, check=False)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    if proc.returncode != 0:
        return {"error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def profiles(fixtures: Path | None, logdirs: list[str]) -> list[tuple[str, str, str, Path | None, int]]:
    """(log directory, run, host, xplane path or None, file bytes) of every profile measured."""
    from profscope.app.queries import TraceQuery

    out = []
    public = fixtures / "public_profiles" if fixtures else None
    sources = ([(str(public / "xplane"), None), (str(public), "traces/")] if public else []) + [(d, None) for d in logdirs]
    for logdir, prefix in sources:
        ws = _workspace(logdir, Path(tempfile.mkdtemp()))
        for run in ws.runs():
            if prefix is not None and not run.name.startswith(prefix):
                continue
            if prefix is None and not run.hosts:
                continue
            try:
                hosts = ws._trace_hosts(run, TraceQuery(hosts=",".join(h for h, _ in ws.trace_sources(run))))
            except Exception:
                continue
            for host, info, _pos in hosts:
                path = Path(logdir) / info.path if run.hosts else None
                if run.name.startswith("tpu_inference_corrupt"):
                    continue  # XProf cannot read it; test_xprof_op_stats covers its 4xx
                out.append((logdir, run.name, host, path, info.size))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--fixtures", type=Path, default=Path(os.environ.get(
        "PROFSCOPE_SHARED_FIXTURES", str(ROOT.parent / "shared" / "fixtures"))))
    ap.add_argument("--logdir", action="append", default=[], help="another log directory (repeatable)")
    ap.add_argument("--no-fixtures", action="store_true", help="only the --logdir profiles")
    ap.add_argument("--xprof-python", default=os.environ.get("XPROF_PYTHON"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", type=Path, help="write every measurement here")
    ap.add_argument("--prime-mib", type=int, default=0, metavar="MIB",
                    help="before each timed child, a child that touches and frees this much memory, so that every "
                         "timed child starts with as much memory freed just before it (on a VM that hands freed "
                         "memory back to its host, a child's system time otherwise depends on its place in the "
                         "order: docs/performance.md); 0: none")
    args = ap.parse_args()

    def child(fn, *a) -> dict:
        if args.prime_mib:
            in_child(_prime, args.prime_mib)
        return in_child(fn, *a)

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        for k, (logdir, run, host, xplane, size) in enumerate(profiles(None if args.no_fixtures else args.fixtures, args.logdir)):
            index = child(_index_build, logdir, run, host, work / f"index{k}")
            answer = child(_answers, logdir, run, host, work / f"answer{k}", args.repeat)
            shutil.copytree(work / f"index{k}", work / f"prefetch{k}")
            after = child(_answers, logdir, run, host, work / f"index{k}", 0)
            prefetch = child(_prefetch, logdir, run, host, work / f"prefetch{k}")
            after_prefetch = child(_answers, logdir, run, host, work / f"prefetch{k}", 0) \
                if "error" not in prefetch else prefetch
            steps_index = child(_index_build, logdir, run, host, work / f"steps{k}", True)
            after_steps = child(_answers, logdir, run, host, work / f"steps{k}", 0)
            row = {"run": run, "host": host, "file_mb": size / 1e6, "index": index, "answer": answer,
                   "after_index": after, "after_prefetch": after_prefetch, "steps_index": steps_index,
                   "after_steps_index": after_steps}
            if xplane is not None and args.xprof_python:
                row["xprof"] = {tool: xprof(args.xprof_python, xplane, tool, work) for tool in ("hlo_stats", "op_profile")}
            rows.append(row)
            print(_line(row), flush=True)
            shutil.rmtree(work / f"index{k}", ignore_errors=True)
            shutil.rmtree(work / f"prefetch{k}", ignore_errors=True)
            shutil.rmtree(work / f"answer{k}", ignore_errors=True)
            shutil.rmtree(work / f"steps{k}", ignore_errors=True)
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))


def _line(row: dict) -> str:
    ix, ans = row["index"], row["answer"]
    head = f"{row['run'][:48]:48s} {row['host'][:16]:16s} {row['file_mb']:8.2f} MB"
    if "error" in ans or "error" in ix:
        return f"{head}  error: {ans.get('error') or ix.get('error')}"
    text = (f"{head}  index {ix['wall_s']:7.3f} s ({ix['cpu_s']:6.2f} CPU s, {ix['max_rss_mib']:6.0f} MiB)  "
            f"cold answer {ans['wall_s']:7.3f} s ({ans['cpu_s']:6.2f} CPU s, {ans['max_rss_mib']:6.0f} MiB) "
            f"= {ans['wall_s'] / ix['wall_s']:.2f}x  warm {ans['warm_wall_s']:6.3f} s  "
            f"[{ans['steps']} steps ({ans['step_source']}), {ans['ops']} ops]")
    after = row.get("after_index") or {}
    if "wall_s" in after:
        text += (f"  after index {after['wall_s']:7.3f} s ({after['cpu_s']:6.2f} CPU s)")
    pre = row.get("after_prefetch") or {}
    if "wall_s" in pre:
        text += (f"  after index + prefetch {pre['wall_s']:7.3f} s ({pre['cpu_s']:6.2f} CPU s)")
    six, after_steps = row.get("steps_index") or {}, row.get("after_steps_index") or {}
    if "wall_s" in six and "wall_s" in after_steps:
        text += (f"  index+steps {six['wall_s']:7.3f} s ({six['cpu_s']:6.2f} CPU s, {six['max_rss_mib']:6.0f} MiB)"
                 f"  after steps index {after_steps['wall_s']:7.3f} s ({after_steps['cpu_s']:6.2f} CPU s)")
    for name, got in (("index", ix), ("cold", ans), ("after", after), ("after+prefetch", pre), ("index+steps", six),
                      ("after steps", after_steps)):  # user + sys, fresh pages
        if "user_s" in got:
            text += f"  [{name}: {got['user_s']:.2f} + {got['sys_s']:.2f} s, {got['minflt'] / 1000:.0f} k minflt]"
    for tool, x in (row.get("xprof") or {}).items():
        text += (f"  XProf {tool} error: {x['error']}" if "error" in x else
                 f"  XProf {tool} {x['wall_s']:7.3f} s ({x['cpu_s']:6.2f} CPU s, {x['max_rss_mib']:6.0f} MiB)")
    return text


if __name__ == "__main__":
    main()

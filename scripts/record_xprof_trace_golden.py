#!/usr/bin/env python3
"""Record XProf 2.24.2's trace_viewer@ answers as golden data for the trace viewer tests.

XProf's own converter runs in a scratch virtual environment with ``xprof==2.24.2`` (never
a profscope dependency): ``--xprof-python``, or the ``XPROF_PYTHON`` environment variable.
It runs on *copies* of the profiles in a fresh temporary folder (XProf writes its SSTABLE
index and other side files next to what it reads), one process per answer::

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([xplane, ...], "trace_viewer@", params)

``params`` is what XProf's data route (``profile_plugin.py``) passes: ``{}`` (no
resolution: the whole trace, no visibility filter) or ``{"trace_viewer_options":
{"resolution": "4040", "start_time_ms": ..., "end_time_ms": ...}, "hosts": [...]}``, the
values as strings, as the route hands over its query parameters.

What is kept, compactly (gzip, mtime 0):

* ``tests/golden/trace_viewer/<demo>.json.gz`` (the demo profiles,
  ``src/profscope/demo/logdir``) and ``<scenario>.json.gz`` (scenarios of
  ``src/profscope/testing/allocator_xplane.py`` real CPU profiles lack), listed in
  ``index.json``: the top-level fields other than ``traceEvents``, the ``M`` events as
  they are, the complete (``X``) events as rows ``[name, pid, tid, ts, dur]`` (ts and dur
  in XProf's microseconds, as printed) and ``flows``: ``[row, flow, kind, cat]`` for every
  row XProf binds to a flow, ``flow`` numbering XProf's ``bind_id`` values in order of
  appearance (XProf's ids come from a per-process seeded hash and change on every run),
  ``kind`` ``"out"`` / ``"in"`` / ``"mid"`` (``flow_out``, ``flow_in``, both), ``cat`` or
  null; and ``counters``: XProf's counter (``C``) events, one per device and series,
  ``[pid, name, event_stats, entries]`` (``entries``: ``[ts, value]`` rows, ts in µs), sorted
  (XProf writes them in a hash map's order). A builder scenario with a window in
  ``BUILDER_WINDOWS`` also gets ``<scenario>_window.json.gz``, XProf's answer to that window
  (its ``params`` with the same fields). ``--cases`` records only the named builder scenarios
  and keeps the rest of ``index.json``.
* ``public_<case>.json.gz`` for every xplane of the real accelerator profiles
  (``<fixtures>/public_profiles/xplane/*/plugins/profile/*/*.xplane.pb``; ``--fixtures``,
  default ``$PROFSCOPE_SHARED_FIXTURES`` or ``<repo>/../shared/fixtures``), one case per
  file and, for a session with several hosts, one for all of them merged: ``full`` (as
  above, whole trace, no resolution; the rows as columns: ``names`` and per row ``name``
  (index into ``names``), ``pid``, ``tid``, ``ts``, ``dur``), ``resolution`` (resolution 4040, the whole span) and
  ``window`` (resolution 4040 from the 45th to the 55th percentile of the event starts),
  the
  latter two as the rows they return (indices into ``full``'s rows, ``extra`` for any
  row not there) with their params and the top-level fields that differ. A file byte-identical to an
  earlier one of its session is recorded only in the merged case. ``public_index.json`` lists the
  cases with each input's path relative to the fixtures folder and its sha256; a file
  XProf cannot read (the deliberately corrupt one) is listed with ``xprof_error`` and no
  golden.

Usage: ``XPROF_PYTHON=<venv>/bin/python .venv/bin/python scripts/record_xprof_trace_golden.py``
"""

from __future__ import annotations

import gzip
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _xprof_recorder import parse_recorder_args, recorder_parser

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
OUT = ROOT / "tests" / "golden" / "trace_viewer"
RESOLUTION = "4040"

_RUN = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
out = r.xspace_to_tool_data(sys.argv[2:], "trace_viewer@", json.loads(sys.argv[1]))
data = out[0]
if data is None:
    sys.exit("XProf returned no data")
sys.stdout.buffer.write(data if isinstance(data, bytes) else data.encode())
"""


BUILDER_CASES = ("gpu_layout", "tpu_layout", "threadpool_regions", "tf_training", "tpu_counters")
# A window asked of a scenario's answer, as XProf's data route passes it: counter samples
# are returned when inside it, bounds included.
BUILDER_WINDOWS = {"tpu_counters": {"resolution": RESOLUTION, "start_time_ms": "1.5", "end_time_ms": "2.5"}}


class XProfFailed(Exception):
    pass


def run_xprof(python: str, inputs: list[tuple[str, bytes]], params: dict) -> dict:
    """XProf's answer on copies of ``inputs`` ((file name, bytes)) in one fresh session folder."""
    with tempfile.TemporaryDirectory() as tmp:
        copies = []
        for name, data in inputs:
            copy = Path(tmp) / name
            copy.write_bytes(data)
            copies.append(str(copy))
        proc = subprocess.run([python, "-c", _RUN, json.dumps(params), *copies], capture_output=True, timeout=600,
                              check=False)
        if proc.returncode != 0:
            lines = [ln for ln in proc.stderr.decode(errors="replace").splitlines() if ln.strip()]
            raise XProfFailed(lines[-1] if lines else f"exit status {proc.returncode}")
        return json.loads(proc.stdout)


def _kind(e: dict) -> str:
    return {(True, False): "out", (False, True): "in", (True, True): "mid"}.get(
        (bool(e.get("flow_out")), bool(e.get("flow_in"))), "none")


def split(body: dict) -> dict:
    """An answer as golden: fields, M events, X rows, flows with renumbered ids."""
    events = body.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    complete, flows, numbers = [], [], {}
    for e in events:
        if e.get("ph") != "X":
            continue
        if "bind_id" in e:
            flows.append([len(complete), numbers.setdefault(e["bind_id"], len(numbers)), _kind(e), e.get("cat")])
        complete.append([e["name"], e["pid"], e["tid"], e["ts"], e["dur"]])
    counters = sorted([e["pid"], e["name"], e.get("event_stats"), e["entries"]] for e in events if e.get("ph") == "C")
    return {"fields": body, "metadata_events": meta, "complete": complete, "flows": flows, "counters": counters,
            "other_phases": sorted({e.get("ph") for e in events} - {"M", "X", "C"})}


def columns(rows: list) -> dict:
    """Rows ``[name, pid, tid, ts, dur]`` as columns, names by index into ``names``
    (a third of the size of the rows once gzipped)."""
    names = sorted({r[0] for r in rows})
    at = {n: i for i, n in enumerate(names)}
    return {"names": names, "name": [at[r[0]] for r in rows], "pid": [r[1] for r in rows],
            "tid": [r[2] for r in rows], "ts": [r[3] for r in rows], "dur": [r[4] for r in rows]}


def rows_of(body: dict, full_rows: list, full_fields: dict) -> dict:
    """A filtered answer as the rows it returns, by index into the whole trace's rows;
    of its top-level fields only those that differ from the whole trace's."""
    where: dict = {}
    for i, row in enumerate(full_rows):
        where.setdefault(tuple(row), []).append(i)
    events = body.pop("traceEvents")
    picked, extra, used = [], [], {}
    for e in events:
        if e.get("ph") != "X":
            continue
        key = (e["name"], e["pid"], e["tid"], e["ts"], e["dur"])
        cands = where.get(key, [])
        k = used.get(key, 0)
        if k < len(cands):
            picked.append(cands[k])
            used[key] = k + 1
        else:
            extra.append(list(key))
    return {"fields": {k: v for k, v in body.items() if full_fields.get(k) != v}, "events": picked, "extra": extra}


def _write(out: Path, name: str, golden: dict) -> None:
    blob = json.dumps(golden, separators=(",", ":"), sort_keys=True).encode()  # XProf's maps come in any order
    (out / name).write_bytes(gzip.compress(blob, mtime=0))


def record_demo(python: str, out: Path, cases: list[str] | None = None) -> None:
    """The demo profiles and the builder scenarios; ``cases``: only those scenarios, the
    rest of index.json kept."""
    index = {"_meta": {"xprof": "2.24.2", "call": 'xspace_to_tool_data([copy], "trace_viewer@", {})'}}
    if cases:
        index = json.loads((out / "index.json").read_text())
    for xplane in sorted(DEMO.glob("*/plugins/profile/*/*.xplane.pb")) if not cases else ():
        demo = xplane.relative_to(DEMO).parts[0]
        data = xplane.read_bytes()
        golden = split(run_xprof(python, [(xplane.name, data)], {}))
        _write(out, f"{demo}.json.gz", golden)
        index[demo] = {"input": str(xplane.relative_to(ROOT)), "input_sha256": hashlib.sha256(data).hexdigest(),
                       "golden": f"{demo}.json.gz", "complete_events": len(golden["complete"])}
        print(f"{demo}: {len(golden['complete'])} complete events, {len(golden['flows'])} flow-bound", file=sys.stderr)
    from profscope.testing import allocator_xplane

    for case in cases or BUILDER_CASES:
        data = getattr(allocator_xplane, case)()
        golden = split(run_xprof(python, [("host0.xplane.pb", data)], {}))
        _write(out, f"{case}.json.gz", golden)
        index[case] = {"input": {"builder": case}, "host": "host0", "input_sha256": hashlib.sha256(data).hexdigest(),
                       "golden": f"{case}.json.gz", "complete_events": len(golden["complete"])}
        if golden["counters"]:
            index[case]["counter_events"] = golden["fields"]["totalCounterEvents"]
        window = BUILDER_WINDOWS.get(case)
        if window:
            part = split(run_xprof(python, [("host0.xplane.pb", data)], {"trace_viewer_options": window}))
            _write(out, f"{case}_window.json.gz", {"params": window, **part})
            index[case]["window"] = {"golden": f"{case}_window.json.gz", "params": window,
                                     "complete_events": len(part["complete"]),
                                     "counter_events": part["fields"]["totalCounterEvents"]}
        print(f"{case}: {len(golden['complete'])} complete events, "
              f"{golden['fields']['totalCounterEvents']} counter events", file=sys.stderr)
    (out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


def _window(full: dict) -> dict:
    """The middle tenth of the events (from the 45th to the 55th percentile of their
    starts, ms), a window that holds events even when the middle of the span is idle."""
    a, z = full["fields"]["fullTimespan"]
    starts = sorted(r[3] / 1000 for r in full["complete"]) or [a, z]
    s, e = starts[int(0.45 * (len(starts) - 1))], starts[int(0.55 * (len(starts) - 1))]
    if e <= s:
        e = s + 0.1 * (z - a)
    return {"start_time_ms": f"{s:.6f}", "end_time_ms": f"{e:.6f}"}


def _host(path: Path) -> str:
    return path.name[: -len(".xplane.pb")]


def record_public(python: str, fixtures: Path, out: Path) -> None:
    base = fixtures / "public_profiles" / "xplane"
    index: dict = {"_meta": {"xprof": "2.24.2", "fixtures": "paths relative to the shared fixtures folder",
                             "resolution": RESOLUTION, "window": "45th to 55th percentile of the event starts"}}
    sessions: dict[Path, list[Path]] = {}
    for xplane in sorted(base.glob("*/plugins/profile/*/*.xplane.pb")):
        sessions.setdefault(xplane.parent, []).append(xplane)
    for session, files in sessions.items():
        profile = session.relative_to(base).parts[0]
        # a file byte-identical to an earlier one of its session (tf_gpu's two hosts) is
        # only recorded within the session's merged case
        seen: set[str] = set()
        singles = []
        for f in files:
            digest = hashlib.sha256(f.read_bytes()).hexdigest()
            if digest not in seen:
                seen.add(digest)
                singles.append(f)
        cases = [(f"{profile}@{_host(f)}" if len(files) > 1 else profile, [f]) for f in singles]
        if len(files) > 1:
            cases.append((f"{profile}@all", files))
        for case, group in cases:
            inputs = [(f.name, f.read_bytes()) for f in group]
            entry = {"run": f"{profile}/{session.name}", "hosts": [_host(f) for f in group],
                     "inputs": [{"path": str(f.relative_to(fixtures)), "sha256": hashlib.sha256(d).hexdigest()}
                                for f, (_, d) in zip(group, inputs)]}
            hosts = {"hosts": entry["hosts"]} if len(group) > 1 else {}
            try:
                full = split(run_xprof(python, inputs, dict(hosts)))
            except XProfFailed as e:
                entry["xprof_error"] = str(e)[:300]
                index[case] = entry
                print(f"{case}: XProf fails: {entry['xprof_error'][:120]}", file=sys.stderr)
                continue
            window = _window(full)
            golden = {"full": full}
            for part, extra in (("resolution", {}), ("window", window)):
                params = {"trace_viewer_options": {"resolution": RESOLUTION, "full_dma": False, **extra}, **hosts}
                golden[part] = {"params": {"resolution": RESOLUTION, **extra},
                                **rows_of(run_xprof(python, inputs, params), full["complete"], full["fields"])}
            full["complete"] = columns(full["complete"])
            name = "public_" + case.replace("@", "__") + ".json.gz"
            _write(out, name, golden)
            pairs = len({f[1] for f in full["flows"]})
            entry.update(golden=name, complete_events=len(full["complete"]["name"]), flows=pairs,
                         flow_bound=len(full["flows"]), resolution_events=len(golden["resolution"]["events"]),
                         window_events=len(golden["window"]["events"]), window=window)
            index[case] = entry
            print(f"{case}: {len(full['complete']['name'])} complete events, {pairs} flows; "
                  f"{len(golden['resolution']['events'])} at resolution {RESOLUTION}, "
                  f"{len(golden['window']['events'])} in the window", file=sys.stderr)
    (out / "public_index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


def main() -> None:
    ap = recorder_parser(__doc__, OUT)
    ap.add_argument("--only", choices=("demo", "public"), help="record only these goldens")
    ap.add_argument("--cases", nargs="+", choices=BUILDER_CASES, metavar="SCENARIO",
                    help="record only these builder scenarios (with --only demo), keeping the rest of index.json")
    args = parse_recorder_args(ap)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.cases and args.only != "demo":
        ap.error("--cases goes with --only demo")
    if args.only in (None, "demo"):
        record_demo(args.xprof_python, args.out, args.cases)
    if args.only in (None, "public"):
        if not (args.fixtures / "public_profiles").is_dir():
            ap.error(f"no public_profiles under {args.fixtures} (--fixtures)")
        record_public(args.xprof_python, args.fixtures, args.out)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Record XProf 2.24.2's device-plane lines (its derived lines above all) as golden data.

For every xplane of the real accelerator profiles
(``<fixtures>/public_profiles/xplane/*/plugins/profile/*/*.xplane.pb``, one file of a set
of byte-identical ones) and the scenarios of ``src/profscope/testing/derived_xplane.py``, XProf's
own converter runs on a *copy* in a fresh temporary folder (it writes side files next to
what it reads), in a scratch virtual environment with ``xprof==2.24.2`` (never a profscope
dependency: ``--xprof-python`` or ``$XPROF_PYTHON``)::

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([copy], "trace_viewer@", {})

(the whole trace, no visibility filter). Kept, per case, in
``tests/golden/trace_viewer/derived_<case>.json.gz`` (gzip mtime 0), for the device
processes only (pid not a host's ``*701``): ``threads`` ``[pid, tid, name]`` (XProf's
``thread_name`` events), ``counts`` ``[pid, tid, complete events]`` and ``derived``: the
complete events ``[name, pid, tid, ts, dur]`` (µs as XProf prints them) of the lines the
file does not hold itself (XLA Modules / XLA Ops / Framework Ops / Framework Name Scope /
Source code from GPU kernels, TPU framework ops, host offload rows, ...).
``derived_index.json`` lists the cases with their inputs and sha256.

Usage: ``XPROF_PYTHON=<venv>/bin/python .venv/bin/python scripts/record_xprof_derived_golden.py``
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
OUT = ROOT / "tests" / "golden" / "trace_viewer"
BUILDER_CASES = ("gpu_derived", "tpu_derived", "random_gpu", "random_tpu")  # the random ones with seed 0

_RUN = r"""
import sys
from xprof.convert import raw_to_tool_data as r
data = r.xspace_to_tool_data([sys.argv[1]], "trace_viewer@", {})[0]
if data is None:
    sys.exit("XProf returned no data")
sys.stdout.buffer.write(data if isinstance(data, bytes) else data.encode())
"""


def run_xprof(python: str, name: str, data: bytes) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / name
        copy.write_bytes(data)
        proc = subprocess.run([python, "-c", _RUN, str(copy)], capture_output=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"XProf failed on {name}:\n{proc.stderr.decode(errors='replace')[-2000:]}")
        return json.loads(proc.stdout)


def raw_lines(data: bytes) -> dict[int, set[str]]:
    """The line names each device plane of the file has, by XProf's device pid."""
    from profscope.formats.protos import xplane_pb2

    space = xplane_pb2.XSpace.FromString(data)
    return {1001 + p.id: {ln.display_name or ln.name for ln in p.lines}
            for p in space.planes if p.name.startswith("/device:")}


def golden(body: dict, raw: dict[int, set[str]]) -> dict:
    events = body["traceEvents"]
    device = lambda pid: pid % 1000 < 701  # noqa: E731 - host planes are 701, 702, ...
    threads = sorted([e["pid"], e["tid"], e["args"]["name"]] for e in events
                     if e.get("ph") == "M" and e["name"] == "thread_name" and device(e["pid"]))
    names = {(p, t): n for p, t, n in threads}
    counts: dict = {}
    derived = []
    for e in events:
        if e.get("ph") != "X" or not device(e["pid"]):
            continue
        key = (e["pid"], e["tid"])
        counts[key] = counts.get(key, 0) + 1
        if names.get(key) not in raw.get(e["pid"], set()):
            derived.append([e["name"], e["pid"], e["tid"], e["ts"], e["dur"]])
    return {"threads": threads, "counts": sorted([p, t, n] for (p, t), n in counts.items()), "derived": derived}


def main() -> None:
    args = parse_recorder_args(recorder_parser(__doc__, OUT))
    args.out.mkdir(parents=True, exist_ok=True)
    from profscope.testing import derived_xplane

    cases: list[tuple[str, str, bytes, dict]] = []
    seen: set[str] = set()
    base = args.fixtures / "public_profiles" / "xplane"
    for xplane in sorted(base.glob("*/plugins/profile/*/*.xplane.pb")):
        data = xplane.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest in seen:
            continue
        seen.add(digest)
        profile = xplane.relative_to(base).parts[0]
        if profile.endswith("_corrupt"):
            continue  # XProf cannot read it (tests/test_trace_golden_public.py covers it)
        host = xplane.name[: -len(".xplane.pb")]
        cases.append((profile, xplane.name, data, {"path": str(xplane.relative_to(args.fixtures)),
                                                   "run": f"{profile}/{xplane.parent.name}", "host": host}))
    for case in BUILDER_CASES:
        cases.append((case, "host0.xplane.pb", getattr(derived_xplane, case)(), {"builder": case, "host": "host0"}))
    index = {"_meta": {"xprof": "2.24.2", "call": 'xspace_to_tool_data([copy], "trace_viewer@", {})'}}
    for case, name, data, entry in cases:
        g = golden(run_xprof(args.xprof_python, name, data), raw_lines(data))
        out = f"derived_{case}.json.gz"
        (args.out / out).write_bytes(gzip.compress(json.dumps(g, separators=(",", ":")).encode(), mtime=0))
        index[case] = {**entry, "sha256": hashlib.sha256(data).hexdigest(), "golden": out,
                       "derived_events": len(g["derived"])}
        print(f"{case}: {len(g['derived'])} derived events on {len(g['threads'])} device threads", file=sys.stderr)
    (args.out / "derived_index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

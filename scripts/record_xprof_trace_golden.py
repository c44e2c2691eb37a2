#!/usr/bin/env python3
"""Record XProf 2.24.2's trace_viewer@ answers on the demo profiles as golden data.

For each demo xplane (``src/profscope/demo/logdir/*/plugins/profile/*/*.xplane.pb``)
XProf's own converter runs in a scratch virtual environment (``--xprof-python``, default
``/work/venvs/xprof/bin/python`` with ``xprof==2.24.2``; never a profscope dependency)
on a *copy* of the profile in a fresh temporary folder (XProf writes its SSTABLE index
next to what it reads), one process per profile::

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([xplane], "trace_viewer@", {})

With no window and no resolution XProf answers the whole trace. What is kept, compactly
(``tests/golden/trace_viewer/<demo>.json.gz``, gzip mtime 0): the top-level fields other
than ``traceEvents``, the ``M`` events as they are, and the complete (``X``) events as rows
``[name, pid, tid, ts, dur]`` (ts and dur in XProf's microseconds, as printed).
``index.json`` lists the cases with the input's sha256.

Besides the demo profiles, a few scenarios of ``tests/builders/allocator_xplane.py`` that
real CPU profiles lack are recorded the same way (``<scenario>.json.gz``, input
``{"builder": <scenario>}``): GPU and TPU plane layouts (device planes, stream lines,
plane ids), threadpool regions, and a TF training profile with allocator events.

Usage: ``.venv/bin/python scripts/record_xprof_trace_golden.py``
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
OUT = ROOT / "tests" / "golden" / "trace_viewer"

_RUN = r"""
import sys
from xprof.convert import raw_to_tool_data as r
out = r.xspace_to_tool_data([sys.argv[1]], "trace_viewer@", {})
data = out[0]
sys.stdout.buffer.write(data if isinstance(data, bytes) else data.encode())
"""


BUILDER_CASES = ("gpu_layout", "tpu_layout", "threadpool_regions", "tf_training")


def record(xplane: Path | None, python: str, data: bytes | None = None, name: str = "host0.xplane.pb") -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / (xplane.name if xplane is not None else name)
        if xplane is not None:
            shutil.copyfile(xplane, copy)
        else:
            copy.write_bytes(data)
        proc = subprocess.run([python, "-c", _RUN, str(copy)], capture_output=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"XProf failed on {xplane}:\n{proc.stderr.decode()[-2000:]}")
        body = json.loads(proc.stdout)
    events = body.pop("traceEvents")
    meta = [e for e in events if e.get("ph") == "M"]
    complete = [[e["name"], e["pid"], e["tid"], e["ts"], e["dur"]] for e in events if e.get("ph") == "X"]
    return {"fields": body, "metadata_events": meta, "complete": complete,
            "other_phases": sorted({e.get("ph") for e in events} - {"M", "X"})}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--xprof-python", default="/work/venvs/xprof/bin/python")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    index = {"_meta": {"xprof": "2.24.2", "call": 'xspace_to_tool_data([copy], "trace_viewer@", {})'}}
    for xplane in sorted(DEMO.glob("*/plugins/profile/*/*.xplane.pb")):
        demo = xplane.relative_to(DEMO).parts[0]
        golden = record(xplane, args.xprof_python)
        name = f"{demo}.json.gz"
        blob = json.dumps(golden, separators=(",", ":")).encode()
        (args.out / name).write_bytes(gzip.compress(blob, mtime=0))
        index[demo] = {"input": str(xplane.relative_to(ROOT)), "input_sha256": hashlib.sha256(xplane.read_bytes()).hexdigest(),
                       "golden": name, "complete_events": len(golden["complete"])}
        print(f"{demo}: {len(golden['complete'])} complete events", file=sys.stderr)
    sys.path.insert(0, str(ROOT))
    from tests.builders import allocator_xplane

    for case in BUILDER_CASES:
        data = getattr(allocator_xplane, case)()
        golden = record(None, args.xprof_python, data, "host0.xplane.pb")
        name = f"{case}.json.gz"
        blob = json.dumps(golden, separators=(",", ":")).encode()
        (args.out / name).write_bytes(gzip.compress(blob, mtime=0))
        index[case] = {"input": {"builder": case}, "host": "host0", "input_sha256": hashlib.sha256(data).hexdigest(),
                       "golden": name, "complete_events": len(golden["complete"])}
        print(f"{case}: {len(golden['complete'])} complete events", file=sys.stderr)
    (args.out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Record which events XProf 2.24.2's visibility filter returns on a trace big enough to
be filtered (at least 500,000 events), as golden data for tests/test_trace_visibility.py.

The input is ``profscope.testing.timelines.crowded_xspace()`` (deterministic: its sha256
is kept with the golden). XProf's converter runs in a scratch virtual environment
(``--xprof-python``, or the ``XPROF_PYTHON`` environment variable; never a profscope
dependency) on a copy in a temporary folder, with the options its data route passes
(``trace_viewer_options``: ``resolution``, ``start_time_ms``, ``end_time_ms``):

* the whole trace at resolution 4040 (what XProf's UI asks for first on a wide screen);
* a window (the middle tenth) at resolution 4040;
* resolution 0, only to count every event.

Kept, per request: the complete events as rows ``[name, tid, ts, dur]`` (µs, as XProf
prints them) and ``fullTimespan``. Output: ``tests/golden/trace_viewer/crowded_visibility.json.gz``.

Usage: ``.venv/bin/python scripts/record_xprof_visibility_golden.py --xprof-python PATH``
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
OUT = ROOT / "tests" / "golden" / "trace_viewer" / "crowded_visibility.json.gz"

_RUN = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
out = r.xspace_to_tool_data([sys.argv[1]], "trace_viewer@", {"trace_viewer_options": json.loads(sys.argv[2])})
d = out[0]
sys.stdout.write(d if isinstance(d, str) else d.decode())
"""


def ask(python: str, path: Path, options: dict) -> dict:
    proc = subprocess.run([python, "-c", _RUN, str(path), json.dumps(options)], capture_output=True, text=True,
                          timeout=900, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"XProf failed on {path} with {options}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def rows(body: dict) -> list:
    return [[e["name"], e["tid"], e["ts"], e["dur"]] for e in body["traceEvents"] if e.get("ph") == "X"]


def main() -> None:
    args = parse_recorder_args(recorder_parser(__doc__, OUT, fixtures=False))
    from profscope.testing.timelines import crowded_xspace

    data = crowded_xspace()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "crowded.xplane.pb"
        path.write_bytes(data)
        whole = ask(args.xprof_python, path, {"resolution": "4040"})
        lo, hi = whole["fullTimespan"]
        window = [lo + 0.45 * (hi - lo), lo + 0.55 * (hi - lo)]
        win = ask(args.xprof_python, path, {"resolution": "4040", "start_time_ms": repr(window[0]),
                                            "end_time_ms": repr(window[1])})
        total = len(rows(ask(args.xprof_python, path, {"resolution": "0"})))
    golden = {"input": {"builder": "crowded_xspace"}, "input_sha256": hashlib.sha256(data).hexdigest(),
              "xprof": "2.24.2", "events": total,
              "whole": {"resolution": 4040, "fullTimespan": whole["fullTimespan"], "complete": rows(whole)},
              "window": {"resolution": 4040, "start_time_ms": window[0], "end_time_ms": window[1],
                         "complete": rows(win)}}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_bytes(gzip.compress(json.dumps(golden, separators=(",", ":")).encode(), mtime=0))
    print(f"{total:,} events; whole trace: {len(golden['whole']['complete']):,} returned; "
          f"window: {len(golden['window']['complete']):,}", file=sys.stderr)


if __name__ == "__main__":
    main()

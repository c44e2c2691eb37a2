#!/usr/bin/env python3
"""Record XProf 2.24.2's ``hlo_stats`` and ``op_profile`` answers as golden data.

For every xplane of the real accelerator profiles
(``<fixtures>/public_profiles/xplane/*/plugins/profile/*/*.xplane.pb``, one file of a set
of byte-identical ones, the ``*_corrupt`` one left out: XProf cannot read it) and of the
demo's CPU profiles (``src/profscope/demo/logdir/*/plugins/profile/*/*.xplane.pb``),
XProf's own converter runs on a *copy* in a fresh temporary folder (it writes side files
next to what it reads), in a scratch virtual environment with ``xprof==2.24.2`` (never a
profscope dependency: ``--xprof-python`` or ``$XPROF_PYTHON``)::

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([copy], "hlo_stats", {})   # and "op_profile", by program and
                                                     # with {"group_by": "category"}

The answers are kept whole (they are small: a DataTable of one row per HLO op, and the op
tree), gzip-compressed with mtime 0, as ``tests/golden/op_stats/<case>.<hlo_stats|op_profile|op_profile_category>.json.gz``;
``index.json`` lists each case with its input path (relative to the fixtures folder or
the repository), run, host and sha256, and the row count.

Usage: ``XPROF_PYTHON=<venv>/bin/python .venv/bin/python scripts/record_xprof_op_golden.py``
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
OUT = ROOT / "tests" / "golden" / "op_stats"
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"
# (golden name, XProf tool, its params): op_profile by program (XProf's default) and by category
TOOLS = (("hlo_stats", "hlo_stats", {}), ("op_profile", "op_profile", {}),
         ("op_profile_category", "op_profile", {"group_by": "category"}))

_RUN = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data = r.xspace_to_tool_data([sys.argv[1]], sys.argv[2], json.loads(sys.argv[3]))[0]
if data is None:
    sys.exit("XProf returned no data")
sys.stdout.buffer.write(data if isinstance(data, bytes) else data.encode())
"""


def run_xprof(python: str, name: str, data: bytes, tool: str, params: dict) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / name
        copy.write_bytes(data)
        proc = subprocess.run([python, "-c", _RUN, str(copy), tool, json.dumps(params)], capture_output=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"XProf failed on {name} ({tool}):\n{proc.stderr.decode(errors='replace')[-2000:]}")
        return json.loads(proc.stdout)


def cases(fixtures: Path) -> list[tuple[str, Path, dict]]:
    out: list[tuple[str, Path, dict]] = []
    seen: set[str] = set()
    base = fixtures / "public_profiles" / "xplane"
    for xplane in sorted(base.glob("*/plugins/profile/*/*.xplane.pb")):
        digest = hashlib.sha256(xplane.read_bytes()).hexdigest()
        profile = xplane.relative_to(base).parts[0]
        if digest in seen or profile.endswith("_corrupt"):
            continue
        seen.add(digest)
        out.append((profile, xplane, {"path": str(xplane.relative_to(fixtures)), "fixture": True,
                                      "run": f"{profile}/{xplane.parent.name}",
                                      "host": xplane.name[: -len(".xplane.pb")]}))
    for xplane in sorted(DEMO.glob("*/plugins/profile/*/*.xplane.pb")):
        profile = xplane.relative_to(DEMO).parts[0]
        out.append((f"demo_{profile}", xplane, {"path": str(xplane.relative_to(ROOT)), "fixture": False,
                                                "run": f"{profile}/{xplane.parent.name}",
                                                "host": xplane.name[: -len(".xplane.pb")]}))
    return out


def main() -> None:
    args = parse_recorder_args(recorder_parser(__doc__, OUT))
    args.out.mkdir(parents=True, exist_ok=True)
    index: dict = {"_meta": {"xprof": "2.24.2", "call": "xspace_to_tool_data([copy], tool, params)",
                             "tools": {golden: [tool, params] for golden, tool, params in TOOLS}}}
    for case, xplane, entry in cases(args.fixtures):
        data = xplane.read_bytes()
        entry = {**entry, "sha256": hashlib.sha256(data).hexdigest()}
        for golden, tool, params in TOOLS:
            body = run_xprof(args.xprof_python, xplane.name, data, tool, params)
            out = f"{case}.{golden}.json.gz"
            (args.out / out).write_bytes(gzip.compress(json.dumps(body, separators=(",", ":")).encode(), mtime=0))
            entry[golden] = out
        entry["hlo_stats_rows"] = len(json.loads(gzip.decompress((args.out / entry["hlo_stats"]).read_bytes()))["rows"])
        index[case] = entry
        print(f"{case}: {entry['hlo_stats_rows']} hlo_stats rows", file=sys.stderr)
    (args.out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

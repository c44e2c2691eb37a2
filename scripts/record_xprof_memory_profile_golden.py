#!/usr/bin/env python3
"""Record XProf 2.24.2's memory-profile answers as golden data for profscope's tests.

Inputs: the real TensorFlow profile with BFC allocator events in the shared fixtures
(``../shared/fixtures/tf_bfc_cpu/.../vm.xplane.pb``) and every scenario of
``src/profscope/testing/allocator_xplane.py`` (``SCENARIOS``: several allocators and hosts,
out-of-order events, frees of memory allocated before the window, a steady leak, GPU and
TPU plane layouts, step grouping corner cases, > 1000 events, odd stat value types, ...).
For each, XProf's own converter runs in a scratch virtual environment
(``--xprof-python``, default ``$XPROF_PYTHON`` with ``pip install
xprof==2.24.2``; never a profscope dependency):

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([xplane], "memory_profile", {})

always on a *copy* of the profile in a fresh temporary folder (XProf may write next to
what it reads), one XProf process per case so a crash cannot hide the others.

Writes into ``tests/golden/memory_profile/`` (``--out``):

* ``<case>.json.gz``: XProf's exact response body, gzipped (mtime 0);
* ``index.json``: per case ``name``, ``input`` (``{"builder": <scenario>}`` or
  ``{"shared": <path under shared/fixtures>}``), ``input_sha256``, ``host`` (the file
  name's host part), and ``golden`` (file name) or ``empty_body`` (XProf answered with an
  empty body), plus ``_meta`` (XProf version, how it was called).

Usage: ``.venv/bin/python scripts/record_xprof_memory_profile_golden.py``
"""

from __future__ import annotations

import argparse
import os
import gzip
import hashlib
import json
import pathlib
import shutil
import subprocess
import sys
import tempfile

from profscope.testing import allocator_xplane as ax

REPO = pathlib.Path(__file__).resolve().parent.parent

DEFAULT_OUT = REPO / "tests" / "golden" / "memory_profile"
# a venv with xprof==2.24.2 (never a profscope dependency): --xprof-python or $XPROF_PYTHON
DEFAULT_XPROF_PYTHON = os.environ.get("XPROF_PYTHON", "")
SHARED_FIXTURES = REPO.parent / "shared" / "fixtures"
SHARED_CASES = {
    "tf_bfc_cpu": "tf_bfc_cpu/profile/plugins/profile/2026_11_29_18_51_13/vm.xplane.pb",
}

# Runs inside the XProf venv: {"xplane": path} on stdin, one JSON line on stdout.
XPROF_RUNNER = r"""
import json, sys
from importlib import metadata
from xprof.convert import raw_to_tool_data as r

job = json.load(sys.stdin)
out = {"xprof_version": metadata.version("xprof")}
try:
    data, content_type = r.xspace_to_tool_data([job["xplane"]], "memory_profile", {})
except Exception as e:
    out["error"] = repr(e)
else:
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    out["body"] = data
    out["content_type"] = content_type
print(json.dumps(out))
"""


def run_xprof(xprof_python: str, data: bytes, host: str) -> dict:
    with tempfile.TemporaryDirectory(prefix="mp-golden-") as tmp:
        path = pathlib.Path(tmp) / f"{host}.xplane.pb"
        path.write_bytes(data)
        proc = subprocess.run([xprof_python, "-c", XPROF_RUNNER], input=json.dumps({"xplane": str(path)}),
                              capture_output=True, text=True, timeout=900, check=False)
        if proc.returncode != 0:
            return {"error": f"XProf exited with {proc.returncode}: {proc.stderr[-2000:]}"}
        return json.loads(proc.stdout.strip().splitlines()[-1])


def cases():
    for name, rel in SHARED_CASES.items():
        path = SHARED_FIXTURES / rel
        yield name, {"shared": rel}, path.read_bytes(), path.name.split(".")[0]
    for name in ax.SCENARIOS:
        yield name, {"builder": name}, ax.build(name), ax.HOSTS.get(name, "host0")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=pathlib.Path, default=DEFAULT_OUT)
    ap.add_argument("--xprof-python", default=DEFAULT_XPROF_PYTHON)
    ap.add_argument("--only", nargs="*", help="record just these cases (keep the others)")
    args = ap.parse_args()
    if not args.xprof_python:
        ap.error("give --xprof-python or set XPROF_PYTHON (a venv with xprof==2.24.2)")
    args.out.mkdir(parents=True, exist_ok=True)
    index_path = args.out / "index.json"
    old = json.loads(index_path.read_text()) if index_path.exists() and args.only else {"cases": []}
    kept = {c["name"]: c for c in old["cases"]}
    versions = set()
    for name, source, data, host in cases():
        if args.only and name not in args.only:
            continue
        res = run_xprof(args.xprof_python, data, host)
        if "error" in res:
            sys.exit(f"{name}: {res['error']}")
        versions.add(res["xprof_version"])
        entry = {"name": name, "input": source, "input_sha256": hashlib.sha256(data).hexdigest(), "host": host}
        golden = args.out / f"{name}.json.gz"
        if res["body"]:
            json.loads(res["body"])  # must be JSON
            with open(golden, "wb") as f, gzip.GzipFile(fileobj=f, mode="wb", mtime=0, filename="") as gz:
                gz.write(res["body"].encode("utf-8"))
            entry["golden"] = golden.name
        else:
            golden.unlink(missing_ok=True)
            entry["empty_body"] = True
        kept[name] = entry
        print(f"{name}: {len(res['body']):,} bytes", flush=True)
    if len(versions) > 1:
        sys.exit(f"several XProf versions answered: {versions}")
    index = {
        "_meta": {
            "xprof_version": versions.pop() if versions else old.get("_meta", {}).get("xprof_version"),
            "call": 'xprof.convert.raw_to_tool_data.xspace_to_tool_data([copy_of_xplane], "memory_profile", {})',
            "recorder": "scripts/record_xprof_memory_profile_golden.py",
        },
        "cases": sorted(kept.values(), key=lambda c: c["name"]),
    }
    index_path.write_text(json.dumps(index, indent=1) + "\n")
    shutil.rmtree(args.out / "__pycache__", ignore_errors=True)


if __name__ == "__main__":
    main()

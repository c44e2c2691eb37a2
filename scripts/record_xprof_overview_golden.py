#!/usr/bin/env python3
"""Record XProf 2.24.2's ``overview_page`` answers as golden data.

The same files and the same mechanism as ``scripts/record_xprof_op_golden.py`` (its
``cases`` and ``run_xprof``): every public GPU/TPU/ROCm xplane of the shared fixtures (one
of a set of byte-identical files; not the corrupt one) and the demo's CPU profiles, each
converted by XProf itself on a copy in a fresh temporary folder, in a scratch virtual
environment with ``xprof==2.24.2`` (``--xprof-python`` or ``$XPROF_PYTHON``; never a
profscope dependency)::

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([copy], "overview_page", {})

Profiles the fixtures lack come from ``profscope.testing`` builders (``BUILDER_CASES``: a
CPU profile grouped at capture, its steps named by ``step_name`` stats), recorded from
the builder's bytes.

XProf's ALL_HOSTS (its merge of a session's hosts) is recorded too, from the copies of all
of a session's files in one call, ``xspace_to_tool_data([copy_1, copy_2], ...)``: the
two hosts of ``tf_gpu``, and a session made of two of the demo's CPU profiles (``mlp`` as
``hostA``, ``convnet`` as ``hostB``: steps at different times, so XProf's step
intersection aligns them by its own rule); the test lays the pair out the same way.

XProf's answer is a list of 7 DataTables (the op table, the step-time graph with the
input-pipeline averages and statements, the run environment, the recommendation, the
inference latency, an empty one and the diagnostics). It is kept whole, gzip-compressed
with mtime 0, as ``tests/golden/overview_page/<case>.overview_page.json.gz``;
``index.json`` lists each case with its input path, run, host, sha256 and step count.

Usage: ``XPROF_PYTHON=<venv>/bin/python .venv/bin/python scripts/record_xprof_overview_golden.py``
"""

from __future__ import annotations

import gzip
import hashlib
import json
import sys
from pathlib import Path

from _xprof_recorder import parse_recorder_args, recorder_parser

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_xprof_op_golden import _RUN, DEMO, ROOT, cases, run_xprof  # noqa: E402  (the same files, the same call)

OUT = ROOT / "tests" / "golden" / "overview_page"
STEP_TABLE = 1  # XProf's overview_page JSON: the 2nd DataTable is the step-time graph
# ALL_HOSTS cases: (case, [(host, file relative to the fixtures or the repository, fixture?)])
ALL_HOSTS_CASES = (
    ("tf_gpu_all_hosts", [(h, f"public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker/{h}.xplane.pb", True)
                          for h in ("34.83.195.179_6003", "34.83.195.180_6003")]),
    ("demo_pair_all_hosts", [("hostA", "mlp", False), ("hostB", "convnet", False)]),
)


# Builder cases: (case, host, the profscope.testing function that writes the xplane)
BUILDER_CASES = (("builder_pregrouped_cpu", "pg-host", "profscope.testing.step_xplane:pregrouped_cpu"),)


def _build(target: str) -> bytes:
    import importlib

    module, func = target.split(":")
    return getattr(importlib.import_module(module), func)()


def _demo_file(profile: str) -> Path:
    return next(DEMO.glob(f"{profile}/plugins/profile/*/*.xplane.pb"))


def run_xprof_hosts(python: str, files: list[tuple[str, bytes]]) -> list:
    """XProf's overview_page of copies of several hosts' files in one session folder."""
    import subprocess
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in files:
            (Path(tmp) / name).write_bytes(data)
            paths.append(str(Path(tmp) / name))
        code = _RUN.replace("[sys.argv[1]], sys.argv[2], json.loads(sys.argv[3])",
                            "sys.argv[3:], sys.argv[1], json.loads(sys.argv[2])")
        proc = subprocess.run([python, "-c", code, "overview_page", "{}", *paths], capture_output=True, timeout=600,
                              check=False)
        if proc.returncode != 0:
            raise SystemExit(f"XProf failed on {[n for n, _ in files]}:\n{proc.stderr.decode(errors='replace')[-2000:]}")
        return json.loads(proc.stdout)


def main() -> None:
    args = parse_recorder_args(recorder_parser(__doc__, OUT))
    args.out.mkdir(parents=True, exist_ok=True)
    index: dict = {"_meta": {"xprof": "2.24.2", "call": "xspace_to_tool_data([copy], 'overview_page', {})"}}
    for case, xplane, entry in cases(args.fixtures):
        data = xplane.read_bytes()
        body = run_xprof(args.xprof_python, xplane.name, data, "overview_page", {})
        out = f"{case}.overview_page.json.gz"
        (args.out / out).write_bytes(gzip.compress(json.dumps(body, separators=(",", ":")).encode(), mtime=0))
        index[case] = {**entry, "sha256": hashlib.sha256(data).hexdigest(), "overview_page": out,
                       "steps": len(body[STEP_TABLE].get("rows", []))}
        print(f"{case}: {index[case]['steps']} steps", file=sys.stderr)
    for case, host, target in BUILDER_CASES:
        data = _build(target)
        body = run_xprof(args.xprof_python, f"{host}.xplane.pb", data, "overview_page", {})
        out = f"{case}.overview_page.json.gz"
        (args.out / out).write_bytes(gzip.compress(json.dumps(body, separators=(",", ":")).encode(), mtime=0))
        index[case] = {"builder": target, "host": host, "sha256": hashlib.sha256(data).hexdigest(),
                       "overview_page": out, "steps": len(body[STEP_TABLE].get("rows", []))}
        print(f"{case}: {index[case]['steps']} steps", file=sys.stderr)
    for case, hosts in ALL_HOSTS_CASES:
        files, entry = [], {"hosts": [], "host": "ALL_HOSTS"}
        for host, where, fixture in hosts:
            path = (args.fixtures / where) if fixture else _demo_file(where)
            files.append((f"{host}.xplane.pb", path.read_bytes()))
            entry["hosts"].append({"host": host, "fixture": fixture,
                                   "path": str(path.relative_to(args.fixtures if fixture else ROOT)),
                                   "sha256": hashlib.sha256(files[-1][1]).hexdigest()})
        body = run_xprof_hosts(args.xprof_python, files)
        out = f"{case}.overview_page.json.gz"
        (args.out / out).write_bytes(gzip.compress(json.dumps(body, separators=(",", ":")).encode(), mtime=0))
        index[case] = {**entry, "overview_page": out, "steps": len(body[STEP_TABLE].get("rows", []))}
        print(f"{case}: {index[case]['steps']} steps", file=sys.stderr)
    (args.out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

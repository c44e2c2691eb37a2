#!/usr/bin/env python3
"""Record XProf 2.24.2's memory-viewer and memory-profile answers on the real GPU, TPU and
ROCm profiles of ``shared/fixtures/public_profiles`` as golden data for
tests/test_memory_golden_public.py.

For every readable xplane there (the corrupt TPU copy is left out; byte-identical files,
like tf_gpu's two hosts, are recorded once), XProf's own converter runs in a scratch
virtual environment (``--xprof-python`` or ``$XPROF_PYTHON``; never a profscope
dependency) on a copy of the profile in a temporary folder (XProf writes
``<module>.hlo_proto.pb`` files next to what it reads), one process per profile:

* ``xspace_to_tool_names``, then ``xspace_to_tool_data([x], "memory_viewer",
  {"module_name": M, "memory_space": S})`` for every module of the profile and every
  memory space the module has (``profscope.tools.memory_viewer.memory_spaces``);
* ``xspace_to_tool_data([x], "memory_profile", {})``.

Writes into ``tests/golden/public_memory/`` (``--out``): ``<case>__<module>__<space>.json.gz``
and ``<case>__memory_profile.json.gz`` (XProf's exact bodies, gzipped, mtime 0) and
``index.json`` (per answer: the fixture path relative to the fixtures folder, its sha256,
the module and space, the golden's file name or what XProf said instead).

Usage: ``.venv/bin/python scripts/record_xprof_public_memory_golden.py --xprof-python PATH``
"""

from __future__ import annotations

import gzip
import hashlib
import json
import pathlib
import shutil
import subprocess
import tempfile

from _xprof_recorder import parse_recorder_args, recorder_parser

from profscope.formats import hlo_proto, xplane
from profscope.tools import memory_viewer

REPO = pathlib.Path(__file__).resolve().parent.parent

OUT = REPO / "tests" / "golden" / "public_memory"

# Runs inside the XProf venv: {"xplane": path, "requests": [[module, space], ...]} on
# stdin; one JSON line per memory-viewer request, then one for the memory profile.
_RUNNER = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r

job = json.load(sys.stdin)
x = job["xplane"]
r.xspace_to_tool_names([x])

def answer(tool_name, params, **key):
    try:
        data, _ = r.xspace_to_tool_data([x], tool_name, params)
    except Exception as e:  # XProf raises for some inputs: say what it said
        return {**key, "error": repr(e)}
    if data is None:
        return {**key, "error": "no data"}
    return {**key, "body": data.decode() if isinstance(data, bytes) else data}

for module, space in job["requests"]:
    print(json.dumps(answer("memory_viewer", {"module_name": module, "memory_space": space},
                            module=module, space=space)), flush=True)
print(json.dumps(answer("memory_profile", {}, tool="memory_profile")), flush=True)
"""


def _write_gz(path: pathlib.Path, text: str) -> None:
    with open(path, "wb") as f, gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as g:
        g.write(text.encode())


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "()_.-" else "_" for c in name)


def main() -> None:
    args = parse_recorder_args(recorder_parser(__doc__, OUT))
    if args.out.exists():
        shutil.rmtree(args.out)
    args.out.mkdir(parents=True)
    seen: dict[str, str] = {}
    cases = []
    for path in sorted((args.fixtures / "public_profiles" / "xplane").glob("*/plugins/profile/*/*.xplane.pb")):
        rel = str(path.relative_to(args.fixtures))
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        name = path.relative_to(args.fixtures / "public_profiles" / "xplane").parts[0]
        if "corrupt" in name:
            continue
        if digest in seen:  # tf_gpu's second host is the first one's bytes
            cases.append({"case": name, "input": rel, "input_sha256": digest, "same_as": seen[digest]})
            continue
        seen[digest] = rel
        requests = []
        with open(path, "rb") as f:
            for ref in xplane.hlo_modules(f, str(path)):
                f.seek(0)
                hlo = hlo_proto.parse(xplane.hlo_proto_bytes(f, str(path), ref.display_name), ref.display_name)
                requests += [[ref.display_name, str(s["id"])] for s in memory_viewer.memory_spaces(hlo)]
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / path.name
            shutil.copyfile(path, copy)
            proc = subprocess.run([args.xprof_python, "-c", _RUNNER], input=json.dumps({"xplane": str(copy),
                                  "requests": requests}), capture_output=True, text=True, timeout=1800, check=False)
        answers = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
        if len(answers) != len(requests) + 1:
            raise SystemExit(f"XProf stopped on {rel} ({proc.returncode}): {proc.stderr[-2000:]}")
        for a in answers:
            entry = {"case": name, "input": rel, "input_sha256": digest}
            if "tool" in a:
                entry["tool"], fname = "memory_profile", f"{name}__memory_profile.json.gz"
            else:
                entry.update(tool="memory_viewer", module=a["module"], space=int(a["space"]))
                fname = f"{name}__{_safe(a['module'])}__{a['space']}.json.gz"
            if "body" in a:
                _write_gz(args.out / fname, a["body"])
                entry["golden"] = fname
            else:
                entry["error"] = a["error"]
            cases.append(entry)
            print(name, entry.get("module", "memory_profile"), entry.get("space", ""), entry.get("golden") or entry["error"])
    index = {"_meta": {"xprof": "2.24.2", "recorder": "scripts/record_xprof_public_memory_golden.py",
                       "fixtures": "paths relative to the shared fixtures folder"}, "cases": cases}
    (args.out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")
    total = sum(p.stat().st_size for p in args.out.iterdir())
    print(f"{len(cases)} cases, {total:,} bytes in {args.out}")


if __name__ == "__main__":
    main()

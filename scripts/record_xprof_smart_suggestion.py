#!/usr/bin/env python3
"""Record XProf 2.24.2's ``smart_suggestion`` answers as golden data (issue 35: the
Summary's verdicts compared with XProf's own, tests/test_analysis_xprof.py).

XProf runs in a scratch virtual environment with ``xprof==2.24.2`` (``--xprof-python`` or
``$XPROF_PYTHON``; never a profscope dependency), on copies in a fresh temporary folder
(it writes side files next to what it reads), all of a session's hosts in one call::

    from xprof.convert import raw_to_tool_data as r
    r.xspace_to_tool_data([copy, ...], "smart_suggestion", {})

(``raw_to_tool_data`` passes ``refresh_suggestion`` only; the answer is a
``SmartSuggestionReport`` as JSON: ``{"suggestions": [{"ruleName", "suggestionText"}]}``.)

What XProf 2.24.2 can say: its ``SmartSuggestionRuleFactory`` registers one rule,
``BarrierCoresRule`` (the only ``*Rule`` class in ``xprof/convert/profiler_plugin_c_api.so``;
it asks the ``event_time_fraction_analyzer`` for the time fraction of TPU
``barrier-cores`` events and names straggler hosts). The input-, compute-, memory- and
collective-bound statements are overview_page's (tests/golden/overview_page), not
smart_suggestion's.

Cases: every public xplane of the shared fixtures (one of a set of byte-identical files,
not the corrupt one) and the demo's CPU profiles (``record_xprof_op_golden.cases``); the
two hosts of ``tf_gpu`` together (XProf's ALL_HOSTS); and every xplane session of the
planted suite (``profscope.testing.planted``: its CPU xplanes and the real JAX programs of
``tests/data``), built into a temporary folder. Written to
``tests/golden/smart_suggestion/index.json``: per case its inputs (path or planted case,
host names, sha256) and XProf's answer, whole.

Usage: ``XPROF_PYTHON=<venv>/bin/python .venv/bin/python scripts/record_xprof_smart_suggestion.py``
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

from _xprof_recorder import parse_recorder_args, recorder_parser

sys.path.insert(0, str(Path(__file__).resolve().parent))
from record_xprof_op_golden import ROOT, cases  # noqa: E402  (the same public and demo files)

OUT = ROOT / "tests" / "golden" / "smart_suggestion"
TF_GPU = "public_profiles/xplane/tf_gpu/plugins/profile/GPU-multi-worker"

_RUN = r"""
import json, sys
from xprof.convert import raw_to_tool_data as r
data = r.xspace_to_tool_data(sys.argv[1:], "smart_suggestion", {})[0]
if data is None:
    sys.exit("XProf returned no data")
sys.stdout.buffer.write(data if isinstance(data, bytes) else data.encode())
"""


def run_smart_suggestion(python: str, files: list[tuple[str, bytes]]) -> dict:
    """XProf's smart_suggestion of copies of ``files`` ((host file name, bytes)) in one
    session folder."""
    with tempfile.TemporaryDirectory() as tmp:
        paths = []
        for name, data in files:
            (Path(tmp) / name).write_bytes(data)
            paths.append(str(Path(tmp) / name))
        proc = subprocess.run([python, "-c", _RUN, *paths], capture_output=True, timeout=600, check=False)
        if proc.returncode != 0:
            raise SystemExit(f"XProf failed on {[n for n, _ in files]}:\n{proc.stderr.decode(errors='replace')[-2000:]}")
        return json.loads(proc.stdout)


def _entry(files: list[Path], base: Path, **extra) -> tuple[list[tuple[str, bytes]], dict]:
    blobs = [(f.name, f.read_bytes()) for f in files]
    hosts = [{"host": f.name[: -len(".xplane.pb")], "path": str(f.relative_to(base)),
              "sha256": hashlib.sha256(b).hexdigest()} for f, (_, b) in zip(files, blobs)]
    return blobs, {**extra, "hosts": hosts}


def planted_sessions(tmp: Path) -> list[tuple[str, list[Path], dict]]:
    """Every xplane session of the planted suite, built under ``tmp``."""
    from profscope.testing import planted

    runs = planted.build_logdir(tmp, ROOT / "tests" / "data")
    out = []
    for case in planted.CASES:
        run = runs.get(case.name)
        folder = tmp / run.split("/")[0] / "plugins" / "profile" / run.split("/")[-1] if run else None
        if folder is None or not folder.is_dir():
            continue
        out.append((f"planted_{case.name}", sorted(folder.glob("*.xplane.pb")),
                    {"planted": case.name, "run": run, "host": case.host}))
    return out


def main() -> None:
    args = parse_recorder_args(recorder_parser(__doc__, OUT))
    args.out.mkdir(parents=True, exist_ok=True)
    index: dict = {"_meta": {"xprof": "2.24.2", "call": "xspace_to_tool_data([copies of a session's hosts], 'smart_suggestion', {})",
                             "rules": ["BarrierCoresRule"]}}
    todo = []
    for case, xplane, entry in cases(args.fixtures):
        base = args.fixtures if entry["fixture"] else ROOT
        todo.append((case, [xplane], base, {"run": entry["run"], "host": entry["host"], "fixture": entry["fixture"]}))
    todo.append(("tf_gpu_all_hosts", sorted((args.fixtures / TF_GPU).glob("*.xplane.pb")), args.fixtures,
                  {"run": "tf_gpu/GPU-multi-worker", "host": "ALL_HOSTS", "fixture": True}))
    with tempfile.TemporaryDirectory() as tmp:
        for case, files, extra in planted_sessions(Path(tmp)):
            todo.append((case, files, Path(tmp), extra))
        for case, files, base, extra in todo:
            blobs, entry = _entry(files, base, **extra)
            entry["smart_suggestion"] = run_smart_suggestion(args.xprof_python, blobs)
            index[case] = entry
            print(f"{case}: {len(entry['smart_suggestion'].get('suggestions') or [])} suggestions", file=sys.stderr)
    (args.out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

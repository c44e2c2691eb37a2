#!/usr/bin/env python3
"""Record profscope's own Summary JSON on every public fixture as golden data (issue 35:
"each finding on them checked by hand once and kept as a golden").

The public fixtures folder (``<fixtures>/public_profiles``: the GPU/TPU/ROCm xplanes, the
PyTorch traces and snapshots, the corrupt TPU profile and the git-LFS pointer) served as
one log directory by a fresh workspace; every run's summary
(``/data/plugin/profile/data?run=R&tag=summary``), and ``host=ALL_HOSTS`` for a session of
several hosts. Each answer is written whole as
``tests/golden/summary/<case>.json`` (sorted keys, the bytes tests/test_analysis_goldens.py
compares); ``index.json`` lists each case's run, host, file and its status and finding
ids. Each finding was read once against the profile's own pages (docs/analysis.md,
"Goldens on the real files", says what was checked); re-record only after a rule change,
and read the diff.

Usage: ``.venv/bin/python scripts/record_summary_goldens.py [--fixtures DIR] [--out DIR]``
"""

from __future__ import annotations

import argparse
import json
import os
import re
import tempfile
from pathlib import Path

from profscope.testing.planted import client_for, summary_bytes

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "summary"


def golden_cases(client) -> list[tuple[str, str, str | None]]:
    """(case, run, host) for every run of the served log directory: the run itself, and
    ALL_HOSTS where its session has several hosts."""
    out = []
    for run in sorted(client.get("/data/plugin/profile/runs").json()):
        case = re.sub(r"[^A-Za-z0-9_.-]+", "_", run)
        out.append((case, run, None))
        hosts = client.get("/data/plugin/profile/hosts", params={"run": run, "tag": "summary"})
        if hosts.status_code == 200 and len(hosts.json()) > 1:
            out.append((f"{case}.ALL_HOSTS", run, "ALL_HOSTS"))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--fixtures", type=Path,
                    default=Path(os.environ.get("PROFSCOPE_SHARED_FIXTURES") or ROOT.parent / "shared" / "fixtures"))
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    index = {}
    with tempfile.TemporaryDirectory() as tmp:
        client = client_for(args.fixtures / "public_profiles", Path(tmp))
        for case, run, host in golden_cases(client):
            body = summary_bytes(client, run, host)
            (args.out / f"{case}.json").write_bytes(body)
            doc = json.loads(body)
            index[case] = {"run": run, "host": host, "status": doc["status"],
                           "findings": [[f["id"], f["priority"], f["host"]] for f in doc["findings"]],
                           "refused": [r["file"] for r in doc.get("refused") or []]}
            print(f"{case}: {doc['status']} {index[case]['findings']}")
    (args.out / "index.json").write_text(json.dumps(index, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    main()

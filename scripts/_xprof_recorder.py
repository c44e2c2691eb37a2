"""The command line every recorder of XProf goldens in scripts/ shares: XProf 2.24.2 runs
in a scratch virtual environment (never a profscope dependency), found through
``--xprof-python`` or ``$XPROF_PYTHON``; the real inputs are the shared fixtures
(``--fixtures``, default ``$PROFSCOPE_SHARED_FIXTURES`` or ``<repo>/../shared/fixtures``);
the goldens go to ``--out``. A recorder adds its own options to the parser it gets::

    ap = recorder_parser(__doc__, OUT)
    ap.add_argument("--only", ...)
    args = parse_recorder_args(ap)
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def recorder_parser(doc: str, out: Path, fixtures: bool = True) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.strip().split("\n\n")[0].replace("\n", " "))
    ap.add_argument("--xprof-python", default=os.environ.get("XPROF_PYTHON"),
                    help="python of a virtual environment with xprof==2.24.2 (default: $XPROF_PYTHON)")
    if fixtures:
        ap.add_argument("--fixtures", type=Path,
                        default=Path(os.environ.get("PROFSCOPE_SHARED_FIXTURES") or ROOT.parent / "shared" / "fixtures"),
                        help="the shared fixtures folder (default: $PROFSCOPE_SHARED_FIXTURES or <repo>/../shared/fixtures)")
    ap.add_argument("--out", type=Path, default=out, help=f"where the goldens go (default: {out.relative_to(ROOT)})")
    return ap


def parse_recorder_args(ap: argparse.ArgumentParser) -> argparse.Namespace:
    args = ap.parse_args()
    if not args.xprof_python:
        ap.error("give --xprof-python or set XPROF_PYTHON (a venv with xprof==2.24.2)")
    return args

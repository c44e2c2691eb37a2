#!/usr/bin/env python3
"""Record HolisticTraceAnalysis's (HTA's) step-time numbers on the public PyTorch traces as
golden data for ``tests/test_step_breakdown_hta.py``.

HTA (``holistictraceanalysis`` from PyPI) runs in a scratch virtual environment, never a
profscope dependency: ``--hta-python``, or the ``HTA_PYTHON`` environment variable. Each
trace is copied alone into a fresh temporary folder (HTA reads every trace of a folder as
one rank each) and HTA answers, in one process per trace::

    from hta.trace_analysis import TraceAnalysis
    ta = TraceAnalysis(trace_dir=folder)             # include_last_profiler_step=False
    ta.get_temporal_breakdown(visualize=False)
    ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True,
                                num_kernels=10**9, duration_ratio=1.0)

(``num_kernels``/``duration_ratio`` so large that no kernel is folded into HTA's
``others`` row: every kernel name is kept.) What is kept, per trace,
``tests/golden/hta/<trace>.json``: the temporal breakdown of each rank (``idle``,
``compute``, ``non_compute``, ``kernel_time``, µs as HTA prints them), the kernel-type
table (HTA's ``kernel_type`` and ``sum``: time a type or a mix of overlapping types runs,
µs) and every kernel (``name``, ``kernel_type``, ``sum``, ``mean``, ``count``: ``sum /
mean`` rounded, HTA's table has no count), with the HTA version and the input's sha256.

Usage: ``HTA_PYTHON=<venv>/bin/python .venv/bin/python scripts/record_hta_golden.py``
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "tests" / "golden" / "hta"
TRACES = ("kineto_resnet50_v100.pt", "tracelens_b200_eager", "tracelens_h100_bert_small", "hta_alexnet",
          "hta_mi250_rocm62")

_RUN = r"""
import json, logging, sys
logging.disable(logging.WARNING)
from importlib.metadata import version
from hta.trace_analysis import TraceAnalysis
ta = TraceAnalysis(trace_dir=sys.argv[1])
tb = ta.get_temporal_breakdown(visualize=False)
kt, kall = ta.get_gpu_kernel_breakdown(visualize=False, include_memory_kernels=True, num_kernels=10**9,
                                       duration_ratio=1.0)
out = {"hta_version": version("holistictraceanalysis"), "temporal": [], "kernel_types": [], "kernels": []}
for r in tb.to_dict("records"):
    out["temporal"].append({"rank": int(r["rank"]), "idle": float(r["idle_time(us)"]),
                            "compute": float(r["compute_time(us)"]),
                            "non_compute": float(r["non_compute_time(us)"]),
                            "kernel_time": float(r["kernel_time(us)"])})
for r in kt.to_dict("records"):
    out["kernel_types"].append({"kernel_type": r["kernel_type"], "sum": float(r["sum"])})
for r in kall.to_dict("records"):
    mean = float(r["mean (us)"])
    out["kernels"].append({"name": r["name"], "kernel_type": r["kernel_type"], "rank": int(r["rank"]),
                           "sum": float(r["sum (us)"]), "mean": mean,
                           "count": round(float(r["sum (us)"]) / mean) if mean else None})
print(json.dumps(out))
"""


def record(python: str, trace: Path) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copy(trace, tmp)
        res = subprocess.run([python, "-c", _RUN, tmp], capture_output=True, text=True, timeout=600)
    if res.returncode:
        raise SystemExit(f"HTA failed on {trace.name}:\n{res.stderr[-4000:]}")
    data = json.loads(res.stdout.strip().splitlines()[-1])
    data["input"] = f"public_profiles/traces/{trace.name}"
    data["sha256"] = hashlib.sha256(trace.read_bytes()).hexdigest()
    return data


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--hta-python", default=os.environ.get("HTA_PYTHON"),
                    help="python of a venv with holistictraceanalysis (default $HTA_PYTHON)")
    ap.add_argument("--fixtures", default=os.environ.get("PROFSCOPE_SHARED_FIXTURES",
                                                         str(ROOT.parent / "shared" / "fixtures")))
    args = ap.parse_args()
    if not args.hta_python:
        sys.exit("give --hta-python or HTA_PYTHON: a python with holistictraceanalysis installed")
    OUT.mkdir(parents=True, exist_ok=True)
    for name in TRACES:
        trace = Path(args.fixtures) / "public_profiles" / "traces" / f"{name}.trace.json.gz"
        data = record(args.hta_python, trace)
        (OUT / f"{name}.json").write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        t = data["temporal"][0]
        print(f"{name}: {len(data['kernels'])} kernels, kernel_time {t['kernel_time']:.0f} us, "
              f"idle {t['idle']:.0f} compute {t['compute']:.0f} non-compute {t['non_compute']:.0f}")


if __name__ == "__main__":
    main()

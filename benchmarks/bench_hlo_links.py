"""Issue 37's bar, counted: of the buffers at each module's compiler heap peak that have a
defining instruction, how many resolve to a line of HLO text, and, of those whose op the
trace has slices of, how many the memory viewer's panel links to a slice of that module's
runs (profscope.testing.link_program.coverage), per module, with the time each took.

    python benchmarks/bench_hlo_links.py [LOGDIR ...]

Default: the public TPU, MI300 and TF GPU xplanes of the shared fixtures and a JAX program
profiled here (made in a temporary folder).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.model.catalog import RunKind
from profscope.storage import LogDir
from profscope.testing import link_program
from profscope.testing.shared_fixtures import shared_fixtures_dir

PUBLIC = ("tpu_inference", "mi300_jax08_gemm", "mi300_jax_conv_xprof_touched", "tf_gpu")


def counts(logdir: str) -> list[dict]:
    ws = Workspace(LogDir(logdir), DiskCache(tempfile.mkdtemp(prefix="bench_hlo_links_")))
    rows = []
    for run in ws.runs():
        if run.kind is not RunKind.PROFILE:
            continue
        modules = ws.modules(run)
        if not modules:
            rows.append({"run": run.name, "module": None})
        for module in modules:
            t = time.perf_counter()
            row = link_program.coverage(ws, run, module)
            rows.append({"run": run.name, **row, "seconds": time.perf_counter() - t})
    return rows


def main(argv: list[str]) -> int:
    logdirs = argv
    if not logdirs:
        shared = shared_fixtures_dir()
        if shared is not None:
            logdirs = [str(shared / "public_profiles" / "xplane" / name) for name in PUBLIC]
        logdirs.append(str(link_program.make(Path(tempfile.mkdtemp(prefix="link_program_"))) / "logdir"))
    total = {"withInstruction": 0, "hloText": 0, "opEvents": 0, "traceSlices": 0}
    for logdir in logdirs:
        print(f"== {logdir}")
        for r in counts(logdir):
            if r["module"] is None:
                print(f"  {r['run']}: no compiled module (no memory viewer): nothing to count")
                continue
            for k in total:
                total[k] += r[k]
            print(f"  {r['module']:<48} peak buffers {r['buffers']:>3}, with an instruction {r['withInstruction']:>3}, "
                  f"HLO text {r['hloText']:>3}; op in the trace {r['opEvents']:>3}, linked to a slice {r['traceSlices']:>3}"
                  f"  ({r['seconds']:.2f} s){'  UNRESOLVED ' + ', '.join(r['unresolved']) if r['unresolved'] else ''}")
    print(f"== all: HLO text {total['hloText']}/{total['withInstruction']}, "
          f"trace slices {total['traceSlices']}/{total['opEvents']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

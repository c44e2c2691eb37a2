"""Load a big PyTorch memory snapshot in a fresh process: load time and peak RSS.

    python scripts/make_big_snapshot.py /tmp/big.pickle --target-mb 1000
    python benchmarks/bench_torch_snapshot.py /tmp/big.pickle

Prints file size, load time, peak RSS (VmHWM of this process, which starts fresh) and
the ratio peak RSS / file size (target: <= 3).
"""

from __future__ import annotations

import os
import sys
import time


def _vm(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    path = sys.argv[1]
    from profscope.formats.torch_snapshot import load_snapshot

    size = os.path.getsize(path)
    base = _vm("VmRSS")
    t0 = time.perf_counter()
    with open(path, "rb") as f:
        snap = load_snapshot(f, path)
    dt = time.perf_counter() - t0
    peak = _vm("VmHWM")
    entries = sum(len(t) for t in snap.traces)
    print(f"file            {size / 2**20:10.1f} MiB")
    print(f"trace entries   {entries:10,d}   blocks {len(snap.blocks):,}   stacks {len(snap.stacks):,}"
          f"   frames {len(snap.frame_line):,}")
    print(f"load time       {dt:10.1f} s   ({dt / max(entries, 1) * 1e6:.1f} us/entry)")
    print(f"RSS before load {base / 2**20:10.1f} MiB")
    print(f"peak RSS        {peak / 2**20:10.1f} MiB   = {peak / size:.2f} x file size")
    print(f"RSS after load  {_vm('VmRSS') / 2**20:10.1f} MiB (the model)")


if __name__ == "__main__":
    main()

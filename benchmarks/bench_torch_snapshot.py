"""Load a big PyTorch memory snapshot in a fresh process and draw its first charts.

    python benchmarks/bench_torch_snapshot.py      # a 5 MB snapshot made on the spot
    python scripts/make_big_snapshot.py big.pickle --target-mb 1000
    python benchmarks/bench_torch_snapshot.py big.pickle [--reader auto|native|tree|streaming]

Prints file size, load time, the time to the overview and the first (whole-trace)
timeline window, the times of zoomed-in windows, peak RSS (VmHWM of this process, which
starts fresh) and the ratio peak RSS / file size (target: <= 1.5), then what the app does
before its first chart (the load, saving the columns in the cache folder, the overview
and first window) and what reopening from the cache costs (reading the columns back,
the overview and first window). ``--reader`` picks the one-pass native reader
(``_pickle_scan``; an error if it leaves the file to the others), the C unpickler's tree,
the streaming reader, or what profscope would choose here (the native reader first).
Without a path, ``scripts/make_big_snapshot.py --target-mb 5`` writes one into a temporary folder
first (in its own process, so this one's peak RSS stays the reader's).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[1] / "scripts"


def _vm(key: str) -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    return 0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("path", nargs="?", help="a snapshot (default: a small one made on the spot)")
    ap.add_argument("--reader", choices=("auto", "native", "tree", "streaming"), default="auto")
    args = ap.parse_args()
    if args.path is None:
        with tempfile.TemporaryDirectory() as tmp:
            args.path = os.path.join(tmp, "small.pickle")
            subprocess.run([sys.executable, str(SCRIPTS / "make_big_snapshot.py"), args.path, "--target-mb", "5"],
                           check=True, stdout=subprocess.DEVNULL)
            measure(args)
        return
    measure(args)


def measure(args) -> None:
    from profscope.formats import snapshot_pickle
    from profscope.formats.snapshot_pickle import load_snapshot
    from profscope.model.snapshot import load_model, save_model
    from profscope.tools import memory_profile_snapshot

    path = args.path
    size = os.path.getsize(path)
    streaming = {"auto": None, "native": None, "tree": False, "streaming": True}[args.reader]
    base = _vm("VmRSS")
    t0, c0 = time.perf_counter(), time.process_time()
    with open(path, "rb") as f:
        if args.reader == "native":
            with snapshot_pickle._gc_paused():
                snap = snapshot_pickle._native_read(snapshot_pickle._pickle_stream(f, path), path, None, size, "pickle")
        else:
            snap = load_snapshot(f, path, streaming=streaming)
    t_load = time.perf_counter() - t0
    peak_load = _vm("VmHWM")
    device = snap.devices[0]
    t1 = time.perf_counter()
    memory_profile_snapshot.overview(snap, device)
    first = memory_profile_snapshot.timeline(snap, device)
    t_first = time.perf_counter() - t1
    cpu_first = time.process_time() - c0  # CPU seconds from opening the file to the first chart
    n = sum(len(t) for t in snap.traces)
    windows = []
    for i in range(8):  # zooming into a tenth of the trace, here and there
        start = (n * i) // 9
        t2 = time.perf_counter()
        memory_profile_snapshot.timeline(snap, device, start=start, end=start + n // 10)
        windows.append(time.perf_counter() - t2)
    peak = _vm("VmHWM")
    print(f"file            {size / 2**20:10.1f} MiB   reader: {args.reader}")
    print(f"trace entries   {n:10,d}   blocks {len(snap.blocks):,}   stacks {len(snap.stacks):,}"
          f"   frames {len(snap.frame_line):,}")
    print(f"load time       {t_load:10.1f} s   ({t_load / max(n, 1) * 1e6:.1f} us/entry)")
    print(f"first window    {t_first:10.2f} s   (overview + whole-trace timeline, "
          f"{len(first.get('allocations', []))} allocations drawn)")
    print(f"later windows   {min(windows) * 1000:10.0f} - {max(windows) * 1000:.0f} ms")
    print(f"first chart at  {t_load + t_first:10.1f} s after opening the file (CPU {cpu_first:.2f} s)")
    print(f"RSS before load {base / 2**20:10.1f} MiB")
    print(f"peak RSS (load) {peak_load / 2**20:10.1f} MiB   = {peak_load / size:.2f} x file size")
    print(f"peak RSS        {peak / 2**20:10.1f} MiB   = {peak / size:.2f} x file size")
    print(f"RSS at the end  {_vm('VmRSS') / 2**20:10.1f} MiB (the model)")
    with tempfile.TemporaryDirectory() as cache:
        t3 = time.perf_counter()
        save_model(snap, Path(cache))
        t_save = time.perf_counter() - t3
        del snap, first
        t4 = time.perf_counter()
        again = load_model(Path(cache))
        t_model = time.perf_counter() - t4
        memory_profile_snapshot.overview(again, device)
        memory_profile_snapshot.timeline(again, device)
        t_reopen = time.perf_counter() - t4
    print(f"save columns    {t_save:10.2f} s   (into the cache folder; the app's first chart: "
          f"{t_load + t_save + t_first:.1f} s)")
    print(f"reopen (cache)  {t_model:10.2f} s   (columns read back; with the overview and first window "
          f"computed again: {t_reopen:.2f} s)")


if __name__ == "__main__":
    main()

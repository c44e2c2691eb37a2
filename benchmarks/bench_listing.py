"""Listing and scanning speed: what `runs` and `module_list` cost on big inputs.

    python benchmarks/bench_listing.py [--sessions 500] [--xplane-mb 20] [--gcs-objects 200] [--loose-json 200]
    python benchmarks/bench_listing.py --sessions 5000 --xplane-mb 300 --gcs-objects 2000 --loose-json 2000
                                       # docs/performance.md

Prints, for each case, wall time and the peak RSS of a fresh process:
  1. discovering runs in a local log directory with many sessions (cold, then cached);
     then with many loose *.json[.gz] files whose first bytes decide (sniffed once each);
  2. listing the modules of a large xplane by scanning it on the wire, against parsing
     the whole XSpace with protobuf (what a naive reader does);
  3. listing a gs:// bucket with many objects through gcsfs and a local GCS emulator.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"


def child(code: str) -> dict:
    """Run ``code`` in a fresh interpreter; it prints a JSON dict; add its peak RSS.

    Peak RSS is VmHWM: unlike ru_maxrss it is not inherited from the forking parent.
    """
    wrapper = code + (
        "\nimport json as _j\n"
        "_hwm = next(l for l in open('/proc/self/status') if l.startswith('VmHWM'))\n"
        "RESULT['peak_rss_mb'] = int(_hwm.split()[1]) / 1024\nprint(_j.dumps(RESULT))"
    )
    out = subprocess.run([sys.executable, "-c", wrapper], capture_output=True, text=True, check=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def bench_sessions(n: int, tmp: Path) -> None:
    logdir = tmp / "many"
    xplane = next(DEMO.glob("mlp/plugins/profile/*/demo-host.xplane.pb")).read_bytes()
    for i in range(n):
        d = logdir / f"exp{i % 50}" / "plugins" / "profile" / f"2026_01_01_00_{i // 60 % 60:02d}_{i % 60:02d}_{i}"
        d.mkdir(parents=True)
        (d / "host.xplane.pb").write_bytes(xplane[:64])
        (d / "host.trace.json.gz").write_bytes(b"")
    r = child(f"""
import time
from profscope.storage import LogDir
from profscope.app.discovery import discover
t = time.perf_counter(); logdir = LogDir({str(logdir)!r}); runs = discover(logdir.listing()); cold = time.perf_counter() - t
t = time.perf_counter(); runs = discover(logdir.listing()); warm = time.perf_counter() - t
RESULT = dict(runs=len(runs), cold_s=cold, cached_s=warm)
""")
    print(f"runs in a local logdir: {n} sessions ({2 * n} files): {r['runs']} runs, "
          f"cold {r['cold_s']:.3f} s, cached listing {r['cached_s']:.3f} s, peak RSS {r['peak_rss_mb']:.0f} MB")


def bench_sniffed(n: int, tmp: Path) -> None:
    """n loose *.json[.gz] files outside sessions, half Chrome traces (renamed copies of
    the demo's PyTorch trace), half other JSON: each one's head is read once."""
    logdir = tmp / "loose"
    trace = (DEMO / "torch" / "mlp_train.pt.trace.json.gz").read_bytes()
    config = json.dumps({"schemaVersion": 2, "mediaType": "x", "layers": list(range(2000))}).encode()
    for i in range(n):
        d = logdir / f"job{i % 50}"
        d.mkdir(parents=True, exist_ok=True)
        (d / (f"rank-{i}.json.gz" if i % 2 else f"config-{i}.json")).write_bytes(trace if i % 2 else config)
    r = child(f"""
import time
from profscope.storage import LogDir
from profscope.app.discovery import discover
logdir = LogDir({str(logdir)!r}, listing_ttl=0)
t = time.perf_counter(); runs = discover(logdir.listing()); cold = time.perf_counter() - t
t = time.perf_counter(); runs = discover(logdir.listing()); warm = time.perf_counter() - t
RESULT = dict(runs=len(runs), cold_s=cold, relisted_s=warm)
""")
    print(f"runs among {n} loose *.json[.gz] files (half traces): {r['runs']} runs, first listing (sniffing) "
          f"{r['cold_s']:.3f} s, listed again (nothing read) {r['relisted_s']:.3f} s, peak RSS {r['peak_rss_mb']:.0f} MB")


def bench_big_xplane(target_mb: int, tmp: Path) -> None:
    from profscope.formats.protos import xplane_pb2

    base = next(DEMO.glob("transformer/plugins/profile/*/demo-host.xplane.pb")).read_bytes()
    space = xplane_pb2.XSpace.FromString(base)
    cpu = next(p for p in space.planes if p.name == "/host:CPU")
    # Grow one host plane with many copies of its lines: a long real trace.
    copies = max(1, int(target_mb * 1e6 // max(cpu.ByteSize(), 1)))
    lines = list(cpu.lines)
    for i in range(copies):
        for line in lines:
            new = cpu.lines.add()
            new.CopyFrom(line)
            new.id = line.id + 1000 * (i + 1)
    path = tmp / "big.xplane.pb"
    path.write_bytes(space.SerializeToString())
    size_mb = path.stat().st_size / 1e6
    del space, cpu
    scan = child(f"""
import time
from profscope.formats import xplane
t = time.perf_counter()
with open({str(path)!r}, 'rb') as f: modules = xplane.hlo_modules(f, 'big')
RESULT = dict(seconds=time.perf_counter() - t, modules=len(modules))
""")
    full = child(f"""
import time
from profscope.formats.protos import xplane_pb2
t = time.perf_counter()
space = xplane_pb2.XSpace.FromString(open({str(path)!r}, 'rb').read())
RESULT = dict(seconds=time.perf_counter() - t, modules=0)
""")
    print(f"module_list of a {size_mb:.0f} MB xplane: wire scan {scan['seconds']:.3f} s, peak RSS {scan['peak_rss_mb']:.0f} MB "
          f"({scan['modules']} modules); full protobuf parse {full['seconds']:.2f} s, peak RSS {full['peak_rss_mb']:.0f} MB")


def bench_gcs(n: int) -> None:
    os.environ["GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT"] = "false"
    from concurrent.futures import ThreadPoolExecutor

    import gcsfs
    from gcp_storage_emulator.server import create_server

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = create_server("127.0.0.1", port, in_memory=True, default_bucket="bench")
    server.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        fs = gcsfs.GCSFileSystem(endpoint_url=endpoint, token="anon", skip_instance_cache=True)
        with ThreadPoolExecutor(8) as pool:
            list(pool.map(lambda i: fs.pipe(f"bench/logs/exp{i % 20}/plugins/profile/s{i}/h.xplane.pb", b"x"), range(n)))
        r = child(f"""
import os, time
os.environ['GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT'] = 'false'
from profscope.storage import LogDir
from profscope.app.discovery import discover
logdir = LogDir('gs://bench/logs', storage_options=dict(endpoint_url={endpoint!r}, token='anon'))
t = time.perf_counter(); runs = discover(logdir.listing()); cold = time.perf_counter() - t
RESULT = dict(runs=len(runs), seconds=cold)
""")
        print(f"runs in gs:// (emulator): {n} objects -> {r['runs']} runs in {r['seconds']:.2f} s (one recursive listing), "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
    finally:
        server.stop()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sessions", type=int, default=500)
    ap.add_argument("--xplane-mb", type=int, default=20)
    ap.add_argument("--gcs-objects", type=int, default=200)
    ap.add_argument("--loose-json", type=int, default=200)
    args = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus")
    with tempfile.TemporaryDirectory() as tmp:
        bench_sessions(args.sessions, Path(tmp))
        if args.loose_json:
            bench_sniffed(args.loose_json, Path(tmp))
        bench_big_xplane(args.xplane_mb, Path(tmp))
    if args.gcs_objects:
        bench_gcs(args.gcs_objects)


if __name__ == "__main__":
    main()

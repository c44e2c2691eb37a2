#!/usr/bin/env python3
"""Server start to first answer: ``profscope serve LOGDIR`` spawned, then the first HTTP
answer of each ``--path`` (the data API's run list by default, which needs the run
discovery) polled every 2 ms; a fresh process and a fresh cache folder per round. Also
prints the modules the server process imports before its first answer is possible
(``python -X importtime`` of the server package), the heaviest first.

Usage::

    .venv/bin/python benchmarks/bench_startup.py [LOGDIR] [--rounds 5] [--path /data/plugin/profile/runs]

LOGDIR defaults to the bundled demo log directory.
"""

from __future__ import annotations

import argparse
import http.client
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def first_answer(logdir: str, path: str, timeout: float = 30.0) -> tuple[float, int]:
    """Seconds from spawning the server to the first complete answer of ``path``."""
    port = free_port()
    with tempfile.TemporaryDirectory() as cache:
        t0 = time.perf_counter()
        proc = subprocess.Popen([str(VENV_BIN / "profscope"), "serve", logdir, "--port", str(port),
                                 "--cache-dir", cache], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            while time.perf_counter() - t0 < timeout:
                try:
                    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=timeout)
                    conn.request("GET", path)
                    resp = conn.getresponse()
                    resp.read()
                    return time.perf_counter() - t0, resp.status
                except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
                    if proc.poll() is not None:
                        raise SystemExit(f"the server exited: {proc.stderr.read().decode()}")
                    time.sleep(0.002)
            raise SystemExit(f"no answer within {timeout} s")
        finally:
            proc.terminate()
            proc.wait(10)


def heaviest_imports(n: int = 12) -> list[tuple[int, str]]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import profscope.server, profscope.cli"],
                         capture_output=True, text=True, check=True).stderr
    rows = []
    for line in out.splitlines():
        if line.startswith("import time:") and "|" in line:
            _, cumulative, name = line.split("|")
            if cumulative.strip().isdigit():
                rows.append((int(cumulative), name.rstrip()))
    return sorted(rows, reverse=True)[:n]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("logdir", nargs="?")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--path", action="append", help="default: /data/plugin/profile/runs and /")
    args = ap.parse_args()
    if args.logdir is None:
        from profscope.cli import demo_logdir

        args.logdir = str(demo_logdir())
    paths = args.path or ["/data/plugin/profile/runs", "/"]
    for path in paths:
        times = []
        for _ in range(args.rounds):
            seconds, status = first_answer(args.logdir, path)
            times.append(seconds)
        print(f"{path}: HTTP {status}, start to first answer median {statistics.median(times) * 1000:.0f} ms "
              f"(min {min(times) * 1000:.0f}, max {max(times) * 1000:.0f}; {args.rounds} rounds)")
    print("heaviest imports of the server package (cumulative us):")
    for us, name in heaviest_imports():
        print(f"  {us:>8} {name}")


if __name__ == "__main__":
    main()

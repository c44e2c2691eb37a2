#!/usr/bin/env python3
"""Server start to first answer: ``profscope serve LOGDIR`` spawned, then the first HTTP
answer of each ``--path`` (the data API's run list by default, which needs the run
discovery) polled every 2 ms; a fresh process and a fresh cache folder per round, the
paths interleaved round by round. Beside the wall time, the server process's CPU seconds
(user + system, /proc/PID/stat) when the answer came. ``/`` and the run lists are
answered before FastAPI is imported (server/quick_start.py); ``/static/app.js`` waits for
the whole app, so its time is the start of every other route. Also prints the modules
the server package imports (``python -X importtime``), the heaviest first.

Usage::

    .venv/bin/python benchmarks/bench_startup.py [LOGDIR] [--rounds 5] [--path /data/plugin/profile/runs]

LOGDIR defaults to the bundled demo log directory.
"""

from __future__ import annotations

import argparse
import os
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


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def first_answer(logdir: str, path: str, timeout: float = 30.0) -> tuple[float, int, float]:
    """Seconds from spawning the server to the first complete answer of ``path``, its
    status, and the server's CPU seconds by then."""
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
                    return time.perf_counter() - t0, resp.status, cpu_seconds(proc.pid)
                except (ConnectionRefusedError, ConnectionResetError, http.client.RemoteDisconnected):
                    if proc.poll() is not None:
                        raise SystemExit(f"the server exited: {proc.stderr.read().decode()}")
                    time.sleep(0.002)
            raise SystemExit(f"no answer within {timeout} s")
        finally:
            proc.terminate()
            proc.wait(10)


def heaviest_imports(n: int = 12) -> list[tuple[int, str]]:
    out = subprocess.run([sys.executable, "-X", "importtime", "-c", "import profscope.server.app, profscope.cli"],
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
    paths = args.path or ["/data/plugin/profile/runs", "/", "/static/app.js"]
    times: dict[str, list[float]] = {p: [] for p in paths}
    cpu: dict[str, list[float]] = {p: [] for p in paths}
    status: dict[str, int] = {}
    for i in range(args.rounds):
        for path in paths[i % len(paths):] + paths[:i % len(paths)]:  # rotated per round
            seconds, status[path], cpu_s = first_answer(args.logdir, path)
            times[path].append(seconds)
            cpu[path].append(cpu_s)
    for path in paths:
        t = times[path]
        print(f"{path}: HTTP {status[path]}, start to first answer median {statistics.median(t) * 1000:.0f} ms "
              f"(min {min(t) * 1000:.0f}, max {max(t) * 1000:.0f}; {args.rounds} rounds), server CPU by then "
              f"median {statistics.median(cpu[path]) * 1000:.0f} ms")
    print("heaviest imports of the server package (cumulative us):")
    for us, name in heaviest_imports():
        print(f"  {us:>8} {name}")


if __name__ == "__main__":
    main()

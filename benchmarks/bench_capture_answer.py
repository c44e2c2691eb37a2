"""What one oversized capture answer costs the server (issue 32 item 2).

A ``profscope serve --demo`` in its own process captures, through ``POST /api/capture``,
from ``profscope.testing.hostile_profiler`` (another process) answering an XSpace of
``--answer-mib`` MiB at once; the server's peak RSS (``VmHWM`` of its own process: the
capture runs there, not in a conversion worker) and RSS before are read from /proc.

    .venv/bin/python benchmarks/bench_capture_answer.py --answer-mib 256
    .venv/bin/python benchmarks/bench_capture_answer.py --answer-mib 256 -- --capture-max-bytes 64MiB
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request


def _status_kib(pid: int, field: str) -> int:
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M).group(1))


def measure(answer_mib: float, serve_args: list[str]) -> dict:
    job = subprocess.Popen([sys.executable, "-m", "profscope.testing.hostile_profiler", "--answer-mib", str(answer_mib)],
                           stdout=subprocess.PIPE, text=True)
    with tempfile.TemporaryDirectory() as tmp:
        server = subprocess.Popen([sys.executable, "-m", "profscope", "serve", "--demo", "--port", "0",
                                   "--cache-dir", os.path.join(tmp, "cache"), *serve_args],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
        try:
            target = job.stdout.readline().strip()
            url = None
            for line in server.stdout:
                m = re.search(r"serving at (http://\S+)", line)
                if m:
                    url = m.group(1)
                    break
            assert url, "profscope did not start"
            before = _status_kib(server.pid, "VmRSS")
            req = urllib.request.Request(url + "api/capture", data=json.dumps({"targets": target, "durationMs": 100}).encode(),
                                         headers={"content-type": "application/json"}, method="POST")
            started = json.load(urllib.request.urlopen(req, timeout=60))
            t0 = time.monotonic()
            while not (state := json.load(urllib.request.urlopen(url + f"api/capture/job/{started['id']}", timeout=60)))["done"]:
                assert time.monotonic() - t0 < 300, state
                time.sleep(0.1)
            peak = _status_kib(server.pid, "VmHWM")
            host = state["hosts"][0]
            return {"answerMiB": answer_mib, "serveArgs": " ".join(serve_args), "stage": state["stage"],
                    "hostState": host["state"], "bytes": host["bytes"], "error": host["error"],
                    "rssBeforeMB": round(before / 1024), "peakRssMB": round(peak / 1024),
                    "growthMB": round((peak - before) / 1024)}
        finally:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
            job.kill()
            job.wait()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--answer-mib", type=float, default=256)
    parser.add_argument("serve_args", nargs="*", help="more `profscope serve` options, after --")
    args = parser.parse_args()
    print(json.dumps(measure(args.answer_mib, args.serve_args)))


if __name__ == "__main__":
    main()

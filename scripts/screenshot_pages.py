"""Screenshots of every page profscope serves for a log directory (the bundled demo by
default), for a person to look at before calling a page done.

    .venv/bin/python scripts/screenshot_pages.py --out /tmp/shots

It starts ``profscope serve`` on a free port, opens each page in headless Chromium
(Debian's package, through Playwright; ``--chromium`` or $CHROMIUM, never a downloaded
browser), waits for the page's requests to settle and saves one full-page PNG per page,
named after the page. ``--only`` picks pages by name (repeatable)."""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from urllib.parse import urlencode

# (file name, the dashboard's URL keys): a page per tool on each kind of demo run, plus
# the states a user reaches by clicking (a zoom, a selected event, a compare).
DEMO_PAGES = [
    ("overview", {}),
    ("memory_viewer_mlp", {"run": "mlp/2026_11_29_19_47_08", "tool": "memory_viewer"}),
    ("memory_viewer_transformer", {"run": "transformer/2026_11_29_19_47_16", "tool": "memory_viewer"}),
    ("memory_viewer_dump", {"run": "dumps/mlp", "tool": "memory_viewer"}),
    ("memory_profile_tf_bfc", {"run": "tf_bfc/2026_11_29_18_51_13", "tool": "memory_profile"}),
    ("memory_profile_torch_trace", {"run": "torch/transformer_train.pt.trace.json.gz", "tool": "memory_profile"}),
    ("memory_profile_torch_leak", {"run": "torch/leak.pt.trace.json.gz", "tool": "memory_profile"}),
    ("snapshot_training", {"run": "torch_snapshots/cs336_train_step_amp.pickle", "tool": "memory_profile"}),
    ("snapshot_training_segments", {"run": "torch_snapshots/cs336_train_step_amp.pickle", "tool": "memory_profile", "tl": "segments"}),
    ("snapshot_flexgen_oom", {"run": "torch_snapshots/flexgen_oom.pickle", "tool": "memory_profile"}),
    ("trace_viewer_mlp", {"run": "mlp/2026_11_29_19_47_08", "tool": "trace_viewer"}),
    ("trace_viewer_torch", {"run": "torch/transformer_train.pt.trace.json.gz", "tool": "trace_viewer"}),
    ("trace_viewer_outside", {"run": "mlp/2026_11_29_19_47_08", "tool": "trace_viewer", "start_ms": "900000", "end_ms": "900100"}),
    ("oom_risk_mlp", {"run": "mlp/2026_11_29_19_47_08", "tool": "oom_risk", "capacity": "8MiB"}),
    ("oom_risk_snapshot", {"run": "torch_snapshots/flexgen_oom.pickle", "tool": "oom_risk"}),
    ("oom_risk_torch_trace", {"run": "torch/transformer_train.pt.trace.json.gz", "tool": "oom_risk"}),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path, help="folder for the PNGs")
    ap.add_argument("--logdir", help="log directory to serve (default: the bundled demo, with its pages)")
    ap.add_argument("--page", action="append", default=[], metavar="NAME=QUERY",
                    help="a page of your own: a name and the dashboard's query (run=...&tool=...); repeatable")
    ap.add_argument("--only", action="append", default=[], metavar="NAME", help="only these pages (repeatable)")
    ap.add_argument("--chromium", default=os.environ.get("CHROMIUM", "/usr/bin/chromium"))
    ap.add_argument("--settle", type=float, default=1.5, help="seconds to wait after the network is idle (charts draw)")
    args = ap.parse_args(argv)

    from playwright.sync_api import sync_playwright

    pages = [] if args.logdir else list(DEMO_PAGES)
    for spec in args.page:
        name, _, query = spec.partition("=")
        pages.append((name, dict(kv.split("=", 1) for kv in query.split("&") if "=" in kv)))
    if args.only:
        pages = [p for p in pages if p[0] in args.only]
    args.out.mkdir(parents=True, exist_ok=True)

    serve = [sys.executable, "-m", "profscope", "serve", "--port", "0"] + ([args.logdir] if args.logdir else ["--demo"])
    server = subprocess.Popen(serve, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        base = None
        deadline = time.monotonic() + 60
        while base is None and time.monotonic() < deadline:
            line = server.stdout.readline()
            if not line and server.poll() is not None:
                raise SystemExit(f"profscope serve exited with {server.returncode}")
            m = re.search(r"http://127\.0\.0\.1:\d+/\S*", line)
            base = m.group(0).rstrip("/") if m else None
        if base is None:
            raise SystemExit("profscope serve printed no URL within 60 s")
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=args.chromium)
            ctx = browser.new_context(viewport={"width": 1400, "height": 900}, locale="en-US")
            for name, query in pages:
                page = ctx.new_page()
                page.goto(f"{base}/?{urlencode(query)}", wait_until="networkidle", timeout=120_000)
                # A first open converts the run in a worker while the page says so: wait
                # for the answer, not only for the network.
                busy = page.get_by_text(re.compile(r"^(Loading|Converting|Reading)", re.I))
                deadline = time.monotonic() + 120
                while busy.count() and time.monotonic() < deadline:
                    page.wait_for_timeout(250)
                page.wait_for_timeout(args.settle * 1000)
                path = args.out / f"{name}.png"
                page.screenshot(path=str(path), full_page=True)
                print(f"{path}  {page.url}")
                page.close()
            browser.close()
    finally:
        server.terminate()
        server.wait(10)
    return 0


if __name__ == "__main__":
    sys.exit(main())

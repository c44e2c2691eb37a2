"""A bounded load test (issue 18): N simulated users browse a pod session on a real
``profscope serve`` subprocess, on 127.0.0.1 only, for D seconds, with a cold cache, so
the first requests start the conversions and the rest run while hosts are converting.

Each user loops through what a person browsing does: the page, the run list, the run,
a random host's whole trace then a random window inside its span, a search on that
host, its memory profile, its OOM risk, the progress API. Every request has a timeout;
after D seconds no new request starts, the ones in flight get at most their timeout,
and the server (and its workers) is stopped. ``benchmarks/bench_load.py`` and
``tests/test_load.py`` both call ``run_load``.

Counted as errors: any 5xx, any exception or timeout. A 4xx is counted apart, by route,
with its body: the API documents none for these requests on a session that converts
(a host still converting is waited for, not a 404), so a test treats every 4xx as a
failure too."""

from __future__ import annotations

import asyncio
import os
import random
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path

ROUTES = ("page", "runs", "run", "trace_window", "trace_search", "memory_profile", "oom_risk", "progress")
SEARCH_WORDS = ("conv", "MatMul", "python", "Memcpy", "fusion", "step", "Eigen", "jit")


@dataclass
class Sample:
    route: str
    url: str
    status: int | None  # None: no answer (exception, timeout)
    seconds: float
    error: str | None = None  # the exception, or the start of a 4xx/5xx body
    at: float = 0.0  # when it was sent, seconds after the users started


@dataclass
class LoadResult:
    users: int
    seconds: float
    dask_workers: int
    samples: list[Sample]
    wall_s: float
    server_hwm_mb: float  # VmHWM of the server process
    children_hwm_mb: dict[int, float]  # VmHWM of each process under it (workers, Dask)
    tree_peak_rss_mb: float  # highest sampled sum of VmRSS over the whole tree
    cache_entries: int
    hosts_with_trace: int
    hosts: int
    dask_done: tuple[int, int] | None = None
    server_output: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def errors(self) -> list[Sample]:
        return [s for s in self.samples if s.status is None or s.status >= 500]

    @property
    def client_errors(self) -> list[Sample]:
        return [s for s in self.samples if s.status is not None and 400 <= s.status < 500]

    def all_hosts_answered_at(self) -> float | None:
        """When the last host's whole trace (its index built) first answered, seconds
        after the users started; None if some host never did."""
        first: dict[str, float] = {}
        for s in self.samples:
            if s.route == "trace_window" and s.status == 200 and "start_ms" not in s.url:
                host = s.url.split("host=")[1].split("&")[0]
                first[host] = min(first.get(host, s.at + s.seconds), s.at + s.seconds)
        return max(first.values()) if len(first) == self.hosts else None

    def routes_answered(self) -> set[str]:
        return {s.route for s in self.samples if s.status is not None and s.status < 400}


# -- the server and its memory -------------------------------------------------------

def _status_kb(pid: int, field_name: str) -> float:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return 0.0
    m = re.search(rf"^{field_name}:\s+(\d+) kB", text, re.M)
    return float(m.group(1)) if m else 0.0


def _tree(pid: int) -> list[int]:
    """pid and every process below it (forked conversion workers, Dask nanny/workers)."""
    parents: dict[int, list[int]] = defaultdict(list)
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            stat = Path(f"/proc/{d}/stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rsplit(")", 1)[1].split()[1])
        parents[ppid].append(int(d))
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += parents.get(p, [])
    return out


class MemoryWatch:
    """Samples the server's process tree every ``every`` s: VmHWM per process (a
    short-lived worker's peak is caught if it lives one interval) and the total VmRSS."""

    def __init__(self, pid: int, every: float = 0.25):
        self.pid, self.every = pid, every
        self.hwm_kb: dict[int, float] = {}
        self.peak_total_kb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self.sample()
        self._stop.set()
        self._thread.join(timeout=5)

    def sample(self) -> None:
        total = 0.0
        for p in _tree(self.pid):
            hwm = _status_kb(p, "VmHWM")
            if hwm:
                self.hwm_kb[p] = max(self.hwm_kb.get(p, 0.0), hwm)
            total += _status_kb(p, "VmRSS")
        self.peak_total_kb = max(self.peak_total_kb, total)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self.sample()


def start_server(logdir: Path, cache_dir: Path, *, dask_workers: int = 0, timeout: float = 120):
    """``python -m profscope serve`` on 127.0.0.1, a free port: answer (process, base URL, output lines)."""
    args = [sys.executable, "-m", "profscope", "serve", str(logdir), "--host", "127.0.0.1", "--port", "0",
            "--no-capture", "--cache-dir", str(cache_dir)]
    if dask_workers:
        args += ["--dask-workers", str(dask_workers)]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)  # its own group: stopped with all its workers
    lines: list[str] = []
    found: list[str] = []

    def read():
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"serving at (http://\S+)", line)
            if m and not found:
                found.append(m.group(1).rstrip("/"))

    threading.Thread(target=read, daemon=True).start()
    deadline = time.monotonic() + timeout
    while not found:
        if proc.poll() is not None or time.monotonic() > deadline:
            stop_server(proc)
            raise RuntimeError("profscope serve did not start:\n" + "".join(lines))
        time.sleep(0.05)
    return proc, found[0], lines


def stop_server(proc: subprocess.Popen, timeout: float = 20) -> None:
    """SIGTERM to the server's process group, SIGKILL if it is not gone in ``timeout`` s."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=timeout)
    try:  # a worker left behind in the group
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


# -- the users ----------------------------------------------------------------------

async def _user(client, run: str, hosts: list[str], deadline: float, rng: random.Random,
                            samples: list[Sample], think_s: float, trace_hosts: set[str], started: float) -> None:
    async def get(route: str, path: str, **params):
        if time.monotonic() >= deadline:
            raise _Done
        t0 = time.perf_counter()
        at = time.monotonic() - started
        try:
            res = await client.get(path, params=params)
        except Exception as e:  # timeouts, refused or dropped connections: all errors
            samples.append(Sample(route, _url(path, params), None, time.perf_counter() - t0, f"{type(e).__name__}: {e}", at))
            return None
        s = Sample(route, _url(path, params), res.status_code, time.perf_counter() - t0, at=at)
        if res.status_code >= 400:
            s.error = res.text[:300]
        samples.append(s)
        if think_s:
            await asyncio.sleep(rng.uniform(0, 2 * think_s))
        return res if res.status_code < 400 else None

    try:
        while True:
            await get("page", "/")
            await get("runs", "/api/runs")
            await get("run", "/api/run", run=run)
            host = rng.choice(hosts)
            whole = await get("trace_window", "/api/trace/window", run=run, host=host)
            if whole is not None:
                trace_hosts.add(host)
                lo, hi = whole.json().get("fullTimespan") or (0.0, 0.0)
                if hi > lo:
                    a, b = sorted(rng.uniform(lo, hi) for _ in range(2))
                    await get("trace_window", "/api/trace/window", run=run, host=host,
                              start_ms=f"{a:.6f}", end_ms=f"{max(b, a + 1e-3):.6f}")
            await get("trace_search", "/api/trace/search", run=run, host=host, q=rng.choice(SEARCH_WORDS))
            await get("memory_profile", "/data/plugin/profile/data", run=run, tag="memory_profile", host=host)
            await get("oom_risk", "/data/plugin/profile/data", run=run, tag="oom_risk", host=host)
            await get("progress", "/api/progress")
    except _Done:
        return


class _Done(Exception):
    pass


def _url(path: str, params: dict) -> str:
    return path + ("?" + "&".join(f"{k}={v}" for k, v in params.items()) if params else "")


async def _browse(base: str, run: str, hosts: list[str], users: int, seconds: float, timeout: float,
                  seed: int, think_s: float) -> tuple[list[Sample], set[str]]:
    import httpx

    samples: list[Sample] = []
    trace_hosts: set[str] = set()
    started = time.monotonic()
    deadline = started + seconds
    limits = httpx.Limits(max_connections=users, max_keepalive_connections=users)
    async with httpx.AsyncClient(base_url=base, timeout=timeout, limits=limits, trust_env=False) as client:
        tasks = [asyncio.create_task(_user(client, run, hosts, deadline, random.Random(seed + i), samples,
                                           think_s, trace_hosts, started)) for i in range(users)]
        # After the deadline, a request in flight has at most its own timeout left
        # (it then counts as an error); the margin covers the client's own overhead.
        done, pending = await asyncio.wait(tasks, timeout=seconds + timeout + 10)
        for t in pending:
            t.cancel()
        for t in done:
            t.result()  # a bug in the user loop itself: raise it
    return samples, trace_hosts


def run_load(logdir: Path, *, run: str, hosts: list[str], users: int = 20, seconds: float = 60,
             timeout: float = 60, dask_workers: int = 0, seed: int = 0, think_s: float = 0.0,
             cache_dir: Path | None = None) -> LoadResult:
    """Start the server on a fresh cache folder, browse, stop it; answer what happened."""
    with tempfile.TemporaryDirectory(prefix="profscope-load-") as tmp:
        cache = Path(cache_dir) if cache_dir else Path(tmp) / "cache"
        t0 = time.monotonic()
        proc, base, lines = start_server(logdir, cache, dask_workers=dask_workers)
        assert base.startswith("http://127.0.0.1:"), base  # loopback only
        try:
            with MemoryWatch(proc.pid) as mem:
                samples, trace_hosts = asyncio.run(_browse(base, run, hosts, users, seconds, timeout, seed, think_s))
                dask_done = None
                if dask_workers:
                    import httpx

                    body = httpx.get(f"{base}/api/convert", params={"run": run}, timeout=timeout).json()
                    dask_done = (body["done"], body["total"])
        finally:
            stop_server(proc)
        wall = time.monotonic() - t0
        entries = sum(1 for p in cache.rglob("*") if p.is_file() and p.suffix != ".lock")
    hwm = mem.hwm_kb
    return LoadResult(users=users, seconds=seconds, dask_workers=dask_workers, samples=samples, wall_s=wall,
                      server_hwm_mb=hwm.get(proc.pid, 0.0) / 1024,
                      children_hwm_mb={p: kb / 1024 for p, kb in hwm.items() if p != proc.pid},
                      tree_peak_rss_mb=mem.peak_total_kb / 1024, cache_entries=entries,
                      hosts_with_trace=len(trace_hosts), hosts=len(hosts), dask_done=dask_done,
                      server_output="".join(lines))


# -- the report ---------------------------------------------------------------------

def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    v = sorted(values)
    return v[min(len(v) - 1, max(0, round(q / 100 * len(v) + 0.5) - 1))]  # nearest rank


def latency_rows(result: LoadResult) -> list[dict]:
    by_route: dict[str, list[Sample]] = defaultdict(list)
    for s in result.samples:
        by_route[s.route].append(s)
    rows = []
    for route in ("all", *ROUTES):
        ss = result.samples if route == "all" else by_route.get(route, [])
        ms = [s.seconds * 1000 for s in ss]
        rows.append({"route": route, "requests": len(ss),
                     "errors": sum(1 for s in ss if s.status is None or s.status >= 500),
                     "4xx": sum(1 for s in ss if s.status is not None and 400 <= s.status < 500),
                     "p50": _pct(ms, 50), "p90": _pct(ms, 90), "p99": _pct(ms, 99), "max": max(ms, default=float("nan"))})
    return rows


def markdown(result: LoadResult) -> str:
    mode = f"--dask-workers {result.dask_workers}" if result.dask_workers else "forked workers (default)"
    out = [f"{result.users} users, {result.seconds:g} s, {result.hosts}-host session, {mode}; "
           f"{len(result.samples)} requests ({len(result.samples) / result.seconds:.1f}/s), "
           f"{len(result.errors)} errors, {len(result.client_errors)} 4xx", "",
           "| route | requests | errors | 4xx | p50 ms | p90 ms | p99 ms | max ms |",
           "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in latency_rows(result):
        out.append(f"| {r['route']} | {r['requests']} | {r['errors']} | {r['4xx']} | {r['p50']:.0f} | "
                   f"{r['p90']:.0f} | {r['p99']:.0f} | {r['max']:.0f} |")
    kids = sorted(result.children_hwm_mb.values(), reverse=True)
    out += ["", f"server peak RSS (VmHWM): {result.server_hwm_mb:.0f} MB; "
            f"{len(kids)} child process(es), largest VmHWM {', '.join(f'{k:.0f}' for k in kids[:4]) or '-'} MB; "
            f"whole tree, highest sampled RSS: {result.tree_peak_rss_mb:.0f} MB",
            f"converted by the end: {result.hosts_with_trace}/{result.hosts} hosts answered their whole trace (a host converts when first opened), "
            f"{result.cache_entries} cache entries"
            + (f", Dask {result.dask_done[0]}/{result.dask_done[1]} trace indexes done" if result.dask_done else "")
            + (f"; every host's trace had answered {t:.1f} s in" if (t := result.all_hosts_answered_at()) is not None else ""),
            f"wall time with server start and stop: {result.wall_s:.1f} s"]
    bad = Counter((s.route, s.status, (s.error or "")[:160]) for s in result.errors + result.client_errors)
    if bad:
        out += ["", "failures (route, status, first request, message):"]
        first = {}
        for s in result.errors + result.client_errors:
            first.setdefault((s.route, s.status, (s.error or "")[:160]), s.url)
        for (route, status, msg), n in bad.most_common():
            out.append(f"- {n}x {route} {status}: `{first[(route, status, msg)]}`: {msg}")
    return "\n".join(out)

"""Run mutants (a) straight into the readers, in a worker process, and (b) through a
real ``profscope serve`` subprocess, hitting every endpoint a browser would for each
run; collect per-format counts, failures with their signatures, peak RSS of the server
process tree over its baseline, and another client's latency meanwhile.

A hang is counted in CPU seconds, not wall time: a reader step's CPU time in the worker,
and a request's CPU time in the server's process tree (conversion workers included), past
``HANG_S``. A busy machine stretches wall time several-fold, not CPU time (issue 30: on a
shared 2-core machine a legitimate xplane mutant crossed the old 10 s wall limit at
13.6-25.4 s). Wall time only backs that up (``BACKSTOP_S``): a worker or a request stuck
that long, burning CPU or not, is a hang and is killed.

Every process started here (the reader worker, ``profscope serve``) runs in its own
process group, killed with all its children when a run ends however it ends: an
exception, Ctrl+C, SIGTERM (turned into an exception while a run is going), or the
interpreter's exit.

Nothing here imports profscope's readers or server: the worker and the server run
under the interpreter and ``PYTHONPATH`` given (:class:`Target`), so the same driver measures an older
checkout (the BEFORE table) and the current tree (AFTER)."""

from __future__ import annotations

import atexit
import json
import os
import queue
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import quote

import httpx

from profscope.testing.fuzz.mutators import Mutant

HANG_S = 10.0  # CPU seconds: a reader step, or a request's work in the server tree, past this is a hang (issue 13)
# Wall seconds: a reader worker silent for this long on one mutant, or a request unanswered
# for this long, is stuck and killed (a hang whatever its CPU time). Generous: only a real
# hang gets there, never a busy machine.
BACKSTOP_S = float(os.environ.get("PROFSCOPE_FUZZ_BACKSTOP_S", "120"))
RSS_BOUND_MB = 500  # the stated bound: peak RSS over baseline, per mutant
MAX_STEPS = 5  # a mutant's CPU budget, all its steps together: MAX_STEPS x HANG_S (5 steps per xplane)
KILL_MB = int(os.environ.get("PROFSCOPE_FUZZ_KILL_MB", "3000"))  # past this the process is killed (shared machine)
SAMPLE_S = 0.02
WORKER = Path(__file__).with_name("reader_worker.py")


@dataclass
class Target:
    """Which profscope runs: an interpreter and, optionally, a source folder put first on
    PYTHONPATH (an older checkout's ``src``)."""

    python: str = sys.executable
    src: str | None = None

    def env(self) -> dict:
        env = dict(os.environ)
        if self.src:
            env["PYTHONPATH"] = self.src + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
        env.pop("PROFSCOPE_TOKEN", None)
        return env


# -- process-tree memory ---------------------------------------------------------------

def _rss_kb(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(x) for x in f.read().split()]
    except OSError:
        pass
    return out


def _cpu_ticks(pid: int) -> int:
    """utime + stime + cutime + cstime of pid (its reaped children included), in ticks."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return 0
    return sum(int(x) for x in fields[11:15])  # fields 14-17 of proc(5), counted from after "(comm)"


def _tree(pid: int) -> list[int]:
    out, todo, seen = [], [pid], set()
    while todo:
        p = todo.pop()
        if p not in seen:
            seen.add(p)
            out.append(p)
            todo += _children(p)
    return out


def tree_cpu_s(pid: int) -> float:
    """CPU seconds that pid and every live descendant have used, with the children they
    reaped (a forked conversion worker that finished counts in its parent)."""
    return sum(_cpu_ticks(p) for p in _tree(pid)) / os.sysconf("SC_CLK_TCK")


def tree_rss_mb(pid: int) -> float:
    """RSS of pid and every descendant (forked conversion workers included)."""
    total, todo, seen = 0, [pid], set()
    while todo:
        p = todo.pop()
        if p in seen:
            continue
        seen.add(p)
        total += _rss_kb(p)
        todo += _children(p)
    return total / 1024


class Sampler(threading.Thread):
    """Samples a process tree's RSS every 20 ms; ``window_peak`` is the peak since the
    last :meth:`reset`; kills the tree past ``kill_mb`` over the baseline."""

    def __init__(self, pid: int, on_kill=None):
        super().__init__(daemon=True)
        self.pid = pid
        self.baseline = tree_rss_mb(pid)
        self.window_peak = self.baseline
        self.killed = False
        self._stop = threading.Event()
        self._on_kill = on_kill

    def reset(self) -> float:
        now = tree_rss_mb(self.pid)
        self.window_peak = now
        return now

    def run(self) -> None:
        while not self._stop.wait(SAMPLE_S):
            r = tree_rss_mb(self.pid)
            if r > self.window_peak:
                self.window_peak = r
            if r - self.baseline > KILL_MB and not self.killed:
                self.killed = True
                if self._on_kill:
                    self._on_kill()

    def stop(self) -> None:
        self._stop.set()


# Every process group started here and not yet killed: killed at exit whatever happened.
_LIVE: set[subprocess.Popen] = set()


def _spawn(cmd: list[str], **kw) -> subprocess.Popen:
    """Popen in a new session (its own process group, which its forked workers share),
    remembered until :func:`_killpg`."""
    proc = subprocess.Popen(cmd, start_new_session=True, **kw)
    _LIVE.add(proc)
    return proc


def _killpg(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.wait(5)
    except subprocess.TimeoutExpired:
        pass
    _LIVE.discard(proc)


@atexit.register
def _kill_all() -> None:
    for proc in list(_LIVE):
        _killpg(proc)


class Interrupted(BaseException):
    """SIGTERM arrived during a run (raised in the main thread, so that every ``finally``
    runs and kills what the run started)."""


def _interruptible(run):
    """A run of mutants during which SIGTERM raises (see :func:`_sigterm_raises`)."""
    import functools

    @functools.wraps(run)
    def wrapper(*args, **kwargs):
        with _sigterm_raises():
            return run(*args, **kwargs)

    return wrapper


@contextmanager
def _sigterm_raises():
    """While a run is going, SIGTERM raises :class:`Interrupted` instead of ending the
    interpreter on the spot (which runs no ``finally`` and no ``atexit``): where the
    handler is the default one and this is the main thread."""
    import threading as _threading

    if _threading.current_thread() is not _threading.main_thread() or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def raise_(signum, frame):
        raise Interrupted("SIGTERM")

    signal.signal(signal.SIGTERM, raise_)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


# -- results -----------------------------------------------------------------------------

@dataclass
class FormatResult:
    fmt: str
    mode: str  # "readers" or "server"
    inputs: int = 0
    requests: int = 0
    s2xx: int = 0
    s4xx: int = 0
    s5xx: int = 0
    broken: int = 0  # a body that broke off mid-stream, or a 2xx that is not valid JSON
    hangs: int = 0
    conn_errors: int = 0  # no response at all (e.g. the connection dropped after a 500)
    bad_4xx_shape: int = 0
    masked: int = 0  # 4xx answers wrapping an unexpected exception or a killed worker (informational)
    rss_peak_mb: float = 0.0  # the largest peak over baseline of any mutant
    rss_over_bound: int = 0  # mutants whose peak over baseline passed RSS_BOUND_MB
    killed: int = 0  # worker/server killed past KILL_MB (counted in rss_over_bound too)
    bad_inputs: int = 0  # inputs with at least one failure
    latency_base_ms: list = field(default_factory=list)
    latency_ms: list = field(default_factory=list)
    secs: float = 0.0
    failures: list = field(default_factory=list)  # dicts: signature, mutant, detail
    notes: list = field(default_factory=list)  # the same, for the masked 4xx answers
    # per input: {"name", "steps": {step or endpoint: "ok" | status | exception}}, so that
    # two campaigns of one seed can be compared input by input (read before, refused now?)
    outcomes: list = field(default_factory=list)

    def fail(self, signature: str, mutant: Mutant, index: int, detail: str = "", counted: bool = True) -> None:
        """Record one failure (``counted=False``: a note, not a failure of the bound)."""
        (self.failures if counted else self.notes).append(
            {"signature": signature, "mutant": mutant.name, "index": index, "ops": mutant.ops[:6], "detail": detail[:400]})

    def summary(self) -> dict:
        d = {k: v for k, v in self.__dict__.items()
             if k not in ("failures", "notes", "outcomes", "latency_ms", "latency_base_ms")}
        for name, xs in (("latency", self.latency_ms), ("latency_base", self.latency_base_ms)):
            d[f"{name}_median_ms"] = round(statistics.median(xs), 1) if xs else None
            d[f"{name}_max_ms"] = round(max(xs), 1) if xs else None
        d["failures"] = len(self.failures)
        d["notes"] = len(self.notes)
        return d


def write_run(root: Path, m: Mutant) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for rel, data in m.files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(data)
    return root


# -- (a) readers -------------------------------------------------------------------------

class ReaderWorker:
    def __init__(self, target: Target):
        self.target = target
        self.proc: subprocess.Popen | None = None
        self.lines: queue.Queue = queue.Queue()

    sampler: Sampler | None = None

    def start(self) -> None:
        self.proc = proc = _spawn([self.target.python, str(WORKER)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, text=True, env=self.target.env())
        try:
            q = self.lines = queue.Queue()
            threading.Thread(target=lambda: [q.put(line) for line in proc.stdout] + [q.put(None)], daemon=True).start()
            try:
                first = q.get(timeout=BACKSTOP_S)
            except queue.Empty:
                first = None
            if not first or not json.loads(first).get("ready"):
                raise RuntimeError("reader worker did not start")
            self.sampler = Sampler(proc.pid, on_kill=lambda: _killpg(proc))
            self.sampler.start()
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        if self.sampler:
            self.sampler.stop()
            self.sampler = None
        if self.proc:
            _killpg(self.proc)
            self.proc = None

    def run(self, fmt: str, d: Path, timeout: float) -> dict | str:
        """The worker's answer, or "hang" (no answer after ``timeout`` wall seconds or
        ``HANG_S * MAX_STEPS`` CPU seconds) / "killed" / "crashed"."""
        if self.proc is None:
            self.start()
        self.sampler.reset()
        self.sampler.killed = False
        cpu0 = tree_cpu_s(self.proc.pid)
        self.proc.stdin.write(json.dumps({"fmt": fmt, "dir": str(d)}) + "\n")
        self.proc.stdin.flush()
        # Given up on after `timeout` wall seconds, or sooner once the mutant has cost more
        # CPU than all its steps may together (a loop that burns CPU need not wait it out).
        deadline, line = time.monotonic() + timeout, None
        while True:
            try:
                line = self.lines.get(timeout=min(1.0, max(0.0, deadline - time.monotonic())))
                break
            except queue.Empty:
                if time.monotonic() >= deadline or tree_cpu_s(self.proc.pid) - cpu0 > HANG_S * MAX_STEPS:
                    self.stop()
                    return "hang"
        if line is None:
            killed = self.sampler.killed
            self.stop()
            return "killed" if killed else "crashed"
        return json.loads(line)


@_interruptible
def run_readers(fmt: str, mutants: list[Mutant], target: Target, work: Path, progress=None) -> FormatResult:
    res = FormatResult(fmt, "readers")
    worker = ReaderWorker(target)
    t0 = time.monotonic()
    # Per step: HANG_S CPU seconds; per mutant, every step together: BACKSTOP_S wall seconds.
    try:
        for i, m in enumerate(mutants):
            d = write_run(work / f"r{i:05d}", m)
            res.inputs += 1
            ans = worker.run(fmt, d, timeout=BACKSTOP_S)
            bad = False
            if isinstance(ans, str):
                bad = True
                if ans == "hang":
                    res.hangs += 1
                else:
                    res.killed += ans == "killed"
                    res.rss_over_bound += ans == "killed"
                res.fail(f"readers {fmt} {ans}", m, i)
            else:
                res.outcomes.append({"name": m.name, "steps": {
                    st["step"]: "ok" if st["outcome"] == "ok" else
                    (f"{st.get('status')} {st.get('msg', '')[:120]}" if st["outcome"] == "4xx" else st.get("exc"))
                    for st in ans["steps"]}})
                for st in ans["steps"]:
                    res.requests += 1
                    if st["outcome"] == "ok":
                        res.s2xx += 1
                    elif st["outcome"] == "4xx":
                        res.s4xx += 1
                    else:
                        res.s5xx += 1
                        bad = True
                        res.fail(f"readers {fmt} {st['step']} {st['exc']} @ {st.get('where', '')}", m, i, st.get("msg", ""))
                    if st["cpu"] > HANG_S:
                        res.hangs += 1
                        bad = True
                        res.fail(f"readers {fmt} {st['step']} slow>{HANG_S:g} CPU s", m, i,
                                 f"{st['cpu']} CPU s ({st['secs']} s wall)")
                over = ans.get("rss_over_mb", 0)
                res.rss_peak_mb = max(res.rss_peak_mb, over)
                if over > RSS_BOUND_MB:
                    res.rss_over_bound += 1
                    bad = True
                    res.fail(f"readers {fmt} rss>{RSS_BOUND_MB}MB", m, i, f"{over} MB")
            res.bad_inputs += bad
            shutil.rmtree(d, ignore_errors=True)
            if progress:
                progress(i)
    finally:
        worker.stop()
    res.secs = round(time.monotonic() - t0, 1)
    return res


# -- (b) the server ----------------------------------------------------------------------

class Server:
    def __init__(self, target: Target, logdir: Path, cache: Path):
        self.target, self.logdir, self.cache = target, logdir, cache
        self.proc: subprocess.Popen | None = None
        self.sampler: Sampler | None = None

    def start(self) -> None:
        cmd = [self.target.python, "-m", "profscope", "serve", str(self.logdir), "--port", "0",
               "--cache-dir", str(self.cache)]
        self.proc = proc = _spawn(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                                  env=self.target.env())
        try:
            # stdout is read on a thread, so that a server that never prints its URL is
            # given up on after BACKSTOP_S instead of holding the run for ever
            lines: queue.Queue = queue.Queue()
            threading.Thread(target=lambda: [lines.put(line) for line in proc.stdout] + [lines.put(None)],
                             daemon=True).start()
            deadline = time.monotonic() + BACKSTOP_S
            while True:
                try:
                    line = lines.get(timeout=max(0.0, deadline - time.monotonic()))
                except queue.Empty:
                    line = None
                if line is None:
                    raise RuntimeError("profscope serve did not start")
                m = re.search(r"serving at (http://127\.0\.0\.1:\d+)/", line)
                if m:
                    self.url = m.group(1)
                    break
            with httpx.Client(timeout=BACKSTOP_S) as c:
                c.get(self.url + "/api/runs")  # warm up imports before the baseline
            time.sleep(0.3)
            self.sampler = Sampler(proc.pid, on_kill=lambda: _killpg(proc))
            self.sampler.start()
        except BaseException:
            self.stop()
            raise

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def cpu_s(self) -> float:
        """CPU seconds the server's process tree has used so far."""
        return tree_cpu_s(self.proc.pid) if self.proc is not None else 0.0

    def stop(self) -> None:
        if self.sampler is not None:
            self.sampler.stop()
            self.sampler = None
        if self.proc is not None:
            _killpg(self.proc)
            self.proc = None


class Poller(threading.Thread):
    """Another user's session: GET /api/runs every 50 ms, recording each latency (an
    unanswered request counts as BACKSTOP_S: the client gives up then)."""

    def __init__(self, url: str):
        super().__init__(daemon=True)
        self.url = url
        self.latencies: list[float] = []
        self.stop_ev = threading.Event()

    def run(self) -> None:
        with httpx.Client(timeout=BACKSTOP_S) as c:
            while not self.stop_ev.wait(0.05):
                t = time.monotonic()
                try:
                    c.get(self.url + "/api/runs")
                except httpx.TimeoutException:
                    self.latencies.append(BACKSTOP_S * 1000)
                    continue
                except httpx.HTTPError:
                    pass  # the server is being restarted after a hang or a kill
                self.latencies.append((time.monotonic() - t) * 1000)


def baseline_latencies(url: str, seconds: float = 1.0) -> list[float]:
    """Another user's latencies over ``seconds`` with nothing hostile open."""
    base = Poller(url)
    base.start()
    time.sleep(seconds)
    base.stop_ev.set()
    base.join()
    return base.latencies


TOOLS = {
    "profile": ["memory_viewer", "memory_profile", "trace_viewer@", "oom_risk"],
    "xla_dump": ["memory_viewer", "oom_risk"],
    "torch_snapshot": ["memory_profile", "oom_risk"],
    "chrome_trace": ["memory_profile", "trace_viewer@", "oom_risk"],
}
SNAPSHOT_VIEWS = ["overview", "timeline", "state", "stack?stack=0", "stacks", "compare?other={run}"]


def error_kind(msg: str) -> str:
    """The exception of a 500's message, its text normalised (numbers, quoted names and
    paths blanked) so that one bug is one signature."""
    m = re.match(r"internal error: (\w+): ?(.*)", msg, re.S)
    if not m:
        return ""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "'…'", m.group(2))
    text = re.sub(r"\S*/\S*", "…", text)
    text = re.sub(r"\d+", "N", text)
    return f"{m.group(1)}: {text[:60]}".rstrip(": ")


def _is_json(resp_headers, body: bytes) -> bool:
    ctype = resp_headers.get("content-type", "")
    if "json" not in ctype:
        return True
    try:
        json.loads(body)
        return True
    except ValueError:
        return False


class Session:
    """One browser's requests for one run, recording outcomes into a FormatResult."""

    def __init__(self, server: Server, res: FormatResult, mutant: Mutant, index: int):
        self.server, self.res, self.m, self.i = server, res, mutant, index
        self.client = httpx.Client(timeout=BACKSTOP_S, headers={"Accept-Encoding": "gzip"})
        self.hung = False
        self.bad = False
        self.statuses: dict[str, str] = {}

    def close(self):
        self.client.close()

    def get(self, path: str, retry: bool = True) -> tuple[int, bytes] | None:
        """GET path; returns (status, body) or None on hang / no response."""
        if self.hung:
            return None
        url = self.server.url + path
        endpoint = path.split("?")[0]
        self.res.requests += 1
        t = time.monotonic()
        cpu0 = self.server.cpu_s()
        status = None
        try:
            with self.client.stream("GET", url) as r:
                status = r.status_code
                chunks = []
                for c in r.iter_bytes():
                    chunks.append(c)
                    if time.monotonic() - t > BACKSTOP_S:
                        raise httpx.ReadTimeout("total time")
                body = b"".join(chunks)
        except httpx.TimeoutException:
            self.res.hangs += 1
            self.hung = self.bad = True
            self.res.fail(f"server {self.res.fmt} {endpoint} stuck>{BACKSTOP_S:g}s", self.m, self.i,
                          f"{path} :: {self.server.cpu_s() - cpu0:.1f} CPU s")
            return None
        except httpx.HTTPError as e:
            if status is not None:
                self.res.broken += 1
                self.bad = True
                self.res.fail(f"server {self.res.fmt} {endpoint} {status} broke off ({type(e).__name__})", self.m, self.i, path)
                return None
            self.res.conn_errors += 1
            self.bad = True
            self.res.fail(f"server {self.res.fmt} {endpoint} no response ({type(e).__name__})", self.m, self.i, path)
            if retry and self.server.alive():
                # a new connection: learn the status the request itself gets
                self.client.close()
                self.client = httpx.Client(timeout=BACKSTOP_S, headers={"Accept-Encoding": "gzip"})
                self.res.requests -= 1
                return self.get(path, retry=False)
            return None
        cpu = self.server.cpu_s() - cpu0
        if cpu > HANG_S:
            # answered, but only after more CPU than a hostile file may cost
            self.res.hangs += 1
            self.bad = True
            self.res.fail(f"server {self.res.fmt} {endpoint} slow>{HANG_S:g} CPU s", self.m, self.i,
                          f"{path} :: {cpu:.1f} CPU s ({time.monotonic() - t:.1f} s wall)")
        self.statuses.setdefault(re.sub(r"(?<![a-z_])(run|other)=[^&]*&?", "", path).rstrip("?&")[:100], str(status))
        if 200 <= status < 300:
            self.res.s2xx += 1
            if not _is_json(r.headers, body):
                self.res.broken += 1
                self.bad = True
                self.res.fail(f"server {self.res.fmt} {endpoint} {status} invalid JSON body", self.m, self.i, path)
        elif 400 <= status < 500:
            self.res.s4xx += 1
            try:
                err = json.loads(body)
                ok = (isinstance(err, dict) and err.get("ok") is False and err.get("status") == status
                      and isinstance(err.get("error"), str) and "file" in err)
            except ValueError:
                ok = False
            if ok:
                # A 422 that wraps an unexpected reader exception (the worker's catch-all)
                # or a worker stopped by its limits: no 500, but worth counting apart.
                m = re.search(r"could not be read \((\w+): |conversion stopped \((\w+)", err["error"])
                if m:
                    self.res.masked += 1
                    self.res.fail(f"server {self.res.fmt} {endpoint} {status} masked {m.group(1) or m.group(2)}",
                                  self.m, self.i, f"{path} :: {err['error']}", counted=False)
            if not ok:
                self.res.bad_4xx_shape += 1
                self.bad = True
                self.res.fail(f"server {self.res.fmt} {endpoint} {status} not the error shape", self.m, self.i, body[:200].decode("utf-8", "replace"))
        else:
            self.res.s5xx += 1
            self.bad = True
            try:
                msg = json.loads(body).get("error", "")
            except (ValueError, AttributeError):
                msg = body[:200].decode("utf-8", "replace")
            self.res.fail(f"server {self.res.fmt} {endpoint} {status} {error_kind(msg)}".rstrip(), self.m, self.i, f"{path} :: {msg}")
        return status, body


def browse(s: Session, run: str, kind: str) -> None:
    """What a user's browser asks for one run (dashboard and XProf's page)."""
    q = quote(run, safe="")
    s.get("/api/runs")
    s.get(f"/api/run?run={q}")
    s.get(f"/data/plugin/profile/run_tools?run={q}")
    hosts_r = s.get(f"/data/plugin/profile/hosts?run={q}")
    host = None
    if hosts_r and hosts_r[0] == 200:
        try:
            hs = json.loads(hosts_r[1])
            host = hs[0]["hostname"] if hs else None
        except (ValueError, KeyError, TypeError, IndexError):
            pass
    mods_r = s.get(f"/data/plugin/profile/module_list?run={q}")
    modules = []
    if mods_r and mods_r[0] == 200:
        modules = [m for m in mods_r[1].decode("utf-8", "replace").split(",") if m and m != "NO_MODULE"][:2]
    hq = f"&host={quote(host, safe='')}" if host and host != "ALL_HOSTS" else ""
    for tool in TOOLS.get(kind, []):
        if tool == "memory_viewer":
            for mod in modules or [""]:
                mq = f"&module_name={quote(mod, safe='')}" if mod else ""
                s.get(f"/data/plugin/profile/data?run={q}&tag=memory_viewer{hq}{mq}&memory_space=0")
                if mod:
                    s.get(f"/data/plugin/profile/data?run={q}&tag=memory_viewer{hq}{mq}&view_memory_allocation_timeline=1")
        else:
            s.get(f"/data/plugin/profile/data?run={q}&tag={quote(tool)}{hq}")
    if kind in ("profile", "chrome_trace"):
        s.get(f"/api/trace/window?run={q}")
        s.get(f"/api/trace/search?run={q}&q=a")
        s.get(f"/api/trace/event?run={q}&id=0")
        s.get(f"/api/trace/export?run={q}")
    if kind == "torch_snapshot":
        for v in SNAPSHOT_VIEWS:
            v = v.format(run=q)
            s.get(f"/api/snapshot/{v}{'&' if '?' in v else '?'}run={q}")
    if kind == "chrome_trace":
        s.get(f"/api/memory_profile?run={q}")
    if kind in ("profile", "xla_dump"):
        s.get(f"/api/module_peaks?run={q}")


@_interruptible
def run_server(fmt: str, mutants: list[Mutant], target: Target, work: Path, progress=None) -> FormatResult:
    res = FormatResult(fmt, "server")
    logdir, cache = work / "logdir", work / "cache"
    shutil.rmtree(logdir, ignore_errors=True)
    shutil.rmtree(cache, ignore_errors=True)
    logdir.mkdir(parents=True)
    for i, m in enumerate(mutants):
        write_run(logdir / f"m{i:05d}", m)
    t0 = time.monotonic()
    server = Server(target, logdir, cache)
    poller = None
    try:
        server.start()
        with httpx.Client(timeout=BACKSTOP_S) as c:
            runs = c.get(server.url + "/api/runs").json()["runs"]
        by_folder: dict[str, list[tuple[str, str]]] = {}
        for r in runs:
            top = (r.get("folder") or r["name"]).split("/")[0]
            by_folder.setdefault(top, []).append((r["name"], r["kind"]))
        # another user's latency before any hostile file is opened
        res.latency_base_ms = baseline_latencies(server.url)
        poller = Poller(server.url)
        poller.start()
        for i, m in enumerate(mutants):
            res.inputs += 1
            if not server.alive():
                server.start()
                poller.url = server.url
            server.sampler.reset()
            found = by_folder.get(f"m{i:05d}", [])
            s = Session(server, res, m, i)
            try:
                for name, kind in found:
                    browse(s, name, kind)
            finally:
                s.close()
            over = max(0.0, server.sampler.window_peak - server.sampler.baseline)
            res.rss_peak_mb = max(res.rss_peak_mb, round(over, 1))
            if over > RSS_BOUND_MB or server.sampler.killed:
                res.rss_over_bound += 1
                res.killed += server.sampler.killed
                s.bad = True
                res.fail(f"server {fmt} rss>{RSS_BOUND_MB}MB" + (" (killed)" if server.sampler.killed else ""), m, i, f"{over:.0f} MB")
            res.bad_inputs += s.bad
            res.outcomes.append({"name": m.name, "steps": s.statuses})
            if s.hung or not server.alive():
                # a stuck conversion keeps its thread: start clean for the next mutant
                server.stop()
                server.start()
                poller.url = server.url
            if progress:
                progress(i)
    finally:
        # the server first: a poll waiting on it then ends at once, not after BACKSTOP_S
        server.stop()
        if poller:
            poller.stop_ev.set()
            poller.join()
            res.latency_ms = poller.latencies
    res.secs = round(time.monotonic() - t0, 1)
    return res


# -- the table ---------------------------------------------------------------------------

def table(results: list[FormatResult]) -> str:
    head = ("| format | mode | inputs | bad inputs | requests | 2xx | 4xx | 5xx | broken bodies | hangs >10 CPU s "
            "| no response | bad 4xx shape | RSS > 500 MB | peak RSS over base (MB) | other client ms: base median / median / max "
            "| 4xx wrapping an unexpected exception or a killed worker | secs |")
    lines = [head, "|" + "---|" * 17]
    for r in results:
        s = r.summary()
        lat = (f"{s['latency_base_median_ms']} / {s['latency_median_ms']} / {s['latency_max_ms']}"
               if r.mode == "server" else "")
        lines.append(f"| {r.fmt} | {r.mode} | {r.inputs} | {r.bad_inputs} | {r.requests} | {r.s2xx} | {r.s4xx} | {r.s5xx} "
                     f"| {r.broken} | {r.hangs} | {r.conn_errors} | {r.bad_4xx_shape} | {r.rss_over_bound} "
                     f"| {r.rss_peak_mb:.0f} | {lat} | {r.masked if r.mode == 'server' else ''} | {r.secs} |")
    return "\n".join(lines)


def signatures(results: list[FormatResult], notes: bool = False) -> dict[str, list[dict]]:
    """Failures (or, with ``notes``, the masked answers) grouped by signature (mode,
    format, endpoint/step, status, exception)."""
    out: dict[str, list[dict]] = {}
    for r in results:
        for f in (r.notes if notes else r.failures):
            out.setdefault(f["signature"], []).append(f)
    return dict(sorted(out.items(), key=lambda kv: -len(kv[1])))


# -- hostile query parameters on good runs -------------------------------------------------

HOSTILE_PARAMS = ["1" + "0" * 400, "1e400", "-1e400", "NaN", "nan", "inf", "-inf", "-1", "0", str(2**63), str(2**64),
                  str(-(2**70)), "99999999999999999999999999", "1e308", "0x10", "1_000", " 1", "%00", "\x00", "\ud800",
                  "%ED%A0%80", "x" * 5000, "a," * 2000, "(", "[", "*", "\\", "../../etc/passwd", "/etc/passwd", "",
                  "1.5", "true", "{}", "ALL_HOSTS", "cuda:99999999999999999999"]
PARAM_ENDPOINTS = {
    "profile": [("/data/plugin/profile/data", {"tag": "memory_viewer", "module_name": None, "memory_space": "0"}),
                ("/data/plugin/profile/data", {"tag": "trace_viewer@", "start_time_ms": "0", "end_time_ms": "10",
                                               "resolution": "100", "event_name": "x", "duration_ms": "1", "unique_id": "1"}),
                ("/data/plugin/profile/data", {"tag": "oom_risk", "capacity_bytes": "1", "device_memory": "16GiB",
                                               "threshold_medium": "0.8", "threshold_high": "0.9", "device": "H100"}),
                ("/data/plugin/profile/data", {"tag": "memory_profile", "host": None}),
                ("/data/plugin/profile/hosts", {"tag": "x"}),
                ("/data/plugin/profile/run_tools", {"session_path": "x", "run_path": "y"}),
                ("/data/plugin/profile/runs", {"session_path": "x", "run_path": "y"}),
                ("/api/module_peaks", {"memory_space": "0"}),
                ("/api/trace/window", {"start_ms": "0", "end_ms": "1", "resolution": "10", "host": None, "hosts": None}),
                ("/api/trace/search", {"q": "a", "limit": "10"}),
                ("/api/trace/event", {"id": "0"}),
                ("/api/trace/export", {"start_ms": "0", "end_ms": "1"})],
    "torch_snapshot": [("/api/snapshot/timeline", {"start": "0", "end": "10", "x": "index", "max_points": "100", "top": "5", "host": None}),
                       ("/api/snapshot/state", {"event": "0", "host": None}),
                       ("/api/snapshot/stack", {"stack": "0", "filtered": "1"}),
                       ("/api/snapshot/stacks", {"event": "0"}),
                       ("/api/snapshot/compare", {"other": None, "other_host": "cuda:0"}),
                       ("/api/snapshot/overview", {"host": None})],
    "chrome_trace": [("/api/memory_profile", {}),
                     ("/api/trace/window", {"start_ms": "0", "end_ms": "1", "resolution": "10"}),
                     ("/data/plugin/profile/data", {"tag": "memory_profile", "host": None}),
                     ("/data/plugin/profile/data", {"tag": "trace_viewer@", "start_time_ms": "0", "end_time_ms": "10"})],
    "xla_dump": [("/data/plugin/profile/data", {"tag": "memory_viewer", "module_name": None, "memory_space": "0",
                                                "view_memory_allocation_timeline": "1"}),
                 ("/api/module_peaks", {"memory_space": "0"})],
}


@_interruptible
def run_params(runs_root: Path, target: Target, work: Path, seed: int, n: int, progress=None) -> FormatResult:
    """n requests with hostile values in one to three query parameters (or the run name)
    on good runs (``runs_root``: a log directory of real inputs)."""
    import random

    res = FormatResult("params", "server")
    cache = work / "cache"
    shutil.rmtree(cache, ignore_errors=True)
    server = Server(target, runs_root, cache)
    poller = None
    t0 = time.monotonic()
    try:
        server.start()
        res.latency_base_ms = baseline_latencies(server.url)
        poller = Poller(server.url)
        poller.start()
        with httpx.Client(timeout=BACKSTOP_S) as c:
            runs = [(r["name"], r["kind"]) for r in c.get(server.url + "/api/runs").json()["runs"]]
        for i in range(n):
            rng = random.Random(f"{seed}:params:{i}")
            name, kind = rng.choice([r for r in runs if r[1] in PARAM_ENDPOINTS])
            path, params = rng.choice(PARAM_ENDPOINTS[kind])
            params = {k: (v if v is not None else "") for k, v in params.items()}
            keys = sorted(params) or ["run"]
            for k in rng.sample(keys, min(len(keys), rng.randint(1, 3))):
                params[k] = rng.choice(HOSTILE_PARAMS)
            # the run itself hostile one time in ten (else every request is a 404)
            params["run"] = rng.choice(HOSTILE_PARAMS) if rng.random() < 0.1 else name
            qs = "&".join(f"{quote(k, safe='')}={v if v.startswith('%') else quote(v, safe='', errors='surrogatepass')}"
                          for k, v in params.items())
            m = Mutant("params", f"params#{i}", {}, [f"{path}?{qs[:300]}"])
            res.inputs += 1
            if not server.alive():
                server.start()
                poller.url = server.url
            server.sampler.reset()
            s = Session(server, res, m, i)
            s.get(f"{path}?{qs}")
            s.close()
            over = max(0.0, server.sampler.window_peak - server.sampler.baseline)
            res.rss_peak_mb = max(res.rss_peak_mb, round(over, 1))
            if over > RSS_BOUND_MB:
                res.rss_over_bound += 1
                s.bad = True
                res.fail(f"server params rss>{RSS_BOUND_MB}MB", m, i, f"{over:.0f} MB")
            res.bad_inputs += s.bad
            if s.hung or not server.alive():
                server.stop()
                server.start()
                poller.url = server.url
            if progress:
                progress(i)
    finally:
        # the server first: a poll waiting on it then ends at once, not after BACKSTOP_S
        server.stop()
        if poller:
            poller.stop_ev.set()
            poller.join()
            res.latency_ms = poller.latencies
    res.secs = round(time.monotonic() - t0, 1)
    return res


def good_runs_logdir(demo: Path, dest: Path) -> Path:
    """A log directory of one run of each kind, copied from the bundled demo."""
    shutil.rmtree(dest, ignore_errors=True)
    for rel in ("mlp", "dumps/mlp", "torch_snapshots/sketchkv_2024.pickle", "torch/leak.pt.trace.json.gz",
                "torch/leak.memory_timeline.json"):
        src, dst = demo / rel, dest / rel
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_dir():
            shutil.copytree(src, dst)
        elif src.is_file():
            shutil.copy2(src, dst)
    return dest

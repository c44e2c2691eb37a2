"""Conversions fanned out to a Dask cluster (issue 18, first part; docs/scale_out.md).

A task is one host's trace index (app/traces.py ``trace_index``), submitted under its
cache key as the Dask key: two servers (two clients of one scheduler) submitting the
same key get one task, and the cache's file lock (cache/store.py ``_single_flight``)
keeps workers of two schedulers sharing a cache folder from building it twice. A task
takes strings only (log-dir URL, cache root, run, host) and answers a small dict: no
profile data passes through the scheduler; each worker process builds its own log-dir
and cache objects once (they hold locks, and are not picklable).

Dask is imported inside the functions: the server's first answers import nothing new
(tests/test_architecture.py ``test_the_server_answers_without_the_readers``), and
profscope runs without ``distributed`` installed unless ``--dask``/``--dask-workers``
is given.
"""

from __future__ import annotations

import logging
import os
import threading
import time

from profscope.cache.progress import ProgressBoard
from profscope.errors import NotFound

log = logging.getLogger("profscope.scale_out")

# The first host (the one a user is looking at) goes before the rest of its run.
FIRST_PRIORITY = 10
# The worker-event topic of conversion progress (convert_host -> every subscribed client).
PROGRESS_TOPIC = "profscope-progress"
# Latest events kept (one per key): enough for every host of many pod sessions.
MAX_EVENTS = 100_000
# At most 4 progress events a second per task, plus the first and the last: a page polls
# twice a second, and 256 hosts on 128 workers stay ~500 small messages a second.
REPORT_EVERY = 0.25
# What the server reads of a host's file to check it may, before submitting it.
ACCESS_PROBE_BYTES = 16

# -- on a worker ---------------------------------------------------------------------


class _BuildRecorder(ProgressBoard):
    """The progress board of a worker's cache, noting the keys this process converted:
    DiskCache starts a job only under the key's lock, after finding it not built
    (cache/store.py ``get_or_build_dir``), so a key noted here was built here."""

    def __init__(self) -> None:
        super().__init__()
        self.started: set[str] = set()

    def start(self, key, label):
        self.started.add(key)
        return super().start(key, label)


_workspaces: dict = {}
_workspaces_lock = threading.Lock()


def _worker_workspace(logdir_url: str, cache_root: str, shared_cache: str | None = None):
    """One Workspace per (log dir, cache, shared cache) in this worker process, made on
    first use. With ``shared_cache`` (the server's --shared-cache) the worker's own cache
    folder is a local copy, and what it builds is published to the record, where the
    server (on another machine) copies it from (cache/shared.py); that folder is then
    $PROFSCOPE_WORKER_CACHE_DIR when the worker has it (the server's path may not exist
    in a worker's pod), else the server's path."""
    from profscope.app.workspace import Workspace
    from profscope.cache.shared import SharedRecord
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir
    from profscope.storage.object_store import ObjectStore

    if shared_cache:
        cache_root = os.environ.get("PROFSCOPE_WORKER_CACHE_DIR") or cache_root
    with _workspaces_lock:
        ws = _workspaces.get((logdir_url, cache_root, shared_cache))
        if ws is None:
            shared = SharedRecord(ObjectStore(shared_cache)) if shared_cache else None
            # Inline: the Dask worker is already the process a conversion runs in.
            cache = DiskCache(cache_root, workers=WorkerPool(enabled=False), shared=shared)
            cache.progress = _BuildRecorder()
            ws = _workspaces[logdir_url, cache_root, shared_cache] = Workspace(LogDir(logdir_url), cache)
            # one big host's plane decoded by every worker, not by this one alone
            ws.line_ranges = ClusterRanges()
        return ws


def convert_host(logdir_url: str, cache_root: str, run_name: str, host: str, *,
                 report: bool = True, report_every: float = REPORT_EVERY, shared_cache: str | None = None) -> dict:
    """The Dask task: builds ``host``'s trace index of ``run_name`` into the cache.
    Answers ``{"host", "key", "seconds", "built", "started", "pid"}``; ``built`` is False
    when the index was in the cache already (or another process built it meanwhile).
    ``report``: log the build's progress as worker events under :data:`PROGRESS_TOPIC`
    (:class:`_Reporter`), which every client subscribed to it receives, at most every
    ``report_every`` seconds between the first and the last."""
    started, t0 = time.time(), time.perf_counter()
    ws = _worker_workspace(logdir_url, cache_root, shared_cache)
    run = _worker_run(ws, run_name)
    sources = dict(ws.trace_sources(run))
    if host not in sources:
        raise NotFound(f"run {run_name!r} has no host {host!r}")
    info = sources[host]
    key = ws._trace_index_key(host, info)
    recorder = ws.cache.progress
    recorder.started.discard(key)
    reporter = _Reporter.for_task(recorder, key, {"logdir": logdir_url, "run": run_name, "host": host,
                                                  "hosts": len(sources)}, report_every) if report else None
    try:
        ws.trace_index(run, host, info, tiers=True)  # (the cluster's build serves every reader: its tiers are a task)
    except BaseException as e:
        if reporter is not None:
            reporter.end("error", error=f"{type(e).__name__}: {e}", seconds=time.perf_counter() - t0)
        raise
    finally:
        built = key in recorder.started
        recorder.started.discard(key)
    seconds = time.perf_counter() - t0
    if reporter is not None:
        reporter.end("done", seconds=seconds, built=built)
    # the processes that decoded the host's line ranges, when its plane was cut
    ranges = ws.line_ranges.ran.pop(ws.logdir.local_file(info.path) or "", []) if ws.line_ranges is not None else []
    return {"host": host, "key": key, "seconds": seconds, "built": built, "started": started, "pid": os.getpid(),
            "ranges": ranges}


class ClusterRanges:
    """The line ranges of one big host's plane (formats/xplane_line_ranges.py ``Ranges``)
    as tasks on the cluster this task runs on, up to one range per worker thread: the task
    that builds the host's index submits them, secedes while they run (its thread then
    decodes a range too) and merges their columns, which they write into its build
    folder. A range whose worker cannot reach that folder, or that fails, is decoded by
    the merging task itself (``xplane_line_ranges.merge``)."""

    # Above the hosts' own priority (FIRST_PRIORITY): a thread freed while a build waits
    # for its ranges takes a range, not another host's whole build (and its buffers).
    PRIORITY = 100

    def __init__(self, min_bytes: int | None = None, parts: int | None = None):
        from profscope.formats import xplane_line_ranges

        # $PROFSCOPE_LINE_RANGE_MIN_BYTES: the smallest range (tests cut small planes)
        env = os.environ.get("PROFSCOPE_LINE_RANGE_MIN_BYTES")
        self.min_bytes = min_bytes if min_bytes is not None else int(env) if env else xplane_line_ranges.MIN_RANGE_BYTES
        self._parts = parts
        # the worker pids of each file's last ranges (convert_host answers them)
        self.ran: dict[str, list[int]] = {}

    # Ranges per worker thread: cut by bytes, ranges need not cost alike (jax308's second
    # half holds half the first's events and took 1.7x its CPU), and ranges of half the
    # size spread that over the threads: on 2 workers the slower thread's share of
    # jax308's ranges fell from 1.66-1.80 s to 1.1-1.2 s (docs/performance.md, "One big
    # host, issue 40's third pass"). MIN_RANGE_BYTES still bounds the count.
    RANGES_PER_THREAD = 2

    @property
    def parts(self) -> int:
        """``RANGES_PER_THREAD`` per worker thread of the cluster now (asked per build: an
        adaptive cluster grows and shrinks); 1 (no split) outside a Dask task."""
        from distributed import get_client, get_worker

        if self._parts is not None:
            return self._parts
        try:
            get_worker()
        except ValueError:
            return 1
        return self.RANGES_PER_THREAD * sum(get_client().nthreads().values())

    def run(self, fn, specs: list):
        """Yields each range's answer (or its exception) in order, as it is there: the
        merge of a range overlaps the decode of the next."""
        from distributed import worker_client

        pids = self.ran[specs[0].source] = []
        with worker_client() as client:
            futures = client.map(fn, specs, pure=False, priority=self.PRIORITY)
            try:
                for f in futures:
                    try:
                        got = f.result()
                    except Exception as e:  # noqa: BLE001 - decoded by the merge itself
                        log.warning("a line range of %s failed on the cluster (%s); decoding it here",
                                    specs[0].source, e)
                        got = e
                    if isinstance(got, dict):
                        pids.append(got["pid"])
                    yield got
            finally:
                client.cancel(futures)  # a merge that stopped (a bad input) leaves no range running


    def submit(self, fn, *args):
        """``fn(*args)`` as a task of its own on this cluster, for the part of a cut host's
        build that can run beside the rest (tools/trace_index.py ``IndexWriter.elsewhere``:
        its resolution tiers), at the ranges' priority, so a free worker thread takes it:
        answers an object whose ``result()`` waits for it (seceded, so the thread can take
        other work meanwhile). Outside a Dask task, or where that task failed (a worker
        that cannot reach the build folder), ``fn(*args)`` runs here."""
        from distributed import get_client, get_worker

        try:
            get_worker()
        except ValueError:
            return _Here(fn, args)
        return _Elsewhere(get_client().submit(fn, *args, pure=False, priority=self.PRIORITY), fn, args)


class _Here:
    def __init__(self, fn, args):
        self.fn, self.args = fn, args

    def result(self):
        return self.fn(*self.args)


class _Elsewhere(_Here):
    def __init__(self, future, fn, args):
        super().__init__(fn, args)
        self.future = future

    def result(self):
        from distributed import worker_client

        try:
            with worker_client():
                return self.future.result()
        except Exception as e:  # noqa: BLE001 - made here instead
            log.warning("a task beside a build failed on the cluster (%s); running it here", e)
        return super().result()


def _worker_run(ws, run_name: str):
    try:
        return ws.run(run_name)
    except NotFound:
        ws.logdir.listing(refresh=True)  # the listing is cached a few seconds: the run may be newer
        return ws.run(run_name)


def run_host_job(logdir_url: str, cache_root: str, run_name: str, job: tuple, *,
                 shared_cache: str | None = None) -> dict:
    """The Dask task of one host's entry of a fan-out (app/workspace.py ``fan_out``,
    ``host_job``: a tool's payload, a row of the memory roll-up), built into the
    cache as the server would; answers ``{"host", "seconds", "pid", "error"}``. A bad
    input's error is an answer, not a failed task: it is remembered in the cache (and
    the shared record), where the server meets it when it reads that host's entry."""
    from profscope.errors import ProfscopeError

    t0 = time.perf_counter()
    ws = _worker_workspace(logdir_url, cache_root, shared_cache)
    try:
        ws.host_job(_worker_run(ws, run_name), tuple(job))
        error = None
    except ProfscopeError as e:
        error = e.message
    return {"host": job[1], "seconds": time.perf_counter() - t0, "pid": os.getpid(), "error": error}


class _Reporter:
    """A task's progress as worker events (``Worker.log_event``, which the worker's
    batched stream carries to the scheduler, which passes it on to every client that
    subscribed to the topic): ``processing`` at the start, then the build's fraction and
    stage (the cache's :class:`Progress` of the key, which ``get_or_build_dir`` starts)
    at most every ``every`` seconds and only when they changed, then ``done`` or
    ``error``. A thread polls the progress rather than the build calling out, so the
    build's code is the server's, unchanged, and a stage that does not update for a
    while costs nothing."""

    def __init__(self, worker, board: ProgressBoard, key: str, fields: dict, every: float):
        self.worker, self.board, self.key, self.fields, self.every = worker, board, key, fields, every
        self._last: tuple | None = None
        self._stop = threading.Event()
        self._send("processing", fraction=0.0, stage="starting")
        self._thread = threading.Thread(target=self._run, name=f"profscope-report-{fields['host']}", daemon=True)
        self._thread.start()

    @classmethod
    def for_task(cls, board: ProgressBoard, key: str, fields: dict, every: float) -> "_Reporter | None":
        try:
            from distributed import get_worker

            worker = get_worker()
        except (ImportError, ValueError):  # called outside a Dask worker (a test, the CLI)
            return None
        return cls(worker, board, key, fields, every)

    def _job(self) -> dict | None:
        with self.board._lock:
            job = self.board._jobs.get(self.key)
            return None if job is None else {"fraction": job.fraction, "stage": job.message}

    def _send(self, state: str, **extra) -> None:
        msg = {"key": self.key, **self.fields, "state": state, "pid": os.getpid(),
               "worker": self.worker.address, "sent": time.time(), **extra}
        try:
            self.worker.log_event(PROGRESS_TOPIC, msg)
        except Exception as e:  # noqa: BLE001 - progress is best effort; the task's answer is what counts
            log.debug("progress event not sent: %s", e)

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            job = self._job()
            if job is None:
                continue  # not started yet (waiting for the key's lock) or already finished
            now = (round(job["fraction"], 3), job["stage"])
            if now != self._last:
                self._last = now
                self._send("processing", fraction=now[0], stage=now[1])

    def end(self, state: str, **extra) -> None:
        """The last event; the poller is stopped first, so nothing older comes after it."""
        self._stop.set()
        self._thread.join()
        self._send(state, fraction=1.0 if state == "done" else (self._last or (0.0,))[0], **extra)


# -- in the server -------------------------------------------------------------------


def local_cluster(n_workers: int, **kwargs):
    """``LocalCluster(n_workers, threads_per_worker=1, processes=True)`` without the
    ``MALLOC_TRIM_THRESHOLD_=65536`` that Dask's nanny sets in its workers' environment
    (distributed.yaml ``distributed.nanny.pre-spawn-environ``; nanny.py
    ``_get_env_variables``: a None value unsets it). With it the trace-index build ran
    2.2x slower on the prototype of issue 18; docs/performance.md has this one's number."""
    import dask
    from distributed import LocalCluster

    # ":0": the scheduler's HTTP server (the dashboard, when bokeh is installed) on a free
    # port, not 8787, which a second cluster or another program may hold
    options = {"threads_per_worker": 1, "processes": True, "dashboard_address": ":0", **kwargs}
    with dask.config.set({"distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_": None}):
        # The nanny reads the setting when it is made, which is here.
        return LocalCluster(n_workers=n_workers, **options)


class DaskConversions:
    """Conversions submitted to a Dask scheduler: ``address`` (an existing cluster;
    default $DASK_SCHEDULER_ADDRESS), else a :func:`local_cluster` of ``n_workers``
    processes, else ``client`` (an existing ``distributed.Client``, not closed here)."""

    def __init__(self, address: str | None = None, *, n_workers: int | None = None, client=None,
                 connect_timeout: float = 30, report_every: float | None = None):
        from distributed import Client

        self._pid = os.getpid()
        # $PROFSCOPE_REPORT_EVERY: seconds between a task's progress events (a page test
        # whose hosts index in 0.3 s wants more than one between the first and the last)
        self.report_every = report_every if report_every is not None else \
            float(os.environ.get("PROFSCOPE_REPORT_EVERY") or REPORT_EVERY)
        self.cluster = None
        self._own_client = client is None
        address = address or (None if n_workers or client else os.environ.get("DASK_SCHEDULER_ADDRESS"))
        if client is not None:
            self.client = client
        elif address:
            self.client = Client(address, timeout=connect_timeout)
        elif n_workers:
            self.cluster = local_cluster(n_workers)
            self.client = Client(self.cluster, timeout=connect_timeout)
        else:
            raise ValueError("give a scheduler address, n_workers or a client")
        self._futures: dict = {}  # cache key -> Future
        self._refused: dict[str, str] = {}  # cache key -> why this server did not submit it
        self._lock = threading.Lock()
        # The latest progress event of each key, from any worker, for a task this server
        # submitted or another replica did (every client subscribed gets every event).
        self._events: dict[str, dict] = {}
        self._runs: dict[tuple[str, str], dict] = {}  # (log dir, run) -> {"total", "done": set of hosts}
        self._listeners: list = []
        self.client.subscribe_topic(PROGRESS_TOPIC, self._on_event)

    def describe(self) -> str:
        n = len(self.client.scheduler_info(n_workers=-1).get("workers", {}))
        where = "a local Dask cluster" if self.cluster is not None else "Dask cluster"
        return f"{where} at {self.client.scheduler.address}, {n} worker{'s' if n != 1 else ''}"

    def usable(self) -> bool:
        """False in a forked conversion child (cache/worker.py): the client's event loop
        runs in a thread of the server process, which the fork did not copy."""
        return os.getpid() == self._pid

    def _host_keys(self, ws, run) -> list[tuple[str, str]]:
        return [(host, ws._trace_index_key(host, info)) for host, info in ws.trace_sources(run)]

    # -- progress events -------------------------------------------------------------

    def _on_event(self, event) -> None:
        """Called on the client's event loop for every event of the topic: ``(scheduler
        time, msg)``. Keeps the latest per key and tells the listeners; quick, since the
        loop also carries this client's task results."""
        _, msg = event
        if not isinstance(msg, dict) or "key" not in msg:
            return
        msg = {**msg, "received": time.time()}
        with self._lock:
            self._events[msg["key"]] = msg
            while len(self._events) > MAX_EVENTS:  # oldest first (dicts keep insertion order)
                self._events.pop(next(iter(self._events)))
            if msg.get("state") == "done":
                run = self._runs.setdefault((msg.get("logdir"), msg.get("run")),
                                            {"total": msg.get("hosts") or 0, "done": set()})
                run["done"].add(msg.get("host"))
                msg["run_done"], msg["run_total"] = len(run["done"]), run["total"]
            listeners = list(self._listeners)
        for listener in listeners:
            try:
                listener(msg)
            except Exception:  # noqa: BLE001 - a listener's bug must not stop the others
                log.exception("progress listener failed")

    def add_listener(self, listener) -> None:
        """``listener(event)`` for every progress event from now on, on the client's
        event loop (so it must be quick); a ``done`` event carries ``run_done`` and
        ``run_total``: the run's hosts converted so far, as this server knows."""
        with self._lock:
            self._listeners.append(listener)

    def print_hosts(self, out=None) -> None:
        """Prints a line per host finished (or failed) on the cluster to ``out``
        (default stderr): what ``profscope serve`` shows."""
        import sys

        def show(event):
            line = host_line(event)
            if line is not None:
                print(f"[profscope] {line}", file=out or sys.stderr, flush=True)

        self.add_listener(show)

    def events(self) -> dict[str, dict]:
        with self._lock:
            return dict(self._events)

    # -- access ----------------------------------------------------------------------

    def _refusal(self, ws, info):
        """None when this server, with its own credentials, can open the file and read
        its first bytes; else the 403 to answer. The workers would read it with theirs,
        which may see more: the server checks for the requester first."""
        from profscope.errors import Forbidden, ProfscopeError

        shown = ws.logdir.display_path(info.path)
        try:
            ws.logdir.head(info, ACCESS_PROBE_BYTES)
        except ProfscopeError:
            raise
        except OSError as e:
            return Forbidden(f"this server cannot read {shown} ({type(e).__name__}: {e.strerror or e}); "
                             "no conversion was submitted for it", file=shown)
        return None

    def submit_run(self, ws, run, first_host: str | None = None) -> list[str]:
        """Submits every host of ``run`` not built yet, ``first_host`` first and with a
        higher priority; answers the keys submitted now (a key already in flight, or
        built, is not submitted again). A host whose file this server cannot read is not
        submitted: the first such (``first_host`` if it is one) is raised as a 403
        ``Forbidden`` naming the file, after the readable hosts were submitted."""
        submitted, refused = self._submit(ws, run, first_host)
        if refused:
            err = refused.get(first_host) or next(iter(refused.values()))
            if len(refused) > 1:
                err.message += f" ({len(refused) - 1} more host(s) of the run refused likewise)"
            raise err
        return submitted

    def _submit(self, ws, run, first_host: str | None) -> tuple[list[str], dict]:
        infos = dict(ws.trace_sources(run))
        hosts = [(host, ws._trace_index_key(host, info)) for host, info in infos.items()]
        if first_host is not None and first_host not in infos:
            raise NotFound(f"run {run.name!r} has no host {first_host!r}")
        hosts.sort(key=lambda hk: hk[0] != first_host)  # stable: the rest keep their order
        built = self._built(ws, [key for _, key in hosts])
        with self._lock:
            todo = [(host, key) for host, key in hosts if key not in built and not self._in_flight(key)]
            self._runs.setdefault((ws.logdir.url, run.name), {"total": len(hosts), "done": set()})["done"].update(
                host for host, key in hosts if key in built)
        # Read access is checked before anything is submitted for a file (outside the
        # lock: on a bucket it is a ranged request per host, made in parallel).
        refused = self._check_access(ws, [(host, infos[host]) for host, _ in todo])
        submitted = []
        with self._lock:
            for host, key in todo:
                if host in refused:
                    self._refused[key] = refused[host].message
                    continue
                self._refused.pop(key, None)
                if self._in_flight(key):  # submitted by another request meanwhile
                    continue
                self._futures[key] = self.client.submit(
                    convert_host, ws.logdir.url, str(ws.cache.root), run.name, host,
                    report_every=self.report_every, shared_cache=ws.cache.shared.url if ws.cache.shared else None,
                    key=key, priority=FIRST_PRIORITY if host == first_host else 0, retries=0)
                submitted.append(key)
        return submitted, refused

    def run_host_jobs(self, ws, run, jobs: list[tuple[str, tuple]], what: str, timeout: float | None = None) -> None:
        """Submits one task per ``(cache key, job)`` (:func:`run_host_job`, keyed by the
        cache key: the replicas of a scheduler share them) and waits for them all,
        their progress a job on the server's board ("memory peaks of 16 hosts on the
        Dask cluster: 5/16"). What is built already (here, or committed to the shared
        record) and the hosts this server cannot read are not submitted; a task that
        fails is left for the caller, which reads every entry afterwards and so meets
        the error (or builds it itself)."""
        from distributed import as_completed

        built = self._built(ws, [key for key, _ in jobs], ws.cache.has)
        jobs = [(key, job) for key, job in jobs if key not in built]
        files = {job[1]: run.xplane(job[1]) for _, job in jobs}
        refused = self._check_access(ws, [(host, info) for host, info in files.items() if info is not None])
        shared = ws.cache.shared.url if ws.cache.shared else None
        futures = []
        with self._lock:
            for key, job in jobs:
                if job[1] in refused:
                    continue
                if not self._in_flight(key):
                    self._futures[key] = self.client.submit(run_host_job, ws.logdir.url, str(ws.cache.root), run.name,
                                                            job, shared_cache=shared, key=key, retries=0)
                futures.append(self._futures[key])
        if not futures:
            return
        progress = ws.cache.progress.start(f"dask:{what}:{run.name}", f"{what} on the Dask cluster")
        try:
            done = 0
            for future in as_completed(futures, timeout=timeout):
                done += 1
                progress.update(done / len(futures), f"{done}/{len(futures)} hosts")
                if future.status == "error":
                    log.info("Dask task %s failed (%s); the server reads that host itself", future.key, _message(future))
        except Exception as e:  # noqa: BLE001 - the caller reads (or builds) each entry anyway
            log.warning("Dask %s of run %s failed (%s: %s)", what, run.name, type(e).__name__, e)
        finally:
            ws.cache.progress.finish(progress)

    def _in_flight(self, key: str) -> bool:
        old = self._futures.get(key)
        return old is not None and old.status not in ("error", "cancelled", "lost")

    @staticmethod
    def _built(ws, keys: list[str], here=None) -> set[str]:
        """The keys built here (``here(key)``; default: a built folder) or committed to
        the shared record; outside the lock, and the record's reads in parallel (a
        request each on a bucket: 256 one after another would take seconds)."""
        here = here or (lambda k: ws.cache.built_dir(k) is not None)
        built = {k for k in keys if here(k)}
        rest = [k for k in keys if k not in built]
        if rest and ws.cache.shared is not None:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(16, len(rest)), thread_name_prefix="profscope-record") as pool:
                built.update(k for k, ok in zip(rest, pool.map(ws.cache.shared.committed, rest)) if ok)
        return built

    def _check_access(self, ws, host_infos: list) -> dict:
        if not host_infos:
            return {}
        if len(host_infos) == 1 or getattr(ws.logdir, "is_local", False):
            checked = [self._refusal(ws, info) for _, info in host_infos]
        else:
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(min(16, len(host_infos)), thread_name_prefix="profscope-access") as pool:
                checked = list(pool.map(lambda hi: self._refusal(ws, hi[1]), host_infos))
        return {host: err for (host, _), err in zip(host_infos, checked) if err is not None}

    def status(self, ws, run) -> list[dict]:
        """Per host: ``state`` pending | processing | done | error | not submitted, with
        ``seconds`` / ``built`` / ``pid`` of a finished task, the ``error`` of a failed
        (or refused) one, and the ``fraction`` (0..1) and ``stage`` of the build as its
        worker last reported them. A host another replica submitted shows its progress
        here too: the events reach every subscribed client."""
        processing = set()
        with self._lock:
            futures, events, refused = dict(self._futures), dict(self._events), dict(self._refused)
        if any(f.status == "pending" for f in futures.values()):
            for keys in self.client.processing().values():
                processing.update(keys)
        out = []
        for host, key in self._host_keys(ws, run):
            entry = {"host": host, "key": key, "state": "not submitted", "seconds": None, "built": None, "error": None,
                     "fraction": 0.0, "stage": None, "pid": None}
            f, event = futures.get(key), events.get(key)
            if event is not None:
                entry.update(fraction=event.get("fraction") or 0.0, stage=event.get("stage") or None, pid=event.get("pid"))
            if f is not None and f.status == "finished":
                result = f.result()
                entry.update(state="done", seconds=result["seconds"], built=result["built"], pid=result["pid"],
                             fraction=1.0, stage=None)
            elif f is not None and f.status in ("error", "cancelled", "lost"):
                entry["state"] = "error"
                entry["error"] = _message(f) if f.status == "error" else f"the Dask task was {f.status}"
            elif f is not None:
                # an event says processing before the scheduler's own list may
                entry["state"] = "processing" if key in processing or _live(event) else "pending"
            elif ws.cache.is_built(key):
                entry.update(state="done", fraction=1.0, stage=None)
                if event is not None and event.get("state") == "done":
                    entry.update(seconds=event.get("seconds"), built=event.get("built"))
            elif key in refused:
                entry.update(state="error", error=refused[key])
            elif _live(event):
                entry["state"] = "processing"  # submitted by another server of this scheduler
            elif event is not None and event.get("state") == "error":
                entry.update(state="error", error=event.get("error"))
            out.append(entry)
        return out

    def wait(self, key: str, timeout: float | None = None) -> dict:
        """The task's answer (its exception raised; ``TimeoutError`` past ``timeout``)."""
        with self._lock:
            future = self._futures[key]
        return future.result(timeout=timeout)

    def convert(self, ws, run, host: str, key: str, timeout: float | None = None) -> bool:
        """Submits ``run`` with ``host`` first and waits for ``host``'s index. False when
        the task failed or the workers saw another version of the file: then the
        caller converts as without Dask, which builds it or raises the input's error
        (a bad input's error is remembered in the cache folder, cache/store.py)."""
        try:
            _, refused = self._submit(ws, run, first_host=host)
        except Exception as e:  # noqa: BLE001 - the local path reports the real error
            log.warning("Dask conversion of %s failed (%s: %s); converting here", host, type(e).__name__, e)
            return False
        if host in refused:
            raise refused[host]  # never converted here either: the server cannot read it
        try:
            with self._lock:
                if key not in self._futures:  # built meanwhile
                    return True
            result = self.wait(key, timeout)
        except Exception as e:  # noqa: BLE001 - the local path reports the real error
            log.warning("Dask conversion of %s failed (%s: %s); converting here", host, type(e).__name__, e)
            return False
        return result.get("key") == key

    def close(self) -> None:
        with self._lock:
            self._futures.clear()
            self._listeners.clear()
        if self.client.status == "running":  # a closed client has no subscription left
            self.client.unsubscribe_topic(PROGRESS_TOPIC)
        if self._own_client:
            self.client.close()
        if self.cluster is not None:
            self.cluster.close()


def _message(future) -> str:
    try:
        err = future.exception(timeout=0)
    except Exception as e:  # noqa: BLE001
        err = e
    return f"{type(err).__name__}: {err}"


def _live(event: dict | None) -> bool:
    return event is not None and event.get("state") == "processing"


def host_line(event: dict) -> str | None:
    """The CLI's line for a host that finished or failed on the cluster, else None:
    ``host07 converted in 3.1 s on worker pid 1234 (5/16)``."""
    state, host, pid = event.get("state"), event.get("host"), event.get("pid")
    if state == "done":
        count = f" ({event['run_done']}/{event['run_total']})" if event.get("run_total") else ""
        what = "converted" if event.get("built") else "found in the cache"
        return f"{host} {what} in {event.get('seconds') or 0:.1f} s on worker pid {pid}{count}"
    if state == "error":
        return f"{host} failed on worker pid {pid}: {event.get('error')}"
    return None

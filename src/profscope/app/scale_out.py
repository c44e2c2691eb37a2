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


def _worker_workspace(logdir_url: str, cache_root: str):
    """One Workspace per (log dir, cache) in this worker process, made on first use."""
    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.cache.worker import WorkerPool
    from profscope.storage import LogDir

    with _workspaces_lock:
        ws = _workspaces.get((logdir_url, cache_root))
        if ws is None:
            # Inline: the Dask worker is already the process a conversion runs in.
            cache = DiskCache(cache_root, workers=WorkerPool(enabled=False))
            cache.progress = _BuildRecorder()
            ws = _workspaces[logdir_url, cache_root] = Workspace(LogDir(logdir_url), cache)
        return ws


def convert_host(logdir_url: str, cache_root: str, run_name: str, host: str) -> dict:
    """The Dask task: builds ``host``'s trace index of ``run_name`` into the cache.
    Answers ``{"host", "key", "seconds", "built", "started", "pid"}``; ``built`` is False
    when the index was in the cache already (or another process built it meanwhile)."""
    started, t0 = time.time(), time.perf_counter()
    ws = _worker_workspace(logdir_url, cache_root)
    try:
        run = ws.run(run_name)
    except NotFound:
        ws.logdir.listing(refresh=True)  # the listing is cached a few seconds: the run may be newer
        run = ws.run(run_name)
    sources = dict(ws.trace_sources(run))
    if host not in sources:
        raise NotFound(f"run {run_name!r} has no host {host!r}")
    info = sources[host]
    key = ws._trace_index_key(host, info)
    recorder = ws.cache.progress
    recorder.started.discard(key)
    ws.trace_index(run, host, info)
    built = key in recorder.started
    recorder.started.discard(key)
    return {"host": host, "key": key, "seconds": time.perf_counter() - t0, "built": built,
            "started": started, "pid": os.getpid()}


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
                 connect_timeout: float = 30):
        from distributed import Client

        self._pid = os.getpid()
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
        self._lock = threading.Lock()

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

    def submit_run(self, ws, run, first_host: str | None = None) -> list[str]:
        """Submits every host of ``run`` not built yet, ``first_host`` first and with a
        higher priority; answers the keys submitted now (a key already in flight, or
        built, is not submitted again)."""
        hosts = self._host_keys(ws, run)
        if first_host is not None and first_host not in dict(hosts):
            raise NotFound(f"run {run.name!r} has no host {first_host!r}")
        hosts.sort(key=lambda hk: hk[0] != first_host)  # stable: the rest keep their order
        submitted = []
        with self._lock:
            for host, key in hosts:
                old = self._futures.get(key)
                if old is not None and old.status not in ("error", "cancelled", "lost"):
                    continue
                if ws.cache.built_dir(key) is not None:
                    continue
                self._futures[key] = self.client.submit(
                    convert_host, ws.logdir.url, str(ws.cache.root), run.name, host,
                    key=key, priority=FIRST_PRIORITY if host == first_host else 0, retries=0)
                submitted.append(key)
        return submitted

    def status(self, ws, run) -> list[dict]:
        """Per host: ``state`` pending | processing | done | error | not submitted, with
        ``seconds`` / ``built`` of a finished task and the ``error`` of a failed one."""
        processing = set()
        with self._lock:
            futures = dict(self._futures)
        if any(f.status == "pending" for f in futures.values()):
            for keys in self.client.processing().values():
                processing.update(keys)
        out = []
        for host, key in self._host_keys(ws, run):
            entry = {"host": host, "key": key, "state": "not submitted", "seconds": None, "built": None, "error": None}
            f = futures.get(key)
            if f is not None and f.status == "finished":
                result = f.result()
                entry.update(state="done", seconds=result["seconds"], built=result["built"])
            elif f is not None and f.status in ("error", "cancelled", "lost"):
                entry["state"] = "error"
                entry["error"] = _message(f) if f.status == "error" else f"the Dask task was {f.status}"
            elif f is not None:
                entry["state"] = "processing" if key in processing else "pending"
            elif ws.cache.built_dir(key) is not None:
                entry["state"] = "done"
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
            self.submit_run(ws, run, first_host=host)
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

"""The cache's shared record: a bucket (or a shared folder) that several server replicas
and Dask workers, each with its own local cache folder, use so that each entry is
converted once and copied everywhere else (issue 18; docs/scale_out.md "Shared cache").

The local folder stays what requests read: the trace index is memory-mapped, which wants
local files. The record is written beside it and read on a local miss. Its layout below
the store (``v2``: another layout is simply never read):

``v2/<kk>/<key>.commit``
    a small JSON manifest (the writer, every file with its size and SHA-256), written
    **last** and **create-only**: its existence means the entry is whole, and the first
    writer to create it is the one whose files everybody reads. An object store cannot
    rename a folder into place as cache/store.py does locally, so this marker is the
    atomic step.
``v2/<kk>/<key>/<writer>/entry.tar``
    the entry's files as one tar, the *pack* (cache/pack.py), under the writer's own name:
    two replicas that raced upload to different names, never over each other's objects;
    the loser deletes its own. A pack is a plain upload that anyone who writes to the
    bucket can replace after its commit: a reader checks it against the commit as it takes
    it apart (sizes on each header before the data, SHA-256 after), writes nothing the
    commit does not name, and converts the entry itself when they differ.
``v2/<kk>/<key>.failed``
    a bad input's error (the local cache's failure record), create-only: another replica
    answers it at once instead of converting the same bad file again.
``v2/<kk>/<key>.lease``
    who builds the entry now (create-only, refreshed every ``lease_s / 4`` by its
    holder). Another replica that finds it waits for the commit instead of converting
    the same file; a lease not refreshed for ``lease_s`` (a crashed holder) is ignored,
    and the waiter converts it itself (the create-only commit keeps that correct).

``v1`` was the same layout with commits that gave sizes only: a replica that found a garbled
pack of the right sizes copied it, and its trace views failed on every request (issue 32).
A reader cannot tell such a pack from a good one, so ``v1`` is not read: its entries are
converted again once, and published under ``v2`` (a ``v1`` commit, create-only, would
have kept them from being published at all).

The record is never evicted by profscope: a bucket lifecycle rule ages it out
(docs/scale_out.md). Any error talking to it is logged and counted, and the cache goes
on as a local one: a bucket outage costs conversions, never answers.
"""

from __future__ import annotations

import logging
import os
import secrets
import socket
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, Protocol

import orjson

from profscope.cache import pack as packs
from profscope.cache.pack import PackRefused

log = logging.getLogger("profscope.cache.shared")

RECORD_VERSION = 2  # 1: commits without checksums (see above)
PACK = "entry.tar"  # an entry's files, as one object (SharedRecord.publish)
LEASE_S = 60.0


class RecordedFailure(Exception):
    """Another writer's conversion of the entry failed on a bad input; ``record`` is the
    failure record it kept (cache/store.py ``_remember_failure``)."""

    def __init__(self, record: bytes):
        super().__init__("a conversion of this entry failed elsewhere")
        self.record = record


class Store(Protocol):
    """What the record needs of a store (storage/object_store.py ``ObjectStore``)."""

    url: str

    def read(self, name: str) -> bytes | None: ...
    def create(self, name: str, data: bytes) -> bool: ...
    def write(self, name: str, data: bytes) -> None: ...
    def delete(self, *names: str) -> None: ...
    def put_files(self, local_paths: list[Path], names: list[str]) -> None: ...
    def open_read(self, name: str): ...  # a context: (file, size)


def folder_files(folder: Path) -> list[tuple[str, Path]]:
    """Every file below ``folder`` as (relative POSIX name, path), for :meth:`SharedRecord.publish`."""
    out = []
    for dirpath, _, names in os.walk(folder):
        for name in names:
            path = Path(dirpath) / name
            out.append((path.relative_to(folder).as_posix(), path))
    return sorted(out)


class SharedRecord:
    def __init__(self, store: Store, *, writer: str | None = None, lease_s: float = LEASE_S,
                 poll_s: float = 0.2, wait_s: float | None = None):
        """``wait_s``: the longest a replica waits for another's lease before converting
        itself (None: as long as the lease is kept alive)."""
        self.store = store
        self.writer = writer or f"{socket.gethostname()}-{os.getpid()}-{secrets.token_hex(3)}"
        self.lease_s = lease_s
        self.poll_s = poll_s
        self.wait_s = wait_s
        self._lock = threading.Lock()
        self._heartbeats: dict[str, threading.Event] = {}
        self._uploads = None  # a ThreadPoolExecutor, made on the first publish_later
        # The process that made the record leases and publishes; a forked conversion
        # worker (cache/worker.py) only reads it: it exits when its conversion returns,
        # which would leave a lease no thread refreshes and an upload cut short.
        self._home = os.getpid()
        self._pending: set = set()
        # Commits seen: one never changes or goes away (profscope deletes none), so the
        # Dask status polls of a 256-host run ask the bucket once per entry, not per poll.
        self._commits: dict[str, dict] = {}
        self.stats = {"fetched": 0, "published": 0, "waited": 0, "lostRace": 0, "failures": 0, "refused": 0, "errors": 0, "lastError": None}

    @property
    def url(self) -> str:
        return self.store.url

    def _name(self, key: str, suffix: str) -> str:
        return f"v{RECORD_VERSION}/{key[:2]}/{key}{suffix}"

    def _count(self, what: str, n: int = 1) -> None:
        with self._lock:
            self.stats[what] += n

    def _failed(self, doing: str, key: str, err: BaseException) -> None:
        log.warning("shared cache %s: %s %s failed (%s: %s); going on with the local cache",
                    self.url, doing, key[:12], type(err).__name__, err)
        with self._lock:
            self.stats["errors"] += 1
            self.stats["lastError"] = f"{doing}: {type(err).__name__}: {err}"

    def snapshot(self) -> dict:
        with self._lock:
            return {"url": self.url, "writer": self.writer, "uploading": len(self._pending), **self.stats}

    # -- reading ------------------------------------------------------------------------

    def manifest(self, key: str) -> dict | None:
        """The entry's commit, or None when it has none (or it cannot be read)."""
        seen = self._commits.get(key)
        if seen is not None:
            return seen
        try:
            raw = self.store.read(self._name(key, ".commit"))
            if raw is None:
                return None
            m = orjson.loads(raw)
            if m.get("version") != RECORD_VERSION or m.get("key") != key:
                return None
            if len(self._commits) > 100_000:
                self._commits.clear()
            self._commits[key] = m
            return m
        except Exception as e:  # noqa: BLE001 - a store error is never the request's
            self._failed("reading the commit of", key, e)
            return None

    def committed(self, key: str) -> bool:
        return self.manifest(key) is not None

    def _fetch(self, key: str, m: dict, dest: Path) -> bool:
        """Copy a committed entry's files into the empty folder ``dest``, streamed out of
        its pack and checked against the commit on the way (cache/pack.py): the pack's
        size before a byte is read, each member's name and size on its header before its
        data, each file's SHA-256 after. So nothing is written but the files the commit
        names, at their sizes; a pack that differs (a tar bomb, a garbled or replaced
        upload) is refused, counted and logged, and the caller converts the entry here."""
        try:
            files = packs.named_files(m)
            writer = m.get("writer")
            if not isinstance(writer, str) or not writer or "/" in writer or writer in (".", ".."):
                raise PackRefused(f"the commit names no writer: {str(writer)[:80]!r}")
            bound = packs.pack_bound(files)
            with self.store.open_read(self._name(key, f"/{writer}/{PACK}")) as (f, size):
                if size > bound:
                    raise PackRefused(f"the pack is {size:,} bytes, and a tar of the {len(files)} file(s) its "
                                      f"commit names takes at most {bound:,}")
                packs.extract(f, files, dest)
        except PackRefused as e:
            self._count("refused")
            self._failed("copying", key, e)
            return False
        except Exception as e:  # noqa: BLE001
            self._failed("copying", key, e)
            return False
        self._count("fetched")
        return True

    # -- one entry, once across replicas --------------------------------------------------

    def obtain(self, key: str, fetch_into: Callable[[], Path], *, kind: str) -> Path | None:
        """The committed entry ``key`` copied into the folder ``fetch_into()`` makes, or
        None when this process is to build it: then it holds the lease (when it could take
        one) until :meth:`publish` or :meth:`release`. Waits while another writer's live
        lease says it is building ``key``. Raises :class:`RecordedFailure` when another
        writer's conversion of ``key`` failed on a bad input (:meth:`publish_failure`)."""
        m = self.manifest(key)
        if m is None and self._claim(key):
            m = self.manifest(key)  # committed between the two reads: nothing to build
            if m is None:
                self._raise_failure(key, release=True)
                return None
            self.release(key)
        if m is None:
            m = self._wait(key)
            if m is None:
                self._raise_failure(key)
        if m is None or m.get("kind") != kind:
            return None
        dest = fetch_into()
        return dest if self._fetch(key, m, dest) else None

    def publish_failure(self, key: str, record: bytes) -> None:
        """Keep a bad input's error (cache/store.py ``_remember_failure``'s record) beside
        the entry, create-only: the key names the file's identity, so every replica then
        answers the same 4xx at once instead of converting a bad 300 MB file again."""
        try:
            self.store.create(self._name(key, ".failed"), record)
        except Exception as e:  # noqa: BLE001
            self._failed("recording the failure of", key, e)

    def _raise_failure(self, key: str, *, release: bool = False) -> None:
        try:
            record = self.store.read(self._name(key, ".failed"))
        except Exception as e:  # noqa: BLE001
            self._failed("reading the failure of", key, e)
            return
        if record is not None:
            if release:
                self.release(key)
            self._count("failures")
            raise RecordedFailure(record)

    def _claim(self, key: str) -> bool:
        if os.getpid() != self._home:
            return False
        name = self._name(key, ".lease")
        try:
            if not self.store.create(name, self._lease_body()):
                return False
        except Exception as e:  # noqa: BLE001
            self._failed("leasing", key, e)
            return False
        stop = threading.Event()
        with self._lock:
            self._heartbeats[key] = stop
        threading.Thread(target=self._heartbeat, args=(name, stop), daemon=True,
                         name=f"profscope-lease-{key[:8]}").start()
        return True

    def _lease_body(self) -> bytes:
        return orjson.dumps({"writer": self.writer, "time": time.time()})

    def _heartbeat(self, name: str, stop: threading.Event) -> None:
        while not stop.wait(self.lease_s / 4):
            try:
                self.store.write(name, self._lease_body())
            except Exception as e:  # noqa: BLE001 - a missed beat only risks a second build
                log.warning("shared cache %s: refreshing %s failed: %s", self.url, name, e)

    def _wait(self, key: str) -> dict | None:
        """Wait for another writer's commit while its lease lives; the commit, or None."""
        lease_name = self._name(key, ".lease")
        deadline = None if self.wait_s is None else time.monotonic() + self.wait_s
        waited = False
        delay = self.poll_s
        while True:
            m = self.manifest(key)
            if m is not None:
                if waited:
                    self._count("waited")
                return m
            try:
                raw = self.store.read(lease_name)
                lease = orjson.loads(raw) if raw else None
            except Exception as e:  # noqa: BLE001
                self._failed("reading the lease of", key, e)
                return None
            if lease is None or time.time() - float(lease.get("time", 0)) > self.lease_s:
                # Nobody builds it: a failed build released the lease, a crash left it
                # stale, or the holder committed and released between the two reads
                # above (the commit is read once more for that one).
                m = self.manifest(key) if lease is None else None
                if m is not None and waited:
                    self._count("waited")
                return m
            if deadline is not None and time.monotonic() > deadline:
                return None
            waited = True
            time.sleep(delay)
            delay = min(delay * 1.5, 2.0)

    def release(self, key: str) -> None:
        """Give the lease up (after a failed build, or once committed)."""
        with self._lock:
            stop = self._heartbeats.pop(key, None)
        if stop is None:
            return
        stop.set()
        try:
            self.store.delete(self._name(key, ".lease"))
        except Exception as e:  # noqa: BLE001 - a lease left behind goes stale by itself
            self._failed("releasing the lease of", key, e)

    def publish_later(self, key: str, entry: list[tuple[str, Path]], *, kind: str, scratch: Path) -> None:
        """:meth:`publish` on an upload thread: the request that built the entry answers
        now, not after the upload (1.2 s for a 300 MB host's index at 200 MB/s; more
        than the conversion on the emulator). The lease stays held until the commit, so
        other replicas wait for it rather than converting again."""
        from concurrent.futures import ThreadPoolExecutor

        if os.getpid() != self._home:
            return  # what a forked worker converts inline, the next replica converts too (see _home)
        with self._lock:
            if self._uploads is None:
                self._uploads = ThreadPoolExecutor(2, thread_name_prefix="profscope-publish")
            future = self._uploads.submit(self.publish, key, entry, kind=kind, scratch=scratch)
            self._pending.add(future)
        future.add_done_callback(self._pending.discard)

    def flush(self, timeout: float | None = None) -> None:
        """Wait for the uploads :meth:`publish_later` started."""
        from concurrent.futures import wait

        with self._lock:
            pending = list(self._pending)
        wait(pending, timeout=timeout)

    def publish(self, key: str, entry: list[tuple[str, Path]], *, kind: str, scratch: Path) -> bool:
        """Upload the built entry's files (name in the entry, local path) and commit them;
        False when another writer committed first (its files are the entry; this writer's
        are deleted) or the store failed. Releases the lease either way.

        The files go up as one uncompressed tar, the *pack* (an index's .npy columns gain
        little from compression): one request per entry instead of one per file (51 for
        a trace index), which is both the latency and the per-operation price of an
        object store. It is written in ``scratch`` (the entry's cache shard) under a name
        the cache's start-up clean-up leaves alone for an hour, hashing each file on the
        way: the commit names every file's size and SHA-256 (cache/pack.py)."""
        pack = None
        try:
            fd, name = tempfile.mkstemp(dir=scratch, prefix=".tmp-pack-", suffix=".part")
            pack = Path(name)
            with os.fdopen(fd, "wb") as f:
                files = packs.write_pack(entry, f)
            self.store.put_files([pack], [self._name(key, f"/{self.writer}/{PACK}")])
            body = orjson.dumps({"version": RECORD_VERSION, "key": key, "kind": kind, "writer": self.writer,
                                 "files": files, "time": time.time()})
            if not self.store.create(self._name(key, ".commit"), body):
                self._count("lostRace")
                self.store.delete(self._name(key, f"/{self.writer}"))
                return False
        except Exception as e:  # noqa: BLE001
            self._failed("publishing", key, e)
            return False
        finally:
            if pack is not None:
                pack.unlink(missing_ok=True)
            self.release(key)
        self._count("published")
        return True

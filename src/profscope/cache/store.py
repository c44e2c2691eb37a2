"""Converted results on local disk.

A result is stored once, gzip-compressed, under a key derived from everything that
determines it (tool, tool version, input identity, parameters); it is sent to browsers
as-is with ``Content-Encoding: gzip``. Writes are atomic (temp file + rename in the same
folder), and concurrent requests for the same cold key wait for one conversion: a
thread lock inside the process, an ``fcntl`` lock file across processes.

The cache is bounded (``limit``; the policy is in cache/eviction.py): least recently used
entries are deleted when a write pushes it over; what crashed processes left is removed
when it is opened; a full disk is a :class:`~profscope.errors.CacheFull` (507) naming the
folder, with nothing half-written left.
"""

from __future__ import annotations

import errno
import fcntl
import gzip
import hashlib
import os
import shutil
import tempfile
import stat
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, TypeVar

import orjson
from isal import igzip

from profscope import __version__
from profscope.cache import eviction
from profscope.cache.paths import default_cache_dir  # noqa: F401 - its old home, still imported from here
from profscope.cache.progress import Progress, ProgressBoard
from profscope.cache.shared import RecordedFailure, SharedRecord, folder_files
from profscope.cache.worker import WorkerPool
from profscope.errors import BadInput, CacheFull, ProfscopeError, TooLarge
from profscope.forksafe import renew_after_fork

# Bumped when the storage layout changes; old entries are then simply never read again.
LAYOUT_VERSION = 1
# The one file of a JSON result in the shared record (a folder entry keeps its own names).
SHARED_BLOB = "entry.json.gz"
# A JSON result is kept gzip-compressed by ISA-L's igzip (python-isal): the same format
# (RFC 1952) every reader here inflates with the gzip module and a browser takes as it is,
# made 3-4x faster than zlib's fastest level and smaller: the memory viewer's 68 MB full
# result took zlib 0.34 s at level 1 (14.1 MB) and igzip 0.10 s (12.7 MB), a 36 MB JSON
# 0.25 s against 0.06 s (docs/performance.md). Its level 1 from BIG_JSON bytes on, its
# best (3) below, where the time is a few ms either way.
BIG_JSON = 4 << 20


def gzip_json_bytes(js: bytes) -> bytes:
    """``js`` gzip-compressed as the cache keeps a JSON result."""
    return igzip.compress(js, 1 if len(js) >= BIG_JSON else 3)


def _gzip_json(obj) -> bytes:
    return gzip_json_bytes(orjson.dumps(obj, option=orjson.OPT_SERIALIZE_NUMPY))

T = TypeVar("T")


def cache_key(*parts: object) -> str:
    """A stable key for any JSON-able parts."""
    blob = orjson.dumps([LAYOUT_VERSION, *parts], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


class DiskCache:
    def __init__(self, root: Path | str, *, workers: WorkerPool | None = None, limit: int | str | None = None,
                 shared: SharedRecord | None = None):
        """``limit``: bytes, or a size like ``"20GiB"`` / ``"10%"`` (of its disk); None:
        $PROFSCOPE_CACHE_SIZE, else the default (eviction.default_limit). ``shared``: a
        record in a bucket that other replicas use too (cache/shared.py): a local miss is
        copied from it when it has the entry, and what is built here is published to it."""
        self.root = Path(root).expanduser().resolve()
        try:
            self.root.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            if eviction.is_full(e):
                raise self._cache_full(e) from e
            raise
        self.progress = ProgressBoard()
        self.shared = shared
        # Where conversions run: forked children with a memory limit (cache/worker.py).
        self.workers = workers if workers is not None else WorkerPool()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        self._held = threading.local()  # keys whose single-flight lock this thread holds
        self._open_accounting(limit)
        renew_after_fork(self, DiskCache._after_fork)

    def _after_fork(self) -> None:
        # Another thread may have held these at the fork (forksafe.py).
        self._locks = {}
        self._locks_guard = threading.Lock()
        self._usage_lock = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json.gz"

    def has(self, key: str) -> bool:
        """Whether a result is stored here for ``key``, without reading it."""
        return self._path(key).is_file()

    def get(self, key: str) -> bytes | None:
        """The stored gzip bytes for a key, or None (a hit marks it as recently used)."""
        path = self._path(key)
        try:
            with open(path, "rb") as f:
                data = f.read()
                mtime = os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None
        eviction.touch_if_stale(path, mtime)
        return data

    def put(self, key: str, gz: bytes) -> None:
        # Under the key's lock (already held inside get_or_compute), so that the start-up
        # clean-up of another process never takes this temporary for a crash's leftover.
        with self._holding(key):
            self.put_raw(self._path(key), gz)
        self._added(key, len(gz))

    def put_raw(self, path: Path, data: bytes) -> None:
        """Write ``data`` at ``path`` atomically (a temp file renamed in the same folder);
        a full disk leaves no temp file and raises CacheFull."""
        # The temporary is named after its key: the start-up clean-up checks its lock.
        stem = path.name[:64]
        prefix = f".tmp-{stem}-" if eviction.KEY_RE.match(stem) else ".tmp-"
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=prefix, suffix=".part")
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException as e:
            if tmp is not None:
                with _suppress():
                    os.unlink(tmp)
            full = eviction.is_full(e)
            if full is not None and not isinstance(e, CacheFull):
                raise self._cache_full(full) from e
            raise

    @contextmanager
    def _single_flight(self, key: str) -> Iterator[None]:
        """``key`` to this thread alone: its thread lock, then its file lock."""
        with self._thread_lock(key), self._file_lock(key):
            yield

    @contextmanager
    def _thread_lock(self, key: str) -> Iterator[None]:
        """One thread of this process at a time for ``key`` (the others wait here, for
        the first one's result, holding nothing else)."""
        with self._locks_guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            yield

    @contextmanager
    def _file_lock(self, key: str) -> Iterator[None]:
        """``key`` to this process alone, among every process on this cache folder: the
        other replicas', and this server's own conversion workers (a worker making a
        batch of hosts takes each host's key)."""
        lock_path = eviction.lock_path(self.root, key)
        while True:
            try:
                lock_path.parent.mkdir(parents=True, exist_ok=True)
                lf = open(lock_path, "a+b")  # noqa: SIM115 - closed below
            except OSError as e:
                if eviction.is_full(e):
                    raise self._cache_full(e) from e
                raise
            fcntl.flock(lf, fcntl.LOCK_EX)
            # Eviction and the start-up clean-up delete lock files they could take:
            # the one locked here must still be the one at that path, else take anew.
            try:
                if os.stat(lock_path).st_ino == os.fstat(lf.fileno()).st_ino:
                    break
            except FileNotFoundError:
                pass
            lf.close()
        held = self._held_keys()
        held.add(key)
        try:
            yield
        finally:
            held.discard(key)
            fcntl.flock(lf, fcntl.LOCK_UN)
            lf.close()

    def _once(self, key: str, label: str, found: Callable[[bool], T | None], make: Callable[[Progress], T]) -> T:
        """``key``'s entry, made at most once at a time across threads and processes.

        ``found(shared)`` is the entry if it is there (copied from the shared record too
        when ``shared``), raising a failure remembered for ``key``; ``make(job)`` makes
        and stores it, in a conversion worker.

        The order of the locks is what keeps this from deadlocking: the key's thread
        lock, then a worker slot, then the key's file lock; never a slot while holding
        the file lock. A worker holding a slot may itself wait for this key's file lock
        (the batch that makes many hosts' rows in one worker, a tool reading another
        tool's entry): a thread that held the file lock while waiting for that slot
        blocked them both until the worker's idle watchdog (300 s) stopped it. So the
        file lock is taken first only to look (nothing to wait for), then let go while
        a slot is awaited, then taken again to look once more and make the entry."""
        with self._thread_lock(key):
            with self._file_lock(key):
                got = found(True)
                if got is not None:
                    return got
            job = self.progress.start(key, label)
            try:
                with self.workers.slot(job), self._file_lock(key):
                    got = found(False)  # made meanwhile by a worker or another replica
                    if got is not None:
                        self._shared_release(key)
                        return got
                    return make(job)
            except BaseException:
                self._shared_release(key)  # the lease the shared record's look took, if any
                raise
            finally:
                self.progress.finish(job)

    def _held_keys(self) -> set:
        held = getattr(self._held, "keys", None)
        if held is None:
            held = self._held.keys = set()
        return held

    @contextmanager
    def _holding(self, key: str) -> Iterator[None]:
        """The key's lock, unless this thread holds it already (flock would deadlock)."""
        if key in self._held_keys():
            yield
        else:
            with self._single_flight(key):
                yield

    def get_or_compute(self, key: str, label: str, compute: Callable[[Progress], object], *,
                       file: str | None = None, in_process: bool = False) -> bytes:
        """Stored gzip JSON bytes for ``key``, computing (once) with ``compute(progress)``.

        ``compute`` returns a JSON-able object. Exceptions propagate and nothing is stored,
        so a bad input is re-reported to the next request instead of being cached.
        ``in_process``: the input is small enough to convert in this process
        (``WorkerPool.run``).
        """
        hit = self.get(key)
        if hit is not None:
            return hit
        self._raise_if_failed(key)

        def found(shared: bool) -> bytes | None:
            hit = self.get(key)  # another request finished it while we waited
            if hit is None:
                self._raise_if_failed(key)
                if shared and self.shared is not None and (hit := self._shared_blob(key)) is not None:
                    self.put(key, hit)
            return hit

        def make(job: Progress) -> bytes:
            # Serialised in the worker too: a payload that cannot be (or that would
            # expand into gigabytes of JSON) fails there, not here.
            gz = self._convert(key, job, file, lambda p: _gzip_json(compute(p)), in_process=in_process)
            self._store(key, gz)
            return gz

        return self._once(key, label, found, make)

    def put_json(self, key: str, value: object) -> None:
        """``value`` stored for ``key`` as :meth:`get_or_compute` stores a result: for one
        made beside another conversion, with no conversion of its own (the memory
        viewer's conversion of a module also makes its ranking row)."""
        self._store(key, _gzip_json(value))

    def _store(self, key: str, gz: bytes) -> None:
        self.put(key, gz)
        if self.shared is not None:
            self.shared.publish_later(key, [(SHARED_BLOB, self._path(key))], kind="blob",
                                      scratch=self._path(key).parent)

    def get_or_build_dir(self, key: str, label: str, build: Callable[[Progress, Path], object], *,
                         file: str | None = None) -> Path:
        """A folder of files for ``key`` (an on-disk index), built once.

        ``build(progress, tmp_dir)`` fills a fresh temporary folder next to the final one,
        which is then renamed into place (atomic on one file system), under the same
        single-flight lock as :meth:`get_or_compute`; a failed build leaves nothing behind.
        """
        final = self.root / key[:2] / f"{key}.d"
        if self._use_dir(final):
            return final
        self._raise_if_failed(key)

        def found(shared: bool) -> Path | None:
            if final.is_dir():
                return final
            self._raise_if_failed(key)
            if shared and self.shared is not None and self._shared_dir(key, final):
                return final
            return None

        def make(job: Progress) -> Path:
            # named after its key: the start-up clean-up of another process checks its lock
            tmp = Path(self._full_guard(tempfile.mkdtemp)(dir=final.parent, prefix=f".tmp-{key}-", suffix=".d"))
            try:
                self._convert(key, job, file, lambda p: self._full_guard(build)(p, tmp))
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            finally:
                shutil.rmtree(self.preview_dir(key), ignore_errors=True)
            self._added(key, eviction.tree_size(final))
            if self.shared is not None:
                self.shared.publish_later(key, folder_files(final), kind="dir", scratch=final.parent)
            return final

        return self._once(key, label, found, make)

    def preview_dir(self, key: str) -> Path:
        """Where the build of ``key``'s folder may publish an early, partial result while
        it runs (the trace index's first window); removed when the build ends. Named like
        the build's temporaries, so what a crashed build left is cleared at start-up."""
        return self.root / key[:2] / f".tmp-{key}-preview.d"

    def built_dir(self, key: str) -> Path | None:
        """``key``'s folder if it is built (nothing is built here)."""
        final = self.root / key[:2] / f"{key}.d"
        return final if self._use_dir(final) else None

    def is_built(self, key: str) -> bool:
        """Whether ``key``'s folder is here or committed to the shared record (then the
        next :meth:`get_or_build_dir` copies it instead of building it)."""
        return self.built_dir(key) is not None or (self.shared is not None and self.shared.committed(key))

    # -- the shared record (cache/shared.py); called under the key's lock -----------------

    def _shared_blob(self, key: str) -> bytes | None:
        """A result another replica committed, or None (then this process builds it)."""
        tmp: list[Path] = []

        def fetch_into() -> Path:
            self._path(key).parent.mkdir(parents=True, exist_ok=True)
            tmp.append(Path(tempfile.mkdtemp(dir=self._path(key).parent, prefix=f".tmp-{key}-", suffix=".d")))
            return tmp[0]

        try:
            got = self._obtain(key, fetch_into, "blob")
            if got is None:
                return None
            try:
                return (got / SHARED_BLOB).read_bytes()
            except OSError:  # a commit that names other files (never this writer's): converted here
                return None
        finally:
            if tmp:
                shutil.rmtree(tmp[0], ignore_errors=True)

    def _shared_dir(self, key: str, final: Path) -> bool:
        """Copy the folder another replica committed into place; False: build it here."""
        tmp: list[Path] = []

        def fetch_into() -> Path:
            tmp.append(Path(self._full_guard(tempfile.mkdtemp)(dir=final.parent, prefix=f".tmp-{key}-", suffix=".d")))
            return tmp[0]

        final.parent.mkdir(parents=True, exist_ok=True)
        got = self._obtain(key, fetch_into, "dir")
        if got is None:
            if tmp:
                shutil.rmtree(tmp[0], ignore_errors=True)
            return False
        os.replace(got, final)
        self._added(key, eviction.tree_size(final))
        return True

    def _obtain(self, key: str, fetch_into: Callable[[], Path], kind: str) -> Path | None:
        """``shared.obtain``; another replica's failure on this input is kept here too and
        raised as this cache's own would be (unless its memory limit or version differs:
        then it is converted here)."""
        try:
            return self.shared.obtain(key, fetch_into, kind=kind)
        except RecordedFailure as e:
            with _suppress():
                self.put_raw(self._failure_path(key), e.record)
            self._raise_if_failed(key)
            return None

    def _shared_release(self, key: str) -> None:
        if self.shared is not None:
            self.shared.release(key)

    # -- conversions and their failures ---------------------------------------------------

    def _convert(self, key: str, job: Progress, file: str | None, fn: Callable[[Progress], bytes | None], *,
                 in_process: bool = False) -> bytes | None:
        """``fn(job)`` in a worker; a bad input's error is remembered for ``key``."""
        try:
            return self.workers.run(fn, job, self.progress, file, in_process=in_process)
        except BadInput as e:
            if not getattr(e, "transient", False):  # an I/O error may pass: tried again next time
                self._remember_failure(key, e)
            raise

    def _failure_path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.failed.json"

    def _remember_failure(self, key: str, err: BadInput) -> None:
        """Keep a bad input's error beside where its result would be: the key holds the
        input's identity (path, size, mtime or generation), so the next request for the
        same file gets the same 4xx at once instead of costing the conversion again, and
        a changed file gets a new key. A memory-limit refusal is kept with the limit, and
        tried again once the limit is raised."""
        record = {"cls": type(err).__name__, "status": err.status, "message": err.message, "file": err.file,
                  "workerMemory": self.workers.memory_limit if getattr(err, "worker_limit", False) else None,
                  "version": __version__}
        with _suppress():
            self.put_raw(self._failure_path(key), orjson.dumps(record))
        if self.shared is not None:  # and for the other replicas (cache/shared.py)
            self.shared.publish_failure(key, orjson.dumps(record))

    def _raise_if_failed(self, key: str) -> None:
        try:
            record = orjson.loads(self._failure_path(key).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            return
        if record.get("workerMemory") not in (None, self.workers.memory_limit):
            return  # refused by the worker's memory limit, which has changed since
        if record.get("version") != __version__:
            return  # another release may read it
        err = (TooLarge if record.get("cls") == "TooLarge" else BadInput)(record["message"], file=record.get("file"))
        err.status = record.get("status", err.status)
        raise err

    def get_or_compute_json(self, key: str, label: str, compute: Callable[[Progress], object], *,
                            file: str | None = None):
        return orjson.loads(gzip.decompress(self.get_or_compute(key, label, compute, file=file)))

    # -- size limit, use, a full disk (the policy itself is in cache/eviction.py) ---------

    def _open_accounting(self, limit: int | str | None) -> None:
        """The limit; what crashed processes left removed; the current size counted."""
        try:
            self.limit, self.limit_source = eviction.resolve_limit(self.root, limit)
        except ValueError as e:
            raise ProfscopeError(str(e)) from None
        self._usage_lock = threading.Lock()
        self.in_use_s = eviction.IN_USE_S  # how long a used folder is kept even over the limit
        self.cleanup = eviction.clean_stale(self.root)
        self.last_eviction: eviction.EvictionResult | None = None
        self._stuck_at: int | None = None  # what the last eviction could not go below
        self._stuck_until = 0.0
        self.size = sum(e.size for e in eviction.scan(self.root))
        self._counted_at = time.monotonic()

    def _added(self, key: str, nbytes: int) -> None:
        """A new entry of ``nbytes``: evict (never ``key`` itself) when the running total
        goes over the limit. The total is this process's count; what other processes
        sharing the folder wrote is seen when it is counted again: at every eviction, and
        at least once a minute on a write (eviction.RESYNC_S)."""
        with self._usage_lock:
            self.size += nbytes
            now = time.monotonic()
            over = self.size > self.limit
            if over and self._stuck_at is not None and now < self._stuck_until \
                    and self.size - self._stuck_at < self.limit // 10:
                # The last eviction, a moment ago, could only keep what is in use: a scan
                # now (0.3 s for 10,000 entries) would find the same, on every small write.
                over = False
            due = over or now - self._counted_at > eviction.RESYNC_S
        if due:
            self.evict(protect=(key,))

    def evict(self, protect=()) -> eviction.EvictionResult:
        """Bring the cache under its limit now (least recently used entries first)."""
        result = eviction.evict(self.root, self.limit, protect, in_use_s=self.in_use_s)
        with self._usage_lock:
            self.size = result.total
            self._counted_at = time.monotonic()
            self.last_eviction = result
            stuck = result.total > self.limit
            self._stuck_at = result.total if stuck else None
            self._stuck_until = self._counted_at + eviction.STUCK_RETRY_S
        return result

    def describe(self) -> str:
        """``1.2 GiB of 25.1 GiB used; limit: --cache-size 27GB``, for the CLI."""
        text = f"{eviction.format_size(self.size)} of {eviction.format_size(self.limit)} used; limit: {self.limit_source}"
        if self.shared is not None:
            text += f"; shared with other servers through {self.shared.url}"
        c = self.cleanup
        if c.temporaries:
            text += f"; removed {c.temporaries} half-written temporar{'y' if c.temporaries == 1 else 'ies'} " \
                    f"({eviction.format_size(c.freed)}) left by a crash"
        return text

    def _use_dir(self, final: Path) -> bool:
        """Whether a folder entry exists; if so it is marked as recently used."""
        try:
            st = os.stat(final)
        except FileNotFoundError:
            return False
        if not stat.S_ISDIR(st.st_mode):
            return False
        eviction.touch_if_stale(final, st.st_mtime)
        return True

    def _full_guard(self, fn: Callable) -> Callable:
        """``fn`` with a full disk (ENOSPC, EDQUOT, EFBIG, wrapped or not) raised as
        CacheFull. It wraps the code that writes, so that in a worker process the error
        is a ProfscopeError there already and reaches the parent as itself (not as a
        reader's failure, which would be remembered as a bad input)."""

        def guarded(*args, **kwargs):
            try:
                return fn(*args, **kwargs)
            except CacheFull:
                raise
            except BaseException as e:
                full = eviction.is_full(e)
                if full is None:
                    raise
                raise self._cache_full(full) from e

        return guarded

    def _cache_full(self, err: OSError) -> CacheFull:
        what = "its disk is full" if err.errno == errno.ENOSPC else f"{err.strerror.lower()} (a disk quota or file size limit)"
        limit = getattr(self, "limit", None)
        now = f" (now {eviction.format_size(limit)})" if limit else ""
        return CacheFull(
            f"the cache folder {self.root} cannot take more: {what}. Free some space there, point "
            f"profscope at another folder with --cache-dir, or give a smaller --cache-size{now} so that "
            "older results are evicted sooner", file=str(self.root))


@contextmanager
def _suppress() -> Iterator[None]:
    try:
        yield
    except (OSError, CacheFull):  # a failure record is worth no error of its own
        pass

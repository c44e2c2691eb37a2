"""Converted results on local disk.

A result is stored once, gzip-compressed, under a key derived from everything that
determines it (tool, tool version, input identity, parameters); it is sent to browsers
as-is with ``Content-Encoding: gzip``. Writes are atomic (temp file + rename in the same
folder), and concurrent requests for the same cold key wait for one conversion: a
thread lock inside the process, an ``fcntl`` lock file across processes.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import shutil
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import orjson

from profscope import __version__
from profscope.cache.progress import Progress, ProgressBoard
from profscope.cache.worker import WorkerPool
from profscope.errors import BadInput, TooLarge
from profscope.forksafe import renew_after_fork

# Bumped when the storage layout changes; old entries are then simply never read again.
LAYOUT_VERSION = 1


def default_cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "profscope"


def cache_key(*parts: object) -> str:
    """A stable key for any JSON-able parts."""
    blob = orjson.dumps([LAYOUT_VERSION, *parts], option=orjson.OPT_SORT_KEYS)
    return hashlib.sha256(blob).hexdigest()


class DiskCache:
    def __init__(self, root: Path | str, *, workers: WorkerPool | None = None):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.progress = ProgressBoard()
        # Where conversions run: forked children with a memory limit (cache/worker.py).
        self.workers = workers if workers is not None else WorkerPool()
        self._locks: dict[str, threading.Lock] = {}
        self._locks_guard = threading.Lock()
        renew_after_fork(self, DiskCache._after_fork)

    def _after_fork(self) -> None:
        # Another thread may have held these at the fork (forksafe.py).
        self._locks = {}
        self._locks_guard = threading.Lock()

    def _path(self, key: str) -> Path:
        return self.root / key[:2] / f"{key}.json.gz"

    def get(self, key: str) -> bytes | None:
        """The stored gzip bytes for a key, or None."""
        try:
            return self._path(key).read_bytes()
        except FileNotFoundError:
            return None

    def put(self, key: str, gz: bytes) -> None:
        self.put_raw(self._path(key), gz)

    def put_raw(self, path: Path, data: bytes) -> None:
        """Write ``data`` at ``path`` atomically (a temp file renamed in the same folder)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except BaseException:
            with _suppress():
                os.unlink(tmp)
            raise

    @contextmanager
    def _single_flight(self, key: str) -> Iterator[None]:
        with self._locks_guard:
            lock = self._locks.setdefault(key, threading.Lock())
        with lock:
            lock_path = self.root / key[:2] / f"{key}.lock"
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with open(lock_path, "a+b") as lf:
                fcntl.flock(lf, fcntl.LOCK_EX)
                try:
                    yield
                finally:
                    fcntl.flock(lf, fcntl.LOCK_UN)

    def get_or_compute(self, key: str, label: str, compute: Callable[[Progress], object]) -> bytes:
        """Stored gzip JSON bytes for ``key``, computing (once) with ``compute(progress)``.

        ``compute`` returns a JSON-able object. Exceptions propagate and nothing is stored,
        so a bad input is re-reported to the next request instead of being cached.
        """
        hit = self.get(key)
        if hit is not None:
            return hit
        self._raise_if_failed(key)
        with self._single_flight(key):
            hit = self.get(key)  # another request finished it while we waited
            if hit is not None:
                return hit
            self._raise_if_failed(key)
            job = self.progress.start(key, label)
            try:
                # Serialised in the worker too: a payload that cannot be (or that would
                # expand into gigabytes of JSON) fails there, not here.
                gz = self._convert(key, job, lambda p: gzip.compress(
                    orjson.dumps(compute(p), option=orjson.OPT_SERIALIZE_NUMPY), compresslevel=5))
            finally:
                self.progress.finish(job)
            self.put(key, gz)
            return gz

    def get_or_build_dir(self, key: str, label: str, build: Callable[[Progress, Path], object]) -> Path:
        """A folder of files for ``key`` (an on-disk index), built once.

        ``build(progress, tmp_dir)`` fills a fresh temporary folder next to the final one,
        which is then renamed into place (atomic on one file system), under the same
        single-flight lock as :meth:`get_or_compute`; a failed build leaves nothing behind.
        """
        final = self.root / key[:2] / f"{key}.d"
        if final.is_dir():
            return final
        self._raise_if_failed(key)
        with self._single_flight(key):
            if final.is_dir():
                return final
            self._raise_if_failed(key)
            tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-", suffix=".d"))
            job = self.progress.start(key, label)
            try:
                self._convert(key, job, lambda p: build(p, tmp))
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            finally:
                self.progress.finish(job)
            return final

    # -- conversions and their failures ---------------------------------------------------

    def _convert(self, key: str, job: Progress, fn: Callable[[Progress], bytes | None]) -> bytes | None:
        """``fn(job)`` in a worker; a bad input's error is remembered for ``key``."""
        try:
            return self.workers.run(fn, job, self.progress)
        except BadInput as e:
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

    def get_or_compute_json(self, key: str, label: str, compute: Callable[[Progress], object]):
        return orjson.loads(gzip.decompress(self.get_or_compute(key, label, compute)))


@contextmanager
def _suppress() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass

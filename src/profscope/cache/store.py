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

from profscope.cache.progress import Progress, ProgressBoard

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
    def __init__(self, root: Path | str):
        self.root = Path(root).expanduser().resolve()
        self.root.mkdir(parents=True, exist_ok=True)
        self.progress = ProgressBoard()
        self._locks: dict[str, threading.Lock] = {}
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
        path = self._path(key)
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-", suffix=".part")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(gz)
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
        with self._single_flight(key):
            hit = self.get(key)  # another request finished it while we waited
            if hit is not None:
                return hit
            job = self.progress.start(key, label)
            try:
                value = compute(job)
            finally:
                self.progress.finish(job)
            gz = gzip.compress(orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY), compresslevel=5)
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
        with self._single_flight(key):
            if final.is_dir():
                return final
            tmp = Path(tempfile.mkdtemp(dir=final.parent, prefix=".tmp-", suffix=".d"))
            job = self.progress.start(key, label)
            try:
                build(job, tmp)
                os.replace(tmp, final)
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            finally:
                self.progress.finish(job)
            return final

    def get_or_compute_json(self, key: str, label: str, compute: Callable[[Progress], object]):
        return orjson.loads(gzip.decompress(self.get_or_compute(key, label, compute)))


@contextmanager
def _suppress() -> Iterator[None]:
    try:
        yield
    except OSError:
        pass

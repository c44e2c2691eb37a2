"""A folder of objects that several machines share: a ``gs://bucket/prefix`` or a local
(or NFS) folder, with one operation object stores have and folders need help for:
**create-only** writes (the shared cache's commit markers and leases, cache/shared.py).

On GCS a create-only write is an upload with ``ifGenerationMatch=0`` (gcsfs
``pipe_file(..., mode="create")``): the service answers 412 Precondition Failed when the
object exists, which gcsfs raises as ``FileExistsError`` (gcsfs/retry.py
``validate_response``). In a folder it is ``open(path, "xb")`` (``O_CREAT | O_EXCL``). An
object store cannot rename a folder, so nothing here pretends to: callers write their
objects first and a create-only marker last.
"""

from __future__ import annotations

import os
import posixpath
import stat
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO, Iterator

from profscope.errors import NotFound
from profscope.forksafe import renew_after_fork
from profscope.storage.logdir import _gcs_filesystem, _split_url, safe_relpath


class ObjectStore:
    """Objects named by relative POSIX paths below ``url``."""

    def __init__(self, url: str, *, storage_options: dict | None = None):
        self.url = url.rstrip("/")
        self.protocol, self.root = _split_url(url)
        if self.protocol not in ("file", "gcs"):
            raise NotFound(f"a shared cache must be a gs:// bucket or a folder, not {url}", file=url)
        self._storage_options = dict(storage_options or {})
        self._fs = None
        self._lock = threading.Lock()
        renew_after_fork(self, ObjectStore._after_fork)

    def _after_fork(self) -> None:
        # gcsfs's event-loop thread is not in a forked child (storage/logdir.py _after_fork)
        self._fs = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"ObjectStore({self.url!r})"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    @property
    def fs(self):
        with self._lock:
            if self._fs is None:
                self._fs = _gcs_filesystem(self._storage_options)
            return self._fs

    def _path(self, name: str) -> str:
        rel = safe_relpath(name)
        if not rel:
            raise ValueError(f"not an object name: {name!r}")
        return os.path.join(self.root, *rel.split("/")) if self.is_local else posixpath.join(self.root, rel)

    # -- reads --------------------------------------------------------------------------

    def read(self, name: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        path = self._path(name)
        try:
            if self.is_local:
                with open(path, "rb") as f:
                    return f.read()
            return self.fs.cat_file(path)
        except FileNotFoundError:
            return None

    def exists(self, name: str) -> bool:
        path = self._path(name)
        return os.path.exists(path) if self.is_local else self.fs.exists(path)

    @contextmanager
    def open_read(self, name: str) -> Iterator[tuple[BinaryIO, int]]:
        """The object as a file to read in order, and its size as the store records it
        (before a byte of it is read). The shared cache streams a pack out of it
        (cache/pack.py) instead of downloading it first: what it writes locally is then
        only the files it keeps. On a bucket gcsfs reads ahead in the background (its
        default "adaptive" cache for sequential reads)."""
        path = self._path(name)
        if self.is_local:
            # Non-blocking: a FIFO put under the name must not hang the open; only a
            # regular file is read.
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                os.close(fd)
                raise OSError(f"{name} in {self.url} is not a file")
            os.set_blocking(fd, True)
            with os.fdopen(fd, "rb") as f:
                yield f, st.st_size
        else:
            with self.fs.open(path, "rb") as f:
                yield f, f.size

    # -- writes -------------------------------------------------------------------------

    def create(self, name: str, data: bytes) -> bool:
        """Write ``name`` only if no object of that name exists: True when this call made
        it, False when one was there (another writer's)."""
        path = self._path(name)
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            # The whole content appears at once for readers: written to a temporary, then
            # linked to the name (link fails with EEXIST, as O_EXCL would, when it exists).
            fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
                os.link(tmp, path)
            except FileExistsError:
                return False
            finally:
                os.unlink(tmp)
            return True
        try:
            self.fs.pipe_file(path, data, mode="create")
        except FileExistsError:
            return False
        return True

    def put_files(self, local_paths: list[Path], names: list[str]) -> None:
        """Upload files (plain writes: callers give each writer its own names)."""
        if self.is_local:
            import shutil

            for src, name in zip(local_paths, names):
                dest = self._path(name)
                os.makedirs(os.path.dirname(dest), exist_ok=True)
                shutil.copyfile(src, dest)
            return
        self.fs.put([str(p) for p in local_paths], [self._path(n) for n in names])

    def write(self, name: str, data: bytes) -> None:
        path = self._path(name)
        if self.is_local:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "wb") as f:
                f.write(data)
        else:
            self.fs.pipe_file(path, data)

    def delete(self, *names: str) -> None:
        """Remove objects; one that is gone already is no error."""
        for name in names:
            path = self._path(name)
            try:
                if self.is_local:
                    if os.path.isdir(path):
                        import shutil

                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        os.unlink(path)
                else:
                    self.fs.rm(path, recursive=True)
            except FileNotFoundError:
                pass

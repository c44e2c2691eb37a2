"""A log directory with other folders shown inside it, read-only, under names of their own.

profscope writes the profiles it captures into a folder it owns (app/capture.py), never
into the user's log directory; :class:`MountedLogDir` lists that folder's runs beside the
log directory's as ``captures/...``, so every reader, cache key and page treats them like
any other run. A relative path is routed by its first component: a mount's name goes to
the mount (the rest of the path relative to it), everything else to the log directory.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import IO

from profscope.forksafe import renew_after_fork
from profscope.storage.logdir import FileInfo, Listing, LogDir, safe_relpath

__all__ = ["MountedLogDir"]


class MountedLogDir:
    """``base`` with each of ``mounts`` (name -> LogDir) visible as the folder ``name/``.

    It answers every call a :class:`LogDir` does; the log directory's own identity (URL,
    root, protocol) is the base's, so cache keys of the base's files do not change when a
    mount is added. A base folder of a mount's name is hidden behind the mount: choose a
    free name (:meth:`free_name`)."""

    def __init__(self, base: LogDir, mounts: dict[str, LogDir]):
        for name in mounts:
            if not name or "/" in name or safe_relpath(name) != name:
                raise ValueError(f"mount name {name!r} must be one path component")
        self.base = base
        self.mounts = dict(mounts)
        self._lock = threading.Lock()
        self._merged: tuple[tuple[int, ...], Listing] | None = None
        renew_after_fork(self, MountedLogDir._after_fork)

    def _after_fork(self) -> None:
        # a conversion worker (cache/worker.py) may fork while another thread lists
        self._lock = threading.Lock()

    @staticmethod
    def free_name(base: LogDir, wanted: str) -> str:
        """``wanted``, or ``wanted-profscope``, ... : the first name the log directory's
        top level does not use."""
        listing = base.listing()
        taken = {p.split("/", 1)[0] for p in listing.files} | {p.split("/", 1)[0] for p in listing.dirs}
        name, n = wanted, 1
        while name in taken:
            name = f"{wanted}-profscope" + (f"-{n}" if n > 1 else "")
            n += 1
        return name

    # The base's identity: what cache keys, messages and the cache-inside check use.
    @property
    def url(self) -> str:
        return self.base.url

    @property
    def root(self) -> str:
        return self.base.root

    @property
    def protocol(self) -> str:
        return self.base.protocol

    @property
    def is_local(self) -> bool:
        return self.base.is_local

    @property
    def copy_dir(self):
        return self.base.copy_dir

    @copy_dir.setter
    def copy_dir(self, value) -> None:
        self.base.copy_dir = value

    def check(self) -> None:
        self.base.check()

    def __repr__(self) -> str:
        return f"MountedLogDir({self.base!r}, {self.mounts!r})"

    def _route(self, relpath: str) -> tuple[LogDir, str, str]:
        """(the LogDir holding ``relpath``, the path inside it, its prefix here)."""
        rel = safe_relpath(relpath)
        head, _, rest = rel.partition("/")
        mount = self.mounts.get(head)
        if mount is not None:
            return mount, rest, head + "/"
        return self.base, rel, ""

    # -- listing -------------------------------------------------------------------------

    def listing(self, *, refresh: bool = False) -> Listing:
        """The base's listing with each mount's files under its name; made anew only when
        one of the parts was listed again."""
        base = self.base.listing(refresh=refresh)
        parts = [(name, m.listing(refresh=refresh)) for name, m in self.mounts.items()]
        stamp = (id(base), *(id(p) for _, p in parts))
        with self._lock:
            if self._merged is not None and self._merged[0] == stamp:
                return self._merged[1]
            merged = Listing(head=self.head, notes=base.notes)
            merged.files = {p: f for p, f in base.files.items() if p.split("/", 1)[0] not in self.mounts}
            merged.dirs = {d for d in base.dirs if d.split("/", 1)[0] not in self.mounts}
            for name, listing in parts:
                merged.dirs.add(name)
                merged.dirs.update(f"{name}/{d}" for d in listing.dirs)
                for p, f in listing.files.items():
                    merged.files[f"{name}/{p}"] = dataclasses.replace(f, path=f"{name}/{p}")
            self._merged = (stamp, merged)
            return merged

    def refresh(self, name: str) -> None:
        """List one mount again now (a capture just wrote into it)."""
        self.mounts[name].listing(refresh=True)

    def files(self, *, refresh: bool = False) -> dict[str, FileInfo]:
        return self.listing(refresh=refresh).files

    def _inner(self, info: FileInfo) -> tuple[LogDir, FileInfo]:
        logdir, rel, prefix = self._route(info.path)
        return logdir, (dataclasses.replace(info, path=rel) if prefix else info)

    def head(self, info: FileInfo, n: int) -> bytes:
        logdir, inner = self._inner(info)
        return logdir.head(inner, n)

    # -- access --------------------------------------------------------------------------

    def info(self, relpath: str) -> FileInfo:
        logdir, rel, prefix = self._route(relpath)
        found = logdir.info(rel)
        return dataclasses.replace(found, path=prefix + found.path) if prefix else found

    def full_path(self, relpath: str) -> str:
        logdir, rel, _ = self._route(relpath)
        return logdir.full_path(rel)

    def open(self, relpath: str) -> IO[bytes]:
        logdir, rel, _ = self._route(relpath)
        return logdir.open(rel)

    def local_file(self, relpath: str) -> str | None:
        logdir, rel, _ = self._route(relpath)
        return logdir.local_file(rel)

    def read_bytes(self, relpath: str) -> bytes:
        logdir, rel, _ = self._route(relpath)
        return logdir.read_bytes(rel)

    def display_path(self, relpath: str) -> str:
        logdir, rel, prefix = self._route(relpath)
        return logdir.display_path(rel) if prefix else self.base.display_path(relpath)

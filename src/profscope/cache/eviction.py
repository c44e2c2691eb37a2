"""Keeping the disk cache under its size limit, and tidy.

The cache holds two kinds of entries under ``<root>/<kk>/``: ``<key>.json.gz`` files
(converted tool data) and ``<key>.d`` folders (trace indexes, snapshot columns). Their
modification time is their last use: a hit sets it to now (at most once a minute per
entry, so a hot entry costs one ``utime`` a minute, not one per request), and eviction
deletes the least recently used entries first.

Several profscope processes may share one cache folder. Eviction and the start-up
clean-up therefore run under one cache-wide lock file (``<root>/.evict.lock``); an entry
is deleted only while its key's lock (the single-flight ``<key>.lock``) is taken without
waiting, so an entry being written or built is never touched; and every step tolerates
files that another process removed first.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import shutil
import stat
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

# A hit refreshes an entry's mtime only when it is older than this: LRU order only needs
# minute resolution, and a hot entry then costs one utime a minute instead of one per hit.
TOUCH_EVERY_S = 60.0

# A folder entry whose mtime is this recent is never evicted. Its caller opens the files
# after get_or_build_dir returns (a trace index memory-maps its columns, and opens some
# files lazily, later in the request), and no lock covers that, so recent use is the only
# cross-process sign that it is being read. With touches a minute apart, a request that
# started with a hit is protected for at least IN_USE_S - TOUCH_EVERY_S = 4 minutes.
# (A file entry is read in one go by get(), so it needs no such grace.)
IN_USE_S = 300.0

# Without an eviction, a process re-counts the cache on a write at least this often, so
# that what other processes sharing the folder wrote is seen within a minute.
RESYNC_S = 60.0

# When an eviction could not reach the limit (only entries in use were left), writes in
# the next seconds add to the total without scanning again, unless they add a tenth of the
# limit: a burst of small results would otherwise rescan the whole cache for each one.
STUCK_RETRY_S = 10.0

# A temporary whose name does not say its key (older versions named them .tmp-XXXX.d)
# cannot be checked against its builder's lock; it is stale once nothing in it changed
# for this long (no build writes nothing for an hour).
ORPHAN_AGE_S = 3600.0

# The default limit: 10 % of the size of the cache's file system, at least 1 GiB, at most
# 50 GiB, and never more than half of that file system.
#  - 10 % of the *size*, not of the free space: the limit then stays the same from one
#    run to the next; one based on free space would shrink as the disk fills and end up
#    evicting everything.
#  - at least 1 GiB: one trace index can take about 1 GB (a 225 MB profile made a 955 MB
#    index), and a cache that cannot hold the profile being looked at converts it on
#    every restart.
#  - at most 50 GiB: on a multi-terabyte disk 10 % would be hundreds of GB of results for
#    profiles nobody opens again; 50 GiB still holds some fifty of the largest indexes.
#  - at most half the file system: the floor must not exceed a small disk.
DEFAULT_FRACTION = 0.10
DEFAULT_FLOOR = 1 << 30
DEFAULT_CAP = 50 << 30

ENV_VAR = "PROFSCOPE_CACHE_SIZE"

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:e\d+)?)\s*([kmgtp]?i?b?|%)\s*$", re.IGNORECASE)
# the same units as --device-memory (tools/oom_risk.py): decimal kB/MB/GB, binary KiB/MiB/GiB
_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 1 << 10, "m": 10**6, "mb": 10**6, "mib": 1 << 20,
          "g": 10**9, "gb": 10**9, "gib": 1 << 30, "t": 10**12, "tb": 10**12, "tib": 1 << 40,
          "p": 10**15, "pb": 10**15, "pib": 1 << 50}

KEY_RE = re.compile(r"^[0-9a-f]{64}$")
_TMP_KEY = re.compile(r"^\.tmp-([0-9a-f]{64})-")
FULL_ERRNOS = frozenset(e for e in (errno.ENOSPC, getattr(errno, "EDQUOT", None), errno.EFBIG) if e is not None)


def parse_size(text: str) -> tuple[int | None, float | None]:
    """``"20GiB"`` -> (21474836480, None); ``"10%"`` -> (None, 0.1) (of the file system);
    ValueError for anything else (the message is shown to the user as-is)."""
    m = _SIZE.match(str(text))
    unit = m.group(2).lower() if m else None
    if m is None or (unit != "%" and unit not in _UNITS):
        raise ValueError(f"cache size {text!r} is not a size: give one like 20GiB, 500MB, 10% (of its disk) or a number of bytes")
    value = float(m.group(1))
    if unit == "%":
        if not 0 < value <= 100:
            raise ValueError(f"cache size {text!r}: a percentage of the disk is between 0 and 100")
        return None, value / 100
    return int(value * _UNITS[unit]), None


def resolve_limit(root: Path, size: int | str | None) -> tuple[int, str]:
    """The limit in bytes, and where it came from (for ``profscope serve`` to say):
    ``size`` (``--cache-size``) wins over $PROFSCOPE_CACHE_SIZE, which wins over the default."""
    source = f"--cache-size {size}"
    if size is None or size == "":
        size = os.environ.get(ENV_VAR) or None
        source = f"${ENV_VAR}={size}"
    if size is None:
        return default_limit(root), "default, 10% of its disk (1 to 50 GiB)"
    if isinstance(size, int):
        return size, "given"
    absolute, fraction = parse_size(size)
    if absolute is None:
        return int(_fs_size(root) * fraction), f"{source} of its disk"
    return absolute, source


def default_limit(root: Path) -> int:
    fs = _fs_size(root)
    return int(min(max(fs * DEFAULT_FRACTION, DEFAULT_FLOOR), DEFAULT_CAP, fs / 2))


def _fs_size(root: Path) -> int:
    st = os.statvfs(root)
    return st.f_blocks * st.f_frsize


def format_size(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(n) < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n} B"  # not reached


# numpy's ndarray.tofile (np.save into a file) reports a short fwrite as an OSError with no
# errno, "<n> requested and <m> written" (numpy/_core/src/multiarray/convert.c): on a
# cache's file system that is a full disk or quota.
_SHORT_WRITE = re.compile(r"\d+ requested and \d+ written")


def is_full(err: BaseException) -> OSError | None:
    """The ENOSPC/EDQUOT/EFBIG behind ``err``, if any: a build's writer may raise it
    wrapped (a reader turning an OSError into its own error), so causes are followed."""
    seen = 0
    e: BaseException | None = err
    while e is not None and seen < 16:
        if isinstance(e, OSError) and e.errno in FULL_ERRNOS:
            return e
        if isinstance(e, OSError) and e.errno is None and _SHORT_WRITE.fullmatch(str(e)):
            return OSError(errno.ENOSPC, f"{os.strerror(errno.ENOSPC)} ({e})")
        e = e.__cause__ or e.__context__
        seen += 1
    return None


def touch_if_stale(path: Path | str, mtime: float, now: float | None = None) -> None:
    """Mark an entry as used now, unless that was done less than a minute ago."""
    now = time.time() if now is None else now
    if now - mtime < TOUCH_EVERY_S:
        return
    try:
        os.utime(path)
    except OSError:  # evicted meanwhile, or a shared cache owned by another user
        pass


# ---------------------------------------------------------------------------
# Sizes and the listing of entries
# ---------------------------------------------------------------------------


@dataclass
class Entry:
    key: str
    where: str  # its path (a str: a scan makes thousands, and a Path costs more than the stat)
    size: int
    mtime: float
    is_dir: bool

    @property
    def path(self) -> Path:
        return Path(self.where)


def tree_size(path: Path | str) -> int:
    """Bytes of the files under a folder (apparent sizes, as ``du --apparent-size``);
    files vanishing meanwhile count as 0."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return 0
    if not stat.S_ISDIR(st.st_mode):  # a plain file: its own size
        return st.st_size
    total = 0
    stack = [os.fspath(path)]
    while stack:
        try:
            it = os.scandir(stack.pop())
        except OSError:
            continue
        with it:
            for d in it:
                try:
                    if d.is_dir(follow_symlinks=False):
                        stack.append(d.path)
                    else:
                        total += d.stat(follow_symlinks=False).st_size
                except OSError:
                    pass
    return total


# Folder sizes already counted, by path: (inode, mtime_ns, bytes). A folder's mtime changes
# when a file is added, renamed or removed in it (an index's zoom levels are written beside
# it by rename) and when it is touched, so a folder is walked again only then; a scan is
# then one stat per entry instead of one per file (about 30 per trace index).
_dir_sizes: dict[str, tuple[int, int, int]] = {}
_dir_sizes_lock = threading.Lock()


def folder_size(path: str, st: os.stat_result) -> int:
    with _dir_sizes_lock:
        known = _dir_sizes.get(path)
    if known is not None and known[0] == st.st_ino and known[1] == st.st_mtime_ns:
        return known[2]
    size = tree_size(path)
    with _dir_sizes_lock:
        if len(_dir_sizes) > 100_000:  # entries evicted by other processes are never seen to go
            _dir_sizes.clear()
        _dir_sizes[path] = (st.st_ino, st.st_mtime_ns, size)
    return size


def _shards(root: Path) -> Iterator[os.DirEntry]:
    try:
        it = os.scandir(root)
    except OSError:
        return
    with it:
        for d in it:
            if len(d.name) == 2 and d.is_dir(follow_symlinks=False):
                yield d


def scan(root: Path) -> list[Entry]:
    """Every entry of the cache with its size and last use (temporaries and locks left
    out). A key may appear twice (its result and a remembered failure)."""
    out: list[Entry] = []
    for shard in _shards(root):
        try:
            it = os.scandir(shard.path)
        except OSError:
            continue
        with it:
            for d in it:
                name = d.name
                if name.endswith(".json.gz"):
                    key, is_dir = name[:-8], False
                elif name.endswith(".failed.json"):  # a bad input's remembered error (tiny)
                    key, is_dir = name[:-12], False
                elif name.endswith(".d"):
                    key, is_dir = name[:-2], True
                else:
                    continue
                if not KEY_RE.match(key):
                    continue
                try:
                    st = d.stat(follow_symlinks=False)
                    if is_dir != stat.S_ISDIR(st.st_mode):
                        continue
                    size = folder_size(d.path, st) if is_dir else st.st_size
                except OSError:
                    continue
                out.append(Entry(key, d.path, size, st.st_mtime, is_dir))
    return out


# ---------------------------------------------------------------------------
# Locks
# ---------------------------------------------------------------------------


def lock_path(root: Path, key: str) -> Path:
    return root / key[:2] / f"{key}.lock"


@contextmanager
def try_key_lock(root: Path, key: str, create: bool = True) -> Iterator[bool]:
    """Take a key's single-flight lock without waiting: True when taken (nobody is
    writing or building that key), False when another thread or process holds it. A lock
    file taken here is deleted on leaving (it is recreated on the key's next use)."""
    path = lock_path(root, key)
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o644)
    except FileNotFoundError:
        yield True  # no lock file, so nobody holds it
        return
    except OSError:
        yield False  # cannot even open it (a full disk, permissions): leave the entry alone
        return
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            # The lock file goes while still held: a waiter then finds its lock file
            # replaced (store._single_flight checks the inode) and takes the new one.
            # It is recreated on the next use of the key.
            try:
                if os.fstat(fd).st_ino == os.stat(path).st_ino:
                    os.unlink(path)
            except OSError:
                pass
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


_global_guard = threading.Lock()


def _renew_guard() -> None:
    # a forked conversion worker may evict too; a thread of the parent may hold the lock
    global _global_guard, _dir_sizes_lock
    _global_guard = threading.Lock()
    _dir_sizes_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_renew_guard)


@contextmanager
def cache_lock(root: Path) -> Iterator[None]:
    """The cache-wide lock of eviction and clean-up (threads of a process, and processes)."""
    with _global_guard:
        fd = os.open(root / ".evict.lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
        finally:
            os.close(fd)


# ---------------------------------------------------------------------------
# Eviction
# ---------------------------------------------------------------------------


def remove_entry(entry: Entry) -> None:
    """Delete an entry (the caller holds its key lock). A folder is first renamed to a
    temporary name, atomically, so that a reader sees the whole index or none of it
    (never a half-deleted one), and a crash in the middle leaves a ``.tmp-<key>-*.d``
    that the next start-up clean-up removes."""
    if not entry.is_dir:
        try:
            os.unlink(entry.where)
        except FileNotFoundError:
            pass
        return
    trash = os.path.join(os.path.dirname(entry.where), f".tmp-{entry.key}-evict{os.getpid()}-{threading.get_ident()}.d")
    try:
        os.rename(entry.where, trash)
    except FileNotFoundError:
        return
    shutil.rmtree(trash, ignore_errors=True)


@dataclass
class EvictionResult:
    total: int  # bytes in the cache after eviction
    evicted: int  # entries deleted
    freed: int  # bytes deleted
    kept_in_use: int  # entries kept over the limit because in use (recently, or being written)
    seconds: float


def evict(root: Path, limit: int, protect: Iterable[str] = (), now: float | None = None,
          in_use_s: float = IN_USE_S) -> EvictionResult:
    """Delete least recently used entries until the cache holds at most ``limit`` bytes.

    Kept even then: the keys in ``protect`` (the entry just written), entries whose key
    lock is held (being written or built, by any process), and folders used in the last
    ``in_use_s`` seconds (see IN_USE_S). The limit is exceeded while only those are left;
    the next write evicts again. Runs under the cache-wide lock.
    """
    t0 = time.perf_counter()
    protect = set(protect)
    with cache_lock(root):
        now = time.time() if now is None else now
        entries = scan(root)
        total = sum(e.size for e in entries)
        evicted = freed = kept = 0
        if total > limit:
            for e in sorted(entries, key=lambda e: e.mtime):
                if total <= limit:
                    break
                if e.key in protect:
                    continue
                if e.is_dir and now - e.mtime < in_use_s:
                    kept += 1
                    continue
                with try_key_lock(root, e.key) as free:
                    if not free:
                        kept += 1
                        continue
                    try:  # used again since the scan: it is no longer the oldest
                        if os.stat(e.where).st_mtime > e.mtime + 1:
                            kept += 1
                            continue
                    except FileNotFoundError:  # another process removed it already
                        total -= e.size
                        continue
                    remove_entry(e)
                total -= e.size
                freed += e.size
                evicted += 1
    return EvictionResult(total, evicted, freed, kept, time.perf_counter() - t0)


# ---------------------------------------------------------------------------
# Start-up clean-up
# ---------------------------------------------------------------------------


@dataclass
class CleanupResult:
    temporaries: int  # .tmp-*.d / .tmp-*.part removed
    freed: int  # their bytes
    locks: int  # unused .lock files removed
    seconds: float


def _newest_mtime(path: str) -> float:
    newest = os.stat(path).st_mtime
    if os.path.isdir(path):
        with os.scandir(path) as it:
            for d in it:
                try:
                    newest = max(newest, d.stat(follow_symlinks=False).st_mtime)
                except OSError:
                    pass
    return newest


def clean_stale(root: Path, now: float | None = None) -> CleanupResult:
    """Remove what crashed processes left: half-built ``.tmp-*.d`` folders and
    ``.tmp-*.part`` files whose builder is gone, and ``.lock`` files nobody holds.

    A temporary is named after its key (``.tmp-<key>-XXXX.d``) and its builder holds the
    key's lock for the whole build, so a temporary whose key lock can be taken without
    waiting has no live builder: a live process building it right now keeps it. A
    temporary named without its key (older versions) goes once unchanged for an hour.
    """
    t0 = time.perf_counter()
    now = time.time() if now is None else now
    temporaries = freed = locks = 0
    with cache_lock(root):
        for shard in _shards(root):
            try:
                names = os.listdir(shard.path)
            except OSError:
                continue
            for name in names:
                path = os.path.join(shard.path, name)
                if name.startswith(".tmp-") and (name.endswith(".d") or name.endswith(".part")):
                    m = _TMP_KEY.match(name)
                    try:
                        size = tree_size(path)
                        if m is None and now - _newest_mtime(path) < ORPHAN_AGE_S:
                            continue
                    except OSError:
                        continue
                    with try_key_lock(root, m.group(1), create=False) if m else _taken() as free:
                        if not free:
                            continue  # a live builder holds the key: its work in progress
                        if name.endswith(".d"):
                            shutil.rmtree(path, ignore_errors=True)
                        else:
                            try:
                                os.unlink(path)
                            except OSError:
                                continue
                    temporaries += 1
                    freed += size
                elif name.endswith(".lock") and KEY_RE.match(name[:-5]):
                    # try_key_lock removes the lock file on leaving, when it was free
                    with try_key_lock(root, name[:-5], create=False) as free:
                        locks += bool(free)
    return CleanupResult(temporaries, freed, locks, time.perf_counter() - t0)


@contextmanager
def _taken() -> Iterator[bool]:
    yield True

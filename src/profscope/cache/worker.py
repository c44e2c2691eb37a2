"""Conversions in forked worker processes, with a memory limit and admission control.

A conversion reads a user's file, and a hostile or broken one may make a reader allocate
gigabytes (a gzip bomb, a pickle of shared references) or crash in C code (protobuf's
parser failing to allocate). The readers refuse what they can recognise cheaply (their
budgets, :class:`profscope.errors.TooLarge`); this module is the backstop that keeps the
server itself out of reach, so one session's file never costs another session its
answers:

* each conversion runs in a child forked from the server: it inherits the workspace
  (no pickling of closures, nothing to import again), sends its progress and its result
  (bytes) back over a pipe and ends with ``os._exit``;
* the child's address space is capped (``RLIMIT_AS``: its size at the fork plus the
  memory limit) and its CPU time too (``RLIMIT_CPU``); an allocation beyond the cap is a
  ``MemoryError`` in Python or kills the child in C code, and either way the request gets
  a 413 naming the limit, while the server's memory does not move;
* the child runs at a lower priority (``nice``), so the server's own threads, answering
  other sessions from the cache, come first on a busy machine;
* at most ``concurrency`` children run at once (a semaphore); a conversion waiting for a
  slot shows "queued" in the progress board;
* what a child itself converts (a tool reading another tool's cached payload) runs in
  that child, inline.

Without ``os.fork`` (or with ``PROFSCOPE_WORKERS=0``) conversions run in the calling
thread, as before.
"""

from __future__ import annotations

import faulthandler
import logging
import os
import re
import resource
import select
import signal
import stat
import struct
import sys
import threading
import time
import traceback
from contextlib import contextmanager
from typing import Callable, Iterator

import orjson

from profscope import errors
from profscope.cache.progress import Progress, ProgressBoard
from profscope.errors import BadInput, ProfscopeError, TooLarge
from profscope.forksafe import keeping_until_exit, not_keeping, wait_for_imports

log = logging.getLogger("profscope.worker")

# True in a worker child: nested conversions run inline (a child never forks again, and
# never waits for a slot its parent holds).
_IN_WORKER = False

# Frames on the pipe: one type byte, an 8-byte length, the payload.
_HEAD = struct.Struct("<cQ")
_PROGRESS, _RESULT, _ERROR, _BUG, _MEMORY = b"P", b"R", b"E", b"B", b"M"
# A child sends progress at most this often (a reader reports every few MiB).
PROGRESS_INTERVAL_S = 0.1
# What the child's nice value is raised by.
NICE = 10

_UNITS = {"": 1, "b": 1, "k": 10**3, "kb": 10**3, "kib": 2**10, "m": 10**6, "mb": 10**6, "mib": 2**20,
          "g": 10**9, "gb": 10**9, "gib": 2**30, "t": 10**12, "tb": 10**12, "tib": 2**40}


def parse_size(text: str | int | None, what: str) -> int | None:
    """``"4GiB"``, ``"500MB"``, ``"2g"``, ``"17179869184"`` as bytes; None/``""`` → None."""
    if text is None or text == "":
        return None
    if isinstance(text, int):
        return text
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]+)?)\s*([A-Za-z]*)\s*", str(text))
    if not m or m.group(2).lower() not in _UNITS:
        raise errors.BadRequest(f"{what}: {text!r} is not a size (e.g. 4GiB, 500MB, 2000000000)")
    return int(float(m.group(1)) * _UNITS[m.group(2).lower()])


def in_worker() -> bool:
    """Whether this process is a conversion worker forked by a :class:`WorkerPool` (its
    nested conversions run inline, one after another)."""
    return _IN_WORKER


def default_memory_limit() -> int:
    """Half of the machine's memory, at least 2 GiB: a 225 MB profile converts in about
    1.1 GB (5x the file, docs/performance.md), a 1 GB snapshot in about 3 GB, so real
    files fit on any machine that can hold them, and a runaway child leaves the other
    half to the server and the rest of the machine."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 << 30
    return max(2 << 30, total // 2)


def default_concurrency() -> int:
    """Half the cores, at least 2 (one long conversion must not queue every small one)."""
    return max(2, min(8, (os.cpu_count() or 2) // 2))


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


class WorkerPool:
    """Runs conversions in forked children (see the module docstring)."""

    def __init__(self, memory_limit: int | None = None, concurrency: int | None = None,
                 cpu_seconds: int | None = None, enabled: bool | None = None, idle_seconds: float | None = None):
        env = os.environ
        if enabled is None:
            enabled = env.get("PROFSCOPE_WORKERS", "1") not in ("0", "off", "no", "false")
        self.enabled = enabled and hasattr(os, "fork")
        self.memory_limit = memory_limit or parse_size(env.get("PROFSCOPE_WORKER_MEMORY"), "PROFSCOPE_WORKER_MEMORY") \
            or default_memory_limit()
        self.concurrency = concurrency or int(env.get("PROFSCOPE_WORKER_CONCURRENCY") or 0) or default_concurrency()
        # CPU seconds one conversion may use: far beyond a real file (a 1 GB snapshot
        # takes about a minute), so only a reader stuck in a loop reaches it.
        self.cpu_seconds = cpu_seconds or int(env.get("PROFSCOPE_WORKER_CPU_SECONDS") or 0) or 3600
        # A child that neither computes nor reports for this long is stuck (a read from a
        # bucket that never answers, a lock it cannot take): it is stopped, and the
        # request answered, instead of waiting for ever.
        self.idle_seconds = idle_seconds or int(env.get("PROFSCOPE_WORKER_IDLE_SECONDS") or 0) or 300
        self._slots = threading.BoundedSemaphore(self.concurrency)
        self._mine = threading.local()  # whether this thread holds a slot (slot())
        self._children: set[int] = set()  # the pids of the workers running now
        self._stopping = False
        self.stats = {"runs": 0, "failed": 0, "killed": 0, "peakRssBytes": 0, "running": 0, "queued": 0,
                      "inProcess": 0}
        self._stats_lock = threading.Lock()

    def describe(self) -> str:
        if not self.enabled:
            return "in-process (no worker processes)"
        return (f"{self.concurrency} worker process(es) at once, {_fmt_bytes(self.memory_limit)} of memory "
                f"and {self.cpu_seconds} s of CPU each")

    @contextmanager
    def slot(self, job: Progress) -> Iterator[None]:
        """One of the ``concurrency`` slots for this thread (waiting, with "queued" on
        ``job``, while none is free); :meth:`run` inside it forks without taking another.
        The cache takes it before a key's file lock, never while holding one: a worker
        that holds a slot may be waiting for that lock (cache/store.py ``_once``)."""
        if not self.enabled or _IN_WORKER or getattr(self._mine, "held", False):
            yield
            return
        self._raise_if_stopping(job)
        self._count("queued", 1)
        try:
            if not self._slots.acquire(blocking=False):
                job.update(message="queued: waiting for a free worker")
                while not self._slots.acquire(timeout=0.5):  # until a slot, or stop()
                    self._raise_if_stopping(job)
        finally:
            self._count("queued", -1)
        if self._stopping:
            self._slots.release()
            self._raise_if_stopping(job)
        self._mine.held = True
        try:
            yield
        finally:
            self._mine.held = False
            self._slots.release()

    @contextmanager
    def spare_slot(self) -> Iterator[bool]:
        """A slot for work nobody is waiting for (a prefetch), only while the pool is
        idle: True, with the slot held for this thread (:meth:`slot` then takes no
        other), when no conversion runs or waits now; else False and nothing taken, so
        such work never delays a request's conversion by more than the one it started
        before the request came."""
        if not self.enabled or _IN_WORKER or self._stopping or getattr(self._mine, "held", False):
            yield False
            return
        with self._stats_lock:
            idle = self.stats["running"] == 0 and self.stats["queued"] == 0
        if not idle or not self._slots.acquire(blocking=False):
            yield False
            return
        self._mine.held = True
        try:
            yield True
        finally:
            self._mine.held = False
            self._slots.release()

    def run(self, fn: Callable[[Progress], bytes | None], job: Progress, board: ProgressBoard,
            file: str | None = None, *, in_process: bool = False) -> bytes | None:
        """``fn(job)`` in a worker child; its bytes (or None) back here, its
        ProfscopeError raised here as the same class. ``file``: the input, named by the
        errors made here (a crash, the memory limit, an unexpected exception).
        ``in_process``: the caller knows the input to be small (``Tool.in_process``):
        ``fn`` runs in this thread, with the worker's error rules (:meth:`_in_process`)."""
        if _IN_WORKER:
            with not_keeping():  # nested: this worker goes on after it
                return fn(job)
        if not self.enabled:
            return fn(job)
        if in_process:
            return self._in_process(fn, job, file)
        with self.slot(job):
            self._count("running", 1)
            try:
                return self._fork(fn, job, board, file)
            finally:
                self._count("running", -1)

    def _in_process(self, fn: Callable[[Progress], bytes | None], job: Progress, file: str | None) -> bytes | None:
        """``fn(job)`` here, its errors as a worker's would come back: a small input still
        may be hostile. What it cannot make is a large allocation (the callers' size
        threshold bounds it, measured in docs/performance.md), so the memory cap is what
        it does without; what stays is that no input makes a 500: an unexpected
        exception is the input's 422, naming it, with the traceback in the log. A fork
        and the imports a worker makes anew cost ~0.1 s here, more than such a
        conversion (bench_memory_viewer.py --served)."""
        self._count("inProcess", 1)
        try:
            return fn(job)
        except ProfscopeError:
            raise
        except MemoryError:
            raise TooLarge(f"{job.label}: the conversion ran out of memory", file=file) from None
        except OSError as e:
            err = BadInput(f"{job.label}: cannot read the input: {e}", file=getattr(e, "filename", None) or file)
            err.transient = True  # as a worker's OSError: not a property of the file
            raise err from e
        except Exception as e:  # noqa: BLE001 - as a worker's _BUG: the input's 422, not a 500
            log.exception("conversion %r failed in the server process", job.label)
            raise BadInput(f"{job.label}: the input could not be read ({type(e).__name__}: {str(e)[:2000]})",
                           file=file) from e

    def stop(self) -> None:
        """The server is stopping: end every worker now (SIGKILL) and start no other. The
        requests that waited for them are answered at once, with a 503 (:class:`Stopping`)
        that is not remembered against their inputs; uvicorn's graceful shutdown then has
        no request left to wait for."""
        self._stopping = True  # before the list: a worker forked meanwhile sees it (_fork)
        with self._stats_lock:
            children = list(self._children)
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # it has just ended

    def _raise_if_stopping(self, job: Progress) -> None:
        if self._stopping:
            raise errors.Stopping(f"{job.label}: the server is stopping; nothing was converted")

    def _count(self, name: str, delta: int) -> None:
        with self._stats_lock:
            self.stats[name] += delta

    # -- the parent side -----------------------------------------------------------------

    def _fork(self, fn, job: Progress, board: ProgressBoard, file: str | None) -> bytes | None:
        r, w = os.pipe()
        sockets = _socket_fds()  # the server's, listed before the fork and after the pipe (see _detach)
        # Not in the middle of another thread's import: its module lock would stay held
        # in the child for ever (forksafe.py).
        wait_for_imports()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            os.close(r)
            _child(fn, job, board, w, self.memory_limit, self.cpu_seconds, sockets)
        os.close(w)
        with self._stats_lock:
            self._children.add(pid)
            stopping = self._stopping  # stop() came between the fork and here: it did not see this pid
        if stopping:
            os.kill(pid, signal.SIGKILL)
        mirrored: dict[str, Progress] = {}
        outcome = None
        stalled = False
        try:
            with os.fdopen(r, "rb", buffering=0) as pipe:
                frames = _Frames(pipe, pid, self.idle_seconds)
                for kind, payload in frames:
                    if kind == _PROGRESS:
                        self._mirror(orjson.loads(payload), job, board, mirrored)
                    else:
                        outcome = (kind, payload)
                stalled = frames.stalled
        finally:
            _, status, usage = os.wait4(pid, 0)
            with self._stats_lock:
                self._children.discard(pid)
            for other in mirrored.values():
                board.finish(other)
        stopped = os.WIFSIGNALED(status) and os.WTERMSIG(status) in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
        if outcome is None and (self._stopping or stopped):
            # Ctrl+C reaches the workers too (one process group): a worker ended by it,
            # or by stop(), says nothing about its input, which must not be remembered
            # as unreadable (before issue 32, "the conversion stopped (SIGINT)" was a 422
            # kept in the cache for good).
            self._count("killed", 1)
            how = "the server is stopping" if self._stopping else \
                f"its worker was stopped from outside ({signal.Signals(os.WTERMSIG(status)).name})"
            raise errors.Stopping(f"{job.label}: the conversion did not end: {how}; nothing was kept", file=file)
        if stalled:
            self._count("killed", 1)
            err = ProfscopeError(f"{job.label}: the conversion stopped: it used no CPU and sent nothing for "
                                 f"{self.idle_seconds} s (waiting on a file or a bucket that does not answer?); "
                                 "try again", file=file)
            err.status = 504  # not the file's fault, so not remembered
            raise err
        rss = usage.ru_maxrss * 1024  # kilobytes on Linux
        with self._stats_lock:
            self.stats["runs"] += 1
            self.stats["peakRssBytes"] = max(self.stats["peakRssBytes"], rss)
        if outcome is not None:
            kind, payload = outcome
            if kind == _RESULT:
                return payload
            if kind == _ERROR:
                self._count("failed", 1)
                raise _rebuild(orjson.loads(payload))
            if kind == _MEMORY:
                self._count("killed", 1)
                raise self._too_large(job, file)
            self._count("failed", 1)
            bug = orjson.loads(payload)
            log.error("conversion %r failed in a worker:\n%s", job.label, bug["traceback"])
            # A reader raised something other than its own error for this input: the
            # input is what it could not read, so it is a 422 naming it, not a 500 (the
            # traceback is in the log, for us).
            raise BadInput(f"{job.label}: the input could not be read ({bug['type']}: {bug['message']})", file=file)
        self._count("killed", 1)
        if os.WIFSIGNALED(status):
            sig = os.WTERMSIG(status)
            if sig == signal.SIGBUS:
                # A read of a mapped page the file no longer has (mmap(2): "Attempted
                # access to a page of the buffer that lies beyond the end of the mapped
                # file"): a plane a worker maps (xplane_wire.map_plane_bytes, as a disposable
                # process: forksafe.disposable) and its file cut short under it, or a mapped
                # write on a full disk. Not a matter of memory: more of it would not help.
                raise BadInput(f"{job.label}: the worker ended with SIGBUS: a file it had mapped in memory was "
                               "cut short while it was read (the input rewritten or truncated under the "
                               "conversion, or the cache's disk full); ask again once the file is whole", file=file)
            if sig in (signal.SIGKILL, signal.SIGABRT, signal.SIGSEGV):
                # An allocation failing in C code aborts (std::bad_alloc) or faults; the
                # kernel's OOM killer sends SIGKILL.
                raise self._too_large(job, file, f"the worker ended with {signal.Signals(sig).name}")
            if sig == signal.SIGXCPU:
                raise TooLarge(f"{job.label}: the conversion used more than {self.cpu_seconds} s of CPU and was "
                               "stopped (raise it with PROFSCOPE_WORKER_CPU_SECONDS)", file=file)
            raise BadInput(f"{job.label}: the conversion stopped ({signal.Signals(sig).name})", file=file)
        raise BadInput(f"{job.label}: the conversion stopped (exit status {os.WEXITSTATUS(status)})", file=file)

    def _too_large(self, job: Progress, file: str | None, how: str = "") -> TooLarge:
        detail = f" ({how})" if how else ""
        err = TooLarge(f"{job.label}: converting this input needs more than the worker memory limit of "
                       f"{_fmt_bytes(self.memory_limit)}{detail}; raise it with --worker-memory "
                       "if the file is genuine", file=file)
        err.worker_limit = True  # the cache retries it once the limit changes
        return err

    @staticmethod
    def _mirror(msg: dict, job: Progress, board: ProgressBoard, mirrored: dict[str, Progress]) -> None:
        """A child's progress, on the parent's board: the job itself, or a nested one."""
        key = msg["key"]
        if key == job.key:
            target = job
        else:
            target = mirrored.get(key)
            if target is None:
                target = mirrored[key] = board.start(key, msg["label"])
            if msg.get("done"):
                board.finish(mirrored.pop(key))
                return
        target.update(msg.get("fraction"), msg.get("message"))


class _Frames:
    """The frames a child sends, read as they come; a child that is silent and uses no
    CPU for ``idle`` seconds is killed (``stalled``)."""

    def __init__(self, pipe, pid: int, idle: float):
        self.pipe, self.pid, self.idle = pipe, pid, idle
        self.buf = bytearray()  # grows in place: a result of 100 MB arrives in 64 KiB reads
        self.stalled = False

    def _cpu(self) -> int | None:
        try:
            with open(f"/proc/{self.pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            return int(fields[11]) + int(fields[12])  # utime + stime (proc(5), after the name)
        except (OSError, IndexError, ValueError):
            return None

    def _more(self) -> bool:
        quiet_since, cpu = time.monotonic(), self._cpu()
        # poll, not select: a server with many files open (memory-mapped trace indexes)
        # has descriptors past select's FD_SETSIZE of 1024.
        poller = select.poll()
        poller.register(self.pipe.fileno(), select.POLLIN | select.POLLHUP)
        while True:
            ready = poller.poll(1000 * min(5.0, self.idle))
            if ready:
                data = self.pipe.read(1 << 20)
                if not data:
                    return False
                self.buf += data
                return True
            now_cpu = self._cpu()
            if now_cpu != cpu:
                quiet_since, cpu = time.monotonic(), now_cpu
            elif time.monotonic() - quiet_since >= self.idle:
                self.stalled = True
                try:
                    os.kill(self.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
                return False

    def __iter__(self):
        while True:
            while len(self.buf) < _HEAD.size:
                if not self._more():
                    return
            kind, length = _HEAD.unpack_from(self.buf)
            while len(self.buf) < _HEAD.size + length:
                if not self._more():
                    return
            payload = bytes(self.buf[_HEAD.size:_HEAD.size + length])
            del self.buf[:_HEAD.size + length]
            yield kind, payload


def _rebuild(e: dict) -> ProfscopeError:
    cls = getattr(errors, e["cls"], None)
    if not (isinstance(cls, type) and issubclass(cls, ProfscopeError)):
        cls = BadInput
    err = cls(e["message"], file=e["file"])
    err.status = e["status"]
    err.transient = e.get("transient", False)
    return err


# -- the child side ----------------------------------------------------------------------


def _child(fn, job: Progress, board: ProgressBoard, w: int, memory_limit: int, cpu_seconds: int,
           sockets: list[int]) -> None:
    global _IN_WORKER
    _IN_WORKER = True
    keeping_until_exit()  # this child ends with os._exit below
    code = 0
    try:
        pipe = os.fdopen(w, "wb", buffering=0)
        send_lock = threading.Lock()

        def send(kind: bytes, payload: bytes) -> None:
            with send_lock:
                pipe.write(_HEAD.pack(kind, len(payload)))
                pipe.write(payload)

        try:
            _detach(sockets)
            _limit_self(memory_limit, cpu_seconds)
            _forward_progress(job, board, send)
            result = fn(job)
            send(_RESULT, result or b"")
        except MemoryError:
            send(_MEMORY, b"")
        except ProfscopeError as e:
            send(_ERROR, orjson.dumps({"cls": type(e).__name__, "status": e.status, "message": e.message,
                                       "file": e.file}))
        except OSError as e:
            # Reading the input failed (permission, I/O error, the bucket unreachable):
            # the user's to see, but not a property of the file, so not remembered.
            send(_ERROR, orjson.dumps({"cls": "BadInput", "status": 422, "file": getattr(e, "filename", None),
                                       "message": f"{job.label}: cannot read the input: {e}", "transient": True}))
        except BaseException as e:  # noqa: BLE001 - reported to the parent, which decides
            send(_BUG, orjson.dumps({"type": type(e).__name__, "message": str(e)[:2000],
                                     "traceback": traceback.format_exc()[-20000:]}))
    except BaseException:  # noqa: BLE001 - the pipe itself failed: the parent sees EOF
        code = 1
    finally:
        os._exit(code)


def _socket_fds() -> list[int]:
    """The file descriptors of this process that are sockets (none without /proc)."""
    out = []
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:
        return out
    for name in names:
        fd = int(name)
        try:
            if fd > 2 and stat.S_ISSOCK(os.fstat(fd).st_mode):
                out.append(fd)
        except OSError:
            continue
    return out


def _detach(sockets: list[int]) -> None:
    """Let go of what the child inherited from the server but must not hold."""
    # Ctrl+C reaches the whole process group: a child ends at once instead of running the
    # server's own handlers (uvicorn's graceful shutdown, copied into it).
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    try:  # and it ends with the server, should the server be killed (prctl PR_SET_PDEATHSIG)
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    # The server's sockets (the listening one, clients' connections), as listed before
    # the fork: a copy held here would keep a connection the server closed open until
    # the conversion ends. Sockets made in the child since (an event loop's self-pipe, by
    # a fork handler) are not among them. Each is pointed at /dev/null rather than
    # closed, so that its number is not reused while the socket object copied into this
    # process still owns it.
    # Another thread may have closed one of them between the listing and the fork, and
    # its number been reused, by this child's result pipe among others: a fd that is no
    # socket now is left alone (the pipe pointed at /dev/null was a result sent nowhere,
    # "the conversion stopped (exit status 0)", seen under a loaded test run).
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        for fd in sockets:
            try:
                if stat.S_ISSOCK(os.fstat(fd).st_mode):
                    os.dup2(devnull, fd)
            except OSError:
                continue
    finally:
        os.close(devnull)


def _limit_self(memory_limit: int, cpu_seconds: int) -> None:
    # A child that ends on a signal is reported by the parent (by its name); a traceback
    # of every thread on stderr (pytest turns faulthandler on) would only repeat it.
    faulthandler.disable()
    try:
        os.nice(NICE)
    except OSError:
        pass
    # RLIMIT_AS counts the address space, not what is resident: the fork's own size (the
    # server's mappings, shared copy-on-write) plus the budget.
    with open("/proc/self/statm") as f:
        size = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (size + memory_limit, size + memory_limit))
    used = resource.getrusage(resource.RUSAGE_SELF)
    spent = int(used.ru_utime + used.ru_stime)  # CPU time is inherited from the parent
    resource.setrlimit(resource.RLIMIT_CPU, (spent + cpu_seconds, spent + cpu_seconds + 5))
    # A deep recursion in a reader is a RecursionError, never a fault of the C stack.
    sys.setrecursionlimit(min(sys.getrecursionlimit(), 5000))


def _forward_progress(job: Progress, board: ProgressBoard, send) -> None:
    """Make the job's (and nested jobs') updates reach the parent's board."""
    last = [0.0, None]

    def forwarder(p: Progress, original):
        def update(fraction=None, message=None):
            original(fraction, message)
            now = time.monotonic()
            if message == last[1] and now - last[0] < PROGRESS_INTERVAL_S:
                return
            last[0], last[1] = now, message
            send(_PROGRESS, orjson.dumps({"key": p.key, "label": p.label, "fraction": p.fraction,
                                          "message": p.message}))
        return update

    job.update = forwarder(job, job.update)
    start, finish = board.start, board.finish

    def nested_start(key: str, label: str) -> Progress:
        p = start(key, label)
        p.update = forwarder(p, p.update)
        send(_PROGRESS, orjson.dumps({"key": key, "label": label, "fraction": 0.0, "message": ""}))
        return p

    def nested_finish(p: Progress) -> None:
        finish(p)
        if p is not job:
            send(_PROGRESS, orjson.dumps({"key": p.key, "label": p.label, "done": True}))

    board.start, board.finish = nested_start, nested_finish

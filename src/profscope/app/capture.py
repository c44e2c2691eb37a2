"""Capturing profiles from running jobs: capture jobs with stages, continuous sessions
with snapshots, and the folder profscope owns where their runs are written.

A capture names one or more profiler servers (``host:port``, as
``jax.profiler.start_server(port)`` opens). Each target is recorded by its own
``Profile`` call (storage/profiler_client.py) in its own thread, all with the same
``start_timestamp_ns``, so the hosts' timelines line up; a target that fails is reported
and the others are still saved. Each captured host becomes
``<capture dir>/plugins/profile/<session>/<host>_<port>.xplane.pb``: written into a
staging folder, then the whole session renamed into place, and it is a run of the
workspace (listed under ``captures/``, storage/mounted.py). Nothing is ever written into the log directory.

The server may open connections to the addresses a request names, so only targets the
:class:`TargetPolicy` allows are dialled: loopback by default, more with
``--capture-allow PATTERN`` (address patterns match addresses, a name's after resolution;
name patterns match names). Each host's answer is at most ``max_answer_bytes``
(``--capture-max-bytes``). ``stop`` ends a capture within :data:`STOP_GRACE_S` whatever
its profilers do, and ``shutdown`` (Ctrl+C) ends every capture at once.
"""

from __future__ import annotations

import errno
import fnmatch
import ipaddress
import itertools
import json
import math
import os
import re
import secrets
import shutil
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Callable

from profscope.app.capture_targets import MAX_TARGETS, expand_dns, parse_targets
from profscope.errors import BadRequest, Conflict, Forbidden, NotFound, ProfscopeError, Stopping
from profscope.storage import LogDir
from profscope.storage.profiler_client import (DEFAULT_MAX_ANSWER_BYTES, AnswerTooLarge, CaptureSettings, ProfilerClient,
                                               TargetError, split_address)

__all__ = ["CAPTURE_META_FILE", "CaptureDir", "CaptureJob", "Capturer", "CaptureSettings", "ContinuousSession",
           "TargetPolicy", "parse_capture_meta", "parse_duration", "parse_targets", "read_capture_meta",
           "write_capture_meta"]

# Jobs and continuous sessions remembered for their status pages, newest kept.
KEEP_FINISHED = 50
# A staging folder this old was left by a capture that crashed (a capture is at most an hour).
STALE_STAGING_S = 24 * 3600
# Seconds ahead of now that several hosts are asked to start recording together.
SYNC_MARGIN_S = 0.25
# Seconds after Stop that a capture's profilers have to answer (a job's Terminate makes
# its Profile call return what it has); the calls still open then are cancelled: a
# profiler that ignores Terminate, or one stuck collecting, would otherwise hold the job
# until its gRPC deadline (~3 h for an hour's recording, profiler_client.timeout_s).
STOP_GRACE_S = 3.0
# ... and, when it was stopped while recording, this much more per second it recorded: the
# job serialises what it recorded at 0.1-0.5 s per second (docs/capture.md, jax 0.10.2 on
# 2 cores), so a long recording stopped late is not lost to the cancel.
SERIALISE_S_PER_RECORDED_S = 0.5
_HOST_CHARS = re.compile(r"[^A-Za-z0-9._-]+")
# Why a capture was made (a trigger's reason, its condition and values), beside the hosts'
# XSpaces in the session folder: write_capture_meta / read_capture_meta. A name no reader
# claims (model/file_kinds.py: OTHER), so the run lists only its hosts.
CAPTURE_META_FILE = "profscope_capture.json"
# The largest metadata file read back (a trigger's reason and a few values: ~1 KB).
MAX_CAPTURE_META_BYTES = 1 << 20


def write_capture_meta(session_dir: str | os.PathLike, meta: dict) -> Path:
    """Write ``meta`` (plain JSON data: ``reason``, ``condition``, ``fired_at`` (unix s),
    ``values``, ``mode`` ("capture" or "ring"), ``targets``) as the session folder's
    :data:`CAPTURE_META_FILE`, atomically (a reader sees all of it or none). Called on a
    staging folder before it is published, so the run appears with its reason."""
    path = Path(session_dir) / CAPTURE_META_FILE
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.part")
    try:
        tmp.write_text(json.dumps(meta, indent=1, sort_keys=True, allow_nan=False))
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def read_capture_meta(session_dir: str | os.PathLike) -> dict | None:
    """The session folder's :data:`CAPTURE_META_FILE` as a dict; None where there is none,
    or it is not a JSON object of at most :data:`MAX_CAPTURE_META_BYTES` (a hand-made
    folder's stray file must not break the run)."""
    path = Path(session_dir) / CAPTURE_META_FILE
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_CAPTURE_META_BYTES + 1)
    except OSError:
        return None
    return parse_capture_meta(raw)


def parse_capture_meta(raw: bytes) -> dict | None:
    """:func:`read_capture_meta` of the file's bytes (the Summary reads them through the
    log directory: storage/mounted.py)."""
    if len(raw) > MAX_CAPTURE_META_BYTES:
        return None
    try:
        meta = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    return meta if isinstance(meta, dict) else None


# The longest recording one capture asks for: CaptureSettings refuses more (a profiler
# server keeps the whole recording in memory until it answers).
MAX_DURATION_MS = 3_600_000
_DURATION = re.compile(r"\s*(\d+(?:\.\d+)?)\s*(ms|s|sec|m|min|h|hr|hour|hours)?\s*", re.IGNORECASE)
_UNIT_MS = {"ms": 1, "s": 1000, "sec": 1000, "m": 60_000, "min": 60_000, "h": 3_600_000, "hr": 3_600_000,
            "hour": 3_600_000, "hours": 3_600_000}


def parse_duration(text: str | int | float, what: str = "duration") -> int:
    """``2s``, ``1500ms``, ``1m``, ``1h``, ``2000`` (milliseconds, XProf's unit) -> milliseconds.
    Hours are read too, so ``2h`` is refused for being over the one-hour limit, not for
    its unit."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        value, unit = float(text), "ms"
    else:
        m = _DURATION.fullmatch(str(text))
        if not m:
            raise BadRequest(f"{what} {text!r} is not a duration: give e.g. 2s, 1500ms, 1m or 2000 (milliseconds), "
                             "at most an hour")
        value, unit = float(m.group(1)), (m.group(2) or "ms").lower()
    ms = value * _UNIT_MS[unit]
    if ms > MAX_DURATION_MS:
        raise BadRequest(f"{what} {text!r} is over an hour, the limit of one capture ({MAX_DURATION_MS:,} ms): "
                         "record less at a time")
    return int(round(ms))


# An address pattern: an IPv4 address with shell wildcards (10.0.*, 10.0.[0-3].*), or one
# with a ':' (IPv6: fd00::*), or a network (10.0.0.0/16, fd00::/8). Everything else is a
# name pattern. A host name cannot hold ':', nor be digits and dots only (RFC 1123 2.1:
# the top-level label is never all-numeric), so no pattern is both.
_IPV4_GLOB = re.compile(r"[0-9.*?\[\]!-]+")
_IPV6_GLOB = re.compile(r"[0-9A-Fa-f:.*?\[\]!-]*:[0-9A-Fa-f:.*?\[\]!-]*")


@dataclass(frozen=True)
class _Pattern:
    """One ``--capture-allow`` pattern: ``HOST``, ``HOST:PORT``, ``[IPV6]:PORT``, a bare
    IPv6 pattern or a network; ``kind`` is ``name``, ``address`` or ``any`` (``*``)."""

    text: str
    host: str
    port: str | None
    kind: str
    network: ipaddress.IPv4Network | ipaddress.IPv6Network | None = None

    @classmethod
    def parse(cls, text: str) -> _Pattern:
        host, port = text.lower(), None
        if host.startswith("["):
            inside, _, rest = host[1:].partition("]")
            host, port = inside, (rest[1:] if rest.startswith(":") else None)
        elif host.count(":") == 1:
            host, port = host.split(":")
        if host == "*":
            return cls(text, host, port, "any")
        if "/" in host:
            try:
                return cls(text, host, port, "address", ipaddress.ip_network(host, strict=False))
            except ValueError:
                raise BadRequest(f"--capture-allow {text!r}: {host!r} is not a network (e.g. 10.0.0.0/16)") from None
        kind = "address" if _IPV4_GLOB.fullmatch(host) or _IPV6_GLOB.fullmatch(host) else "name"
        return cls(text, host, port, kind)

    def _port_ok(self, port: int) -> bool:
        return self.port is None or fnmatch.fnmatchcase(str(port), self.port)

    def matches_name(self, name: str, port: int) -> bool:
        return self.kind in ("name", "any") and fnmatch.fnmatchcase(name.lower(), self.host) and self._port_ok(port)

    def matches_address(self, ip: ipaddress.IPv4Address | ipaddress.IPv6Address, port: int) -> bool:
        if self.kind == "name" or not self._port_ok(port):
            return False
        if self.network is not None:
            return ip.version == self.network.version and ip in self.network
        return fnmatch.fnmatchcase(ip.compressed, self.host)


def _resolve(host: str) -> list[str]:
    """The addresses ``host`` resolves to here (the system resolver: /etc/hosts, DNS),
    in its order; [] when it does not resolve."""
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        return []
    return list(dict.fromkeys(info[4][0].split("%")[0] for info in infos))


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        return None


class TargetPolicy:
    """Which profiler addresses this server may dial: loopback always (the names
    ``localhost``..., 127.0.0.0/8, ::1), and those ``allow`` matches: shell patterns
    (``10.0.*``, ``*.internal``, ``gpu7:8466``, ``*`` for any) or networks (``10.0.0.0/16``).

    Names and addresses are matched separately (issue 32): an **address pattern** matches
    an address, given as one or what a name resolves to (every address the name resolves
    to must match, and the capture then dials that address, not the name again: a second
    lookup could answer another); a **name pattern** matches a name as written, never an
    address. So ``10.0.*`` allows ``10.0.3.4`` and a name that resolves into 10.0.x.x, and
    not the name ``10.0.evil.example``. ``resolve`` is the resolver (tests pass their own)."""

    def __init__(self, allow: list[str] | tuple[str, ...] = (), *, resolve: Callable[[str], list[str]] | None = None):
        self.allow = tuple(p.strip() for p in allow if p and p.strip())
        self.patterns = [_Pattern.parse(p) for p in self.allow]
        self.resolve = resolve or _resolve

    @staticmethod
    def is_loopback(host: str) -> bool:
        if host.lower() in ("localhost", "localhost.localdomain", "ip6-localhost"):
            return True
        ip = _ip(host)
        return ip is not None and ip.is_loopback

    def address_ok(self, ip, port: int) -> bool:
        return ip.is_loopback or any(p.matches_address(ip, port) for p in self.patterns)

    def route(self, address: str) -> str:
        """The ``host:port`` to dial for ``address`` (itself, or the address its name was
        resolved to and checked as), or :class:`Forbidden` naming the rule."""
        host, port = split_address(address)
        if self.is_loopback(host):
            return address
        ip = _ip(host)
        why = ""
        if ip is not None:
            if self.address_ok(ip, port):
                return address
        elif any(p.matches_name(host, port) for p in self.patterns):
            return address
        elif any(p.kind == "address" for p in self.patterns):
            found = self.resolve(host)
            ips = [a for a in map(_ip, found) if a is not None]
            if ips and len(ips) == len(found) and all(self.address_ok(a, port) for a in ips):
                return f"[{ips[0].compressed}]:{port}" if ips[0].version == 6 else f"{ips[0]}:{port}"
            why = f" ({host} resolves to {', '.join(found)})" if found else f" ({host} does not resolve here)"
        raise Forbidden(
            f"refused to capture from {address}{why}: this server dials only loopback profiler addresses"
            + (f" and those matching {', '.join(self.allow)}" if self.allow else "")
            + "; start profscope with --capture-allow PATTERN (e.g. --capture-allow '10.0.*' for addresses, "
              "'*.internal' for names) to allow more"
        )

    def check(self, address: str) -> None:
        self.route(address)

    def describe(self) -> str:
        return "loopback" + (" and " + ", ".join(self.allow) if self.allow else " only")


class CaptureDir:
    """The folder captured runs are written into: ``root/plugins/profile/<session>/``,
    XProf's layout, so the folder is also a log directory XProf and TensorBoard read.

    A capture's hosts are first written into a staging folder, ``root/.staging/<job>/``
    (no run is listed there: it is not under ``plugins/profile``), and the whole session
    is then renamed into place at once: the run list never shows a capture half done."""

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root).expanduser().resolve()
        self.logdir = LogDir(str(self.root))

    @property
    def sessions(self) -> Path:
        return self.root / "plugins" / "profile"

    def stage(self, job_id: str) -> Path:
        folder = self.root / ".staging" / job_id
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    @staticmethod
    def host_file(address: str) -> str:
        """``localhost:9999`` -> ``localhost_9999.xplane.pb`` (XProf's name for it too)."""
        host, port = split_address(address)
        return f"{_HOST_CHARS.sub('_', host).strip('_') or 'host'}_{port}.xplane.pb"

    def write(self, staging: Path, address: str, xspace: bytes) -> Path:
        """Write one host's XSpace atomically: a reader sees the whole file or none."""
        path = staging / self.host_file(address)
        tmp = staging / f".{path.name}.{os.getpid()}.{threading.get_ident()}.part"
        try:
            with open(tmp, "wb") as f:
                f.write(xspace)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        finally:
            if tmp.exists():
                tmp.unlink()
        return path

    def publish(self, staging: Path, stem: str | None = None) -> str:
        """Rename a staging folder into ``plugins/profile/`` under a session name no other
        capture has: XProf's ``%Y_%m_%d_%H_%M_%S``, then ``_2``, ``_3``... (another process
        writing the same folder may take a name first: rename refuses a non-empty target)."""
        stem = stem or datetime.now().strftime("%Y_%m_%d_%H_%M_%S")
        self.sessions.mkdir(parents=True, exist_ok=True)
        for n in itertools.count(1):
            name = stem if n == 1 else f"{stem}_{n}"
            target = self.sessions / name
            if target.exists():
                continue
            try:
                os.rename(staging, target)
                return name
            except OSError as e:
                if e.errno not in (errno.EEXIST, errno.ENOTEMPTY):
                    raise
        raise AssertionError("unreachable")

    def discard(self, staging: Path) -> None:
        shutil.rmtree(staging, ignore_errors=True)

    def clean_stale(self, age_s: float = STALE_STAGING_S) -> None:
        """Remove staging folders a crashed capture left (none is live that long)."""
        try:
            entries = list(os.scandir(self.root / ".staging"))
        except OSError:
            return
        for d in entries:
            try:
                if time.time() - d.stat(follow_symlinks=False).st_mtime > age_s:
                    shutil.rmtree(d.path, ignore_errors=True)
            except OSError:
                pass


# -- one-shot captures -------------------------------------------------------------------

@dataclass
class TargetState:
    address: str
    state: str = "pending"  # pending, recording, collecting, saved, failed, stopped
    error: str | None = None
    code: str | None = None
    bytes: int = 0
    file: str | None = None
    over_limit: bool = False  # its answer was over the capture's answer limit

    def to_json(self) -> dict:
        return {"address": self.address, "state": self.state, "error": self.error, "code": self.code,
                "bytes": self.bytes, "file": self.file}


@dataclass
class CaptureJob:
    """One capture: its targets, settings and where it stands. ``stage`` goes probing ->
    waiting (the delay) -> recording (until ``record_ends``) -> collecting -> saved or
    failed; ``stopped`` is set when it was stopped early (what was recorded and answered
    within :data:`STOP_GRACE_S` is kept), and ``stage`` is ``stopped`` when nothing was."""

    id: str
    targets: list[str]
    settings: CaptureSettings
    staging: Path = field(repr=False)
    stem: str  # the session's name, from the time the capture began
    session: str | None = None  # once saved
    run: str | None = None  # once saved
    stage: str = "probing"
    created: float = field(default_factory=time.time)
    record_starts: float | None = None
    record_ends: float | None = None
    finished: float | None = None
    stopped: bool = False
    cut_off_at: float | None = None  # when the calls still open are cancelled (after a stop)
    stop_reason: str | None = None  # "the capture was stopped", "the server stopped"
    error: str | None = None
    hosts: dict[str, TargetState] = field(default_factory=dict)
    done: threading.Event = field(default_factory=threading.Event, repr=False)
    # the addresses to dial, where not the targets themselves (TargetPolicy.route)
    routes: dict[str, str] = field(default_factory=dict, repr=False)
    # the gRPC clients of the calls in flight, which _cancel closes; cancelled once it has
    clients: dict[str, ProfilerClient] = field(default_factory=dict, repr=False)
    cancelled: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    # why it was made (a trigger's reason...): written as the session's CAPTURE_META_FILE
    meta: dict | None = None

    @property
    def saved(self) -> list[TargetState]:
        return [h for h in self.hosts.values() if h.state == "saved"]

    @property
    def failed(self) -> list[TargetState]:
        return [h for h in self.hosts.values() if h.state == "failed"]

    def summary(self) -> str:
        """One sentence: what was saved where, and what failed."""
        if self.stage in ("failed", "stopped"):
            return f"capture {self.stage}: {self.error}"
        parts = [f"captured {len(self.saved)} host(s) into run {self.run}" + (" (stopped early)" if self.stopped else "")]
        parts += [f"{h.address} {h.state}: {h.error}" for h in self.hosts.values() if h.state in ("failed", "stopped")]
        return "; ".join(parts)

    def to_json(self) -> dict:
        now = time.time()
        remaining = starts_in = None
        if self.stage in ("waiting", "recording") and self.record_ends is not None:
            remaining = max(0.0, self.record_ends - now)
        if self.stage == "waiting" and self.record_starts is not None:
            starts_in = max(0.0, self.record_starts - now)
        return {
            "id": self.id, "targets": self.targets, "stage": self.stage, "run": self.run, "session": self.session,
            "durationMs": self.settings.duration_ms, "delayMs": self.settings.delay_ms,
            "hostTracerLevel": self.settings.host_tracer_level, "deviceTracerLevel": self.settings.device_tracer_level,
            "pythonTracerLevel": self.settings.python_tracer_level,
            "created": self.created, "recordStarts": self.record_starts, "recordEnds": self.record_ends,
            "remainingS": remaining, "startsInS": starts_in, "finished": self.finished, "stopped": self.stopped,
            "cutOffInS": max(0.0, self.cut_off_at - now) if self.cut_off_at and not self.done.is_set() else None,
            "error": self.error, "reason": (self.meta or {}).get("reason"),
            "done": self.done.is_set(), "summary": self.summary() if self.done.is_set() else None,
            "hosts": [h.to_json() for h in self.hosts.values()],
        }


@dataclass
class ContinuousSession:
    """Continuous profiling on a set of targets: each ``snapshot`` saves what every target
    recorded since the previous one as a new run."""

    id: str
    targets: list[str]
    settings: CaptureSettings
    state: str = "starting"  # starting, running, stopped, failed
    created: float = field(default_factory=time.time)
    error: str | None = None
    hosts: dict[str, TargetState] = field(default_factory=dict)
    snapshots: list[str] = field(default_factory=list)  # job ids, oldest first
    routes: dict[str, str] = field(default_factory=dict, repr=False)  # as CaptureJob.routes
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def to_json(self, jobs: Callable[[str], CaptureJob | None]) -> dict:
        snaps = [j.to_json() for j in map(jobs, self.snapshots) if j is not None]
        return {"id": self.id, "targets": self.targets, "state": self.state, "created": self.created,
                "error": self.error, "hosts": [h.to_json() for h in self.hosts.values()], "snapshots": snaps}


class Capturer:
    """Runs captures for a workspace: ``start`` a job, follow it with ``job(id)``, ``stop``
    it early; ``start_continuous`` / ``snapshot`` / ``stop_continuous`` for continuous
    mode. One capture at a time per target (the job's profiler allows one session);
    ``on_saved(job)`` is told of each finished job (the workspace lists its run).
    ``max_answer_bytes``: the largest answer taken from one host (``--capture-max-bytes``)."""

    def __init__(self, folder: CaptureDir, policy: TargetPolicy | None = None, *,
                 mount: str = "captures", on_saved: Callable[[CaptureJob], None] | None = None,
                 max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES):
        self.folder = folder
        self.policy = policy or TargetPolicy()
        self.mount = mount
        self.on_saved = on_saved
        ProfilerClient.check_limit(max_answer_bytes)
        self.max_answer_bytes = max_answer_bytes
        self._lock = threading.Lock()
        self._jobs: dict[str, CaptureJob] = {}
        self._continuous: dict[str, ContinuousSession] = {}
        self._busy: dict[str, str] = {}  # target -> the job or continuous session recording it
        self._stopping = False
        # the automatic captures' watches (app/capture_watch.py Watches), made on first use;
        # ended with the server (close, shutdown)
        self.watches = None
        # last-N-seconds rings (app/capture_ring.py RingRecorder) by id; stopped with the server
        self.rings: dict = {}
        folder.clean_stale()

    # -- bookkeeping ---------------------------------------------------------------------

    def claim(self, targets: list[str], owner: str) -> None:
        with self._lock:
            if self._stopping:
                raise Stopping("the server is stopping: no capture starts now")
            busy = [(t, self._busy[t]) for t in targets if t in self._busy]
            if busy:
                t, other = busy[0]
                raise Conflict(f"{t} is already being captured (capture {other}); wait for it to finish or stop it")
            for t in targets:
                self._busy[t] = owner

    def release(self, targets: list[str], owner: str) -> None:
        with self._lock:
            for t in targets:
                if self._busy.get(t) == owner:
                    del self._busy[t]

    def remember(self, job: CaptureJob) -> None:
        with self._lock:
            self._jobs[job.id] = job
            done = [j for j in self._jobs.values() if j.done.is_set()]
            keep = {j.id for s in self._continuous.values() for j in map(self._jobs.get, s.snapshots) if j}
            for old in sorted(done, key=lambda j: j.created)[: max(0, len(done) - KEEP_FINISHED)]:
                if old.id not in keep:
                    del self._jobs[old.id]

    def job(self, job_id: str) -> CaptureJob:
        found = self._jobs.get(job_id)
        if found is None:
            raise NotFound(f"no capture {job_id!r} (captures are remembered until the server restarts)")
        return found

    def find(self, job_id: str) -> CaptureJob | None:
        return self._jobs.get(job_id)

    def jobs(self) -> list[CaptureJob]:
        return sorted(self._jobs.values(), key=lambda j: j.created, reverse=True)

    def new_job(self, targets: list[str], settings: CaptureSettings, job_id: str | None = None,
                routes: dict[str, str] | None = None, meta: dict | None = None, name_suffix: str = "") -> CaptureJob:
        job_id = job_id or secrets.token_hex(6)
        # the session's name: XProf's start time, then what made it (``_trigger-step_time``)
        suffix = _HOST_CHARS.sub("_", name_suffix).strip("_")[:60]
        stem = datetime.now().strftime("%Y_%m_%d_%H_%M_%S") + (f"_{suffix}" if suffix else "")
        return CaptureJob(id=job_id, targets=targets, settings=settings, staging=self.folder.stage(job_id),
                          stem=stem, hosts={t: TargetState(t) for t in targets}, routes=dict(routes or {}), meta=meta)

    def checked_targets(self, targets: list[str] | str) -> tuple[list[str], dict[str, str]]:
        """The targets, normalised (ranges and ``dns:///`` names expanded: capture_targets.py),
        and the addresses to dial where not themselves."""
        text = targets if isinstance(targets, str) else ",".join(targets)
        routes = dict(pair for t in parse_targets(text) for pair in expand_dns(self.policy, t))
        if len(routes) > MAX_TARGETS:
            raise BadRequest(f"targets: the names resolve to {len(routes):,} addresses; one capture takes at most "
                             f"{MAX_TARGETS} (MAX_TARGETS): capture fewer at a time")
        return list(routes), {t: r for t, r in routes.items() if r != t}

    def client_for(self, address: str, routes: dict[str, str]) -> ProfilerClient:
        return ProfilerClient(address, max_answer_bytes=self.max_answer_bytes, dial=routes.get(address))

    def _open(self, job: CaptureJob, address: str) -> ProfilerClient | None:
        """A client for one of ``job``'s calls, which ``_cancel`` can end; None once the
        job is cancelled."""
        with job.lock:
            if job.cancelled:
                return None
            client = job.clients[address] = self.client_for(address, job.routes)
            return client

    # -- one-shot ------------------------------------------------------------------------

    def start(self, targets: list[str] | str, settings: CaptureSettings, *, num_retry: int = 0,
              meta: dict | None = None, name_suffix: str = "") -> CaptureJob:
        """Start recording every target now (after ``settings.delay_ms``); returns at once.
        ``meta`` (why: a trigger's reason) is saved as the run's :data:`CAPTURE_META_FILE`,
        and ``name_suffix`` ends its session's name (``..._trigger-step_time``)."""
        targets, routes = self.checked_targets(targets)
        if not 0 <= num_retry <= 10:
            raise BadRequest(f"num_retry must be from 0 to 10, not {num_retry}")
        job_id = secrets.token_hex(6)
        self.claim(targets, job_id)
        try:
            job = self.new_job(targets, settings, job_id, routes, meta, name_suffix)
        except BaseException:
            self.release(targets, job_id)
            raise
        self.remember(job)
        threading.Thread(target=self._run, args=(job, num_retry), name=f"capture-{job.id}", daemon=True).start()
        return job

    def capture(self, targets: list[str] | str, settings: CaptureSettings, *, num_retry: int = 0) -> CaptureJob:
        """``start`` and wait until the job is done."""
        job = self.start(targets, settings, num_retry=num_retry)
        job.done.wait()
        return job

    def stop(self, job_id: str, *, grace: float = STOP_GRACE_S, reason: str = "the capture was stopped") -> CaptureJob:
        """End the capture. Before the recording's end, each profiler is asked to end it
        (``Terminate``: its ``Profile`` call then returns what it has, which is kept) and
        has ``grace`` seconds plus :data:`SERIALISE_S_PER_RECORDED_S` per second recorded
        to send it; while "collecting", ``grace`` seconds. The calls still open then are
        cancelled: a profiler that ignores Terminate, or never answers while collecting,
        holds nothing longer. Each call sets its own deadline and the earliest wins: a
        second Stop while a long recording is sent cuts it off in ``grace`` seconds.
        ``grace`` 0 cancels now. Returns at once."""
        job = self.job(job_id)
        if job.done.is_set():
            return job
        first = not job.stopped
        job.stopped = True
        if first or grace <= 0:
            job.stop_reason = reason  # what a host cut off by the cancel, and a job with none saved, say
        if first and job.stage in ("probing", "waiting", "recording"):
            threading.Thread(target=self._terminate, args=(job,), name=f"capture-{job.id}-stop", daemon=True).start()
            now = time.time()
            recorded = max(0.0, min(now, job.record_ends or now) - (job.record_starts or now))
            grace += SERIALISE_S_PER_RECORDED_S * recorded if grace > 0 else 0.0
        job.cut_off_at = min(job.cut_off_at or math.inf, time.time() + max(0.0, grace))
        if grace <= 0:
            self._cancel(job)
        else:
            timer = threading.Timer(grace, self._cancel, args=(job,))
            timer.daemon = True
            timer.start()
        return job

    def _terminate(self, job: CaptureJob) -> None:
        for address in job.targets:
            client = job.clients.get(address)
            if client is None or job.hosts[address].state not in ("recording", "collecting"):
                continue
            try:
                client.terminate(job.id)
            except TargetError:
                pass  # that target's own call reports its failure, or the cancel ends it

    @staticmethod
    def _cancel(job: CaptureJob) -> None:
        """Cancel every call of ``job`` still open (closing a gRPC channel ends its calls
        with CANCELLED at once) and open no other."""
        with job.lock:
            job.cancelled = True
            clients = list(job.clients.values())
        for c in clients:
            c.close()

    def shutdown(self) -> None:
        """The server is stopping (Ctrl+C): refuse new captures and end every one under
        way now, without the grace (a blocking XProf capture request is then answered, a
        503, instead of being cut by the server's shutdown). Returns at once: the
        cancelling runs in a thread (this is called from a signal handler)."""
        with self._lock:
            self._stopping = True
        running = [j for j in self._jobs.values() if not j.done.is_set()]

        def cancel_all() -> None:
            if self.watches is not None:  # first: a watch must not fire a capture meanwhile
                self.watches.stop_all()
            for ring in list(self.rings.values()):
                ring.stop()
            for j in running:
                self.stop(j.id, grace=0, reason="the server stopped")

        threading.Thread(target=cancel_all, name="capture-shutdown", daemon=True).start()

    def _run(self, job: CaptureJob, num_retry: int) -> None:
        try:
            clients = {t: c for t in job.targets if (c := self._open(job, t)) is not None}

            def probe(t: str) -> bool:
                try:
                    clients[t].probe()
                    return True
                except TargetError as e:
                    self._host_failed(job, job.hosts[t], e)
                    return False

            # Probe first, all at once: a dead address fails in milliseconds (one that
            # drops packets in the probe's 5 s) and the others then all start at one
            # instant, the hosts' common start_timestamp_ns.
            with ThreadPoolExecutor(max_workers=max(1, len(clients))) as pool:
                live = [t for t, ok in zip(clients, pool.map(probe, clients)) if ok]
            if not live:
                raise _JobFailed("no target answered: " + "; ".join(f"{h.address}: {h.error}" for h in job.failed))
            # Every host is asked to start at one instant; with several, a little ahead, so
            # that the last request is there in time (XProf waits 3 s, capture_profile.cc).
            delay_s = job.settings.delay_ms / 1000 + (SYNC_MARGIN_S if len(live) > 1 else 0.0)
            start = time.time() + delay_s
            job.record_starts, job.record_ends = start, start + job.settings.duration_ms / 1000
            job.stage = "waiting" if delay_s > 0 else "recording"
            threading.Thread(target=self._advance, args=(job,), daemon=True).start()
            # one thread per host: each call blocks for the whole recording
            with ThreadPoolExecutor(max_workers=len(live), thread_name_prefix=f"capture-{job.id}") as pool:
                for t in live:
                    pool.submit(self._record_one, job, clients[t], t, int(start * 1e9), num_retry)
            if not job.saved:
                raise _JobFailed("; ".join(f"{h.address}: {h.error}" for h in job.failed) or "nothing recorded")
            self.publish(job)
        except _JobFailed as e:
            # A stopped job that kept nothing says why in one word; its hosts say the rest.
            job.stage, job.error = ("stopped", self._stopped_error(job)) if job.stopped else ("failed", str(e))
        except OSError as e:
            job.stage, job.error = "failed", f"cannot write into {self.folder.root}: {e.strerror or e}"
        except Exception as e:  # noqa: BLE001 - a bug must end the job, not hang its page
            job.stage, job.error = "failed", f"{type(e).__name__}: {e}"
        finally:
            self.finish(job)

    def finish(self, job: CaptureJob) -> None:
        """Close the job's clients, drop its staging unless saved, free its targets, tell
        ``on_saved``, and only then mark it done (a page told "saved" asks the run list
        for it next)."""
        self._cancel(job)
        if job.stage != "saved":
            self.folder.discard(job.staging)
        job.finished = time.time()
        self.release(job.targets, job.id)
        try:
            if job.stage == "saved" and self.on_saved is not None:
                self.on_saved(job)
        finally:
            job.done.set()

    def _host_failed(self, job: CaptureJob, host: TargetState, e: TargetError) -> None:
        """A call of ``host`` ended in ``e``: failed, or stopped when the job's Stop cut it."""
        if job.cancelled:
            host.state, host.error, host.code = "stopped", f"{job.stop_reason} before it answered", None
        else:
            host.state, host.error, host.code = "failed", e.reason, e.code
            host.over_limit = isinstance(e, AnswerTooLarge)

    @staticmethod
    def _stopped_error(job: CaptureJob) -> str:
        return f"{job.stop_reason} before any host answered; nothing was kept"

    def publish(self, job: CaptureJob) -> None:
        """Move the job's hosts into place as one session: the run appears whole (with
        why it was made, ``job.meta``)."""
        if job.meta is not None:
            write_capture_meta(job.staging, job.meta)
        job.session = self.folder.publish(job.staging, job.stem)
        job.run = f"{self.mount}/{job.session}"
        for h in job.saved:
            h.file = f"{self.mount}/plugins/profile/{job.session}/{self.folder.host_file(h.address)}"
        job.stage = "saved"

    @staticmethod
    def _advance(job: CaptureJob) -> None:
        """The job's stage follows the clock: waiting -> recording -> collecting (the
        server says nothing until its answer arrives)."""
        while not job.done.is_set():
            now = time.time()
            if job.stage == "waiting" and now >= (job.record_starts or now):
                job.stage = "recording"
            elif job.stage == "recording" and (now >= (job.record_ends or now) or job.stopped):
                job.stage = "collecting"
                for h in job.hosts.values():
                    if h.state == "recording":
                        h.state = "collecting"
                return
            job.done.wait(0.05)

    def _record_one(self, job: CaptureJob, client: ProfilerClient, address: str, start_ns: int, num_retry: int) -> None:
        host = job.hosts[address]
        if job.stopped:  # stopped while probing: there is nothing to keep
            host.state, host.error = "stopped", "stopped before the recording began"
            return
        host.state = "recording"
        for attempt in range(num_retry + 1):
            try:
                xspace = client.profile(job.settings, start_timestamp_ns=start_ns, session_id=job.id)
                self.folder.write(job.staging, address, xspace)
                host.state, host.bytes, host.error, host.code = "saved", len(xspace), None, None
                return
            except TargetError as e:
                self._host_failed(job, host, e)
                if e.code not in ("UNAVAILABLE", "INTERNAL") or job.stopped or attempt == num_retry:
                    return
                host.state = "recording"
                time.sleep(min(1.0, 0.2 * (attempt + 1)))
            except OSError as e:
                host.state, host.error = "failed", f"cannot write into {self.folder.root}: {e.strerror or e}"
                return

    # -- continuous ----------------------------------------------------------------------

    def start_continuous(self, targets: list[str] | str, settings: CaptureSettings) -> ContinuousSession:
        """Start continuous profiling on every target; a target that cannot (dead, or a
        server without continuous mode) is reported and the others run."""
        targets, routes = self.checked_targets(targets)
        sid = secrets.token_hex(6)
        self.claim(targets, sid)
        session = ContinuousSession(id=sid, targets=targets, settings=settings,
                                    hosts={t: TargetState(t) for t in targets}, routes=routes)
        with self._lock:
            self._continuous[sid] = session
        for t in targets:
            try:
                with self.client_for(t, routes) as c:
                    c.start_continuous(settings)
                session.hosts[t].state = "recording"
            except TargetError as e:
                h = session.hosts[t]
                h.state, h.code = "failed", e.code
                h.error = ("this profiler server has no continuous mode (it needs jax/jaxlib 0.10 or newer); "
                           "capture one profile at a time instead") if e.code == "UNIMPLEMENTED" else e.reason
        live = [t for t, h in session.hosts.items() if h.state == "recording"]
        self.release([t for t in targets if t not in live], sid)
        if not live:
            session.state = "failed"
            session.error = "; ".join(f"{h.address}: {h.error}" for h in session.hosts.values())
        else:
            session.state = "running"
        return session

    def continuous(self, sid: str) -> ContinuousSession:
        found = self._continuous.get(sid)
        if found is None:
            raise NotFound(f"no continuous capture {sid!r}")
        return found

    def continuous_sessions(self) -> list[ContinuousSession]:
        return sorted(self._continuous.values(), key=lambda s: s.created, reverse=True)

    def snapshot(self, sid: str) -> CaptureJob:
        """Save what every running target recorded since the previous snapshot as a new
        run; waits for it (a snapshot is one quick call per target)."""
        session = self.continuous(sid)
        if session.state != "running":
            raise Conflict(f"continuous capture {sid} is {session.state}; start a new one")
        with session.lock:  # one snapshot at a time: each takes what the previous left
            live = [t for t, h in session.hosts.items() if h.state == "recording"]
            job = self.new_job(live, session.settings, routes=session.routes)
            job.stage = "collecting"
            job.record_starts = job.record_ends = time.time()
            self.remember(job)
            session.snapshots.append(job.id)

            def one(address: str) -> None:
                host = job.hosts[address]
                try:
                    client = self._open(job, address)
                    if client is None:
                        raise TargetError(address, "stopped", code="CANCELLED")
                    xspace = client.snapshot()
                    self.folder.write(job.staging, address, xspace)
                    host.state, host.bytes = "saved", len(xspace)
                except TargetError as e:
                    self._host_failed(job, host, e)
                except OSError as e:
                    host.state, host.error = "failed", f"cannot write into {self.folder.root}: {e.strerror or e}"

            with ThreadPoolExecutor(max_workers=max(1, len(live))) as pool:
                list(pool.map(one, live))
            try:
                if job.saved:
                    self.publish(job)
                elif job.stopped:
                    job.stage, job.error = "stopped", self._stopped_error(job)
                else:
                    job.stage = "failed"
                    job.error = "; ".join(f"{h.address}: {h.error}" for h in job.failed) or "no target is recording"
            except OSError as e:
                job.stage, job.error = "failed", f"cannot write into {self.folder.root}: {e.strerror or e}"
            finally:
                self.finish(job)  # listed before it is done, as a one-shot capture
        return job

    def stop_continuous(self, sid: str) -> ContinuousSession:
        session = self.continuous(sid)
        with session.lock:
            if session.state == "running":
                for t, h in session.hosts.items():
                    if h.state != "recording":
                        continue
                    try:
                        with self.client_for(t, session.routes) as c:
                            c.stop_continuous()
                        h.state = "stopped"
                    except TargetError as e:
                        h.state, h.error, h.code = "failed", e.reason, e.code
                session.state = "stopped"
            self.release(session.targets, sid)
        return session

    def close(self) -> None:
        """Stop every watch and continuous session (the server is going away)."""
        if self.watches is not None:
            self.watches.stop_all()
        for ring in list(self.rings.values()):
            ring.stop()
        for s in list(self._continuous.values()):
            if s.state == "running":
                try:
                    self.stop_continuous(s.id)
                except ProfscopeError:
                    pass


class _JobFailed(Exception):
    pass

"""The last N seconds of a running job, kept in profscope (issue 39 item 2).

A job's profiler server records one session at a time and answers only when the session
ends (``Profile``), and its own continuous mode (``GetSnapshot``) answers what it recorded
since the previous snapshot, unbounded in the job. So the ring records **short pieces back
to back**: one ``Profile`` call of ``piece_s`` per host, all hosts of a round started at
one ``start_timestamp_ns``; the next round is asked for as soon as every host answered
(the job refuses a second session while one is open: asking ahead fails with "already
recording", measured). Pieces older than ``window_s`` (or beyond ``max_bytes``) are
dropped. What the job records between two pieces is lost: the **gap**, measured from each
piece's own Task Environment plane (the job's clock: ``profile_stop_time`` of one piece to
``profile_start_time`` of the next) and reported per host.

``snapshot(meta)`` ends the pieces being recorded now (``Terminate``: each ``Profile`` call
returns what it has, so the snapshot ends at the moment it was asked for), takes every
host's pieces of the last ``window_s`` and merges them into one XSpace per host
(formats/xspace_merge.py), saved as a run like any capture, with ``profscope_capture.json``
(write_capture_meta) saying the window held, the gaps in it and why (a trigger's reason).
The ring records on meanwhile.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from profscope.app.capture import STOP_GRACE_S, CaptureJob, Capturer, TargetState, write_capture_meta
from profscope.errors import BadRequest, Conflict, NotFound, ProfscopeError
from profscope.storage.profiler_client import CaptureSettings, ProfilerClient, TargetError

__all__ = ["Piece", "RingRecorder", "ring_of", "start_ring"]

# The longest window a ring keeps (its pieces are held in memory) and the piece lengths.
MAX_WINDOW_S = 600.0
MIN_PIECE_S, MAX_PIECE_S = 0.2, 30.0
# Bytes of pieces one ring holds at most, all hosts together, unless told otherwise.
DEFAULT_MAX_BYTES = 2 << 30
# With several hosts, a round starts this far ahead of the request, so that every host has
# its request in time (loopback: ~1 ms; a request that arrives late starts at once, and
# the round's spread says so). One host starts at once (start_timestamp_ns 0).
RING_SYNC_MARGIN_S = 0.02
# A host that fails this many rounds in a row is dropped (a dead job: UNAVAILABLE each time).
MAX_FAILED_ROUNDS = 3
# How long one piece's call may take beyond the piece: the job serialises it at 0.03-0.5 s
# per recorded second (docs/capture.md), so a host over this is stuck, and is dropped at
# once, since every round waits for its slowest host.
PIECE_ANSWER_S, PIECE_ANSWER_PER_S = 10.0, 2.0


@dataclass
class Piece:
    """One host's recording of one round: the XSpace as the job sent it, and the window
    it covers in the job's clock."""

    xspace: bytes = field(repr=False)
    start_ns: int
    stop_ns: int
    round: int

    @property
    def seconds(self) -> float:
        return (self.stop_ns - self.start_ns) / 1e9


@dataclass
class _Host:
    state: TargetState
    pieces: deque = field(default_factory=deque)
    gaps_ms: deque = field(default_factory=lambda: deque(maxlen=1000))
    failed_rounds: int = 0


class RingRecorder:
    """Back-to-back recordings of ``targets``, the last ``window_s`` seconds kept:
    ``start()``, ``snapshot(meta)``, ``stop()``, ``status()``. ``capturer`` supplies the
    allow-list, the capture folder and the one-capture-per-target rule."""

    def __init__(self, capturer: Capturer, targets: list[str] | str, window_s: float, piece_s: float = 1.0,
                 settings: CaptureSettings | None = None, *, max_bytes: int = DEFAULT_MAX_BYTES):
        if not 0 < window_s <= MAX_WINDOW_S:
            raise BadRequest(f"the ring's window must be more than 0 s and at most {MAX_WINDOW_S:g} s, not {window_s:g} s")
        if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
            raise BadRequest(f"the ring's byte limit must be a size over 0, not {max_bytes!r}")
        if not MIN_PIECE_S <= piece_s <= min(MAX_PIECE_S, max(window_s, MIN_PIECE_S)):
            raise BadRequest(f"a ring's piece must be from {MIN_PIECE_S:g} s to the window ({window_s:g} s), "
                             f"at most {MAX_PIECE_S:g} s, not {piece_s:g} s")
        self.capturer = capturer
        self.targets, self.routes = capturer.checked_targets(targets)
        self.window_s, self.piece_s, self.max_bytes = float(window_s), float(piece_s), max_bytes
        self.settings = replace(settings or CaptureSettings(), duration_ms=int(round(piece_s * 1000)), delay_ms=0)
        self.id = secrets.token_hex(6)
        self.state = "starting"  # starting, running, stopped, failed
        self.error: str | None = None
        self.created = time.time()
        self.hosts = {t: _Host(TargetState(t)) for t in self.targets}
        self.snapshots: list[str] = []
        self.rounds = 0  # rounds finished
        self.spread_ms: float | None = None  # the last round's spread of the hosts' starts
        self._round_sid: str | None = None  # the session id of the round being recorded
        self._cond = threading.Condition()
        self._stopping = threading.Event()
        self._snap_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._clients: dict[str, ProfilerClient] = {}

    # -- life ------------------------------------------------------------------------

    def start(self) -> RingRecorder:
        """Claim the targets, probe them (a dead one is reported, the others recorded) and
        start recording. Raises :class:`Conflict` when a target is being captured."""
        self.capturer.claim(self.targets, self.id)
        for t in self.targets:
            self._clients[t] = self.capturer.client_for(t, self.routes)
        with ThreadPoolExecutor(max_workers=min(32, len(self.targets))) as pool:
            for t, err in zip(self.targets, pool.map(self._probe, self.targets)):
                h = self.hosts[t].state
                if err is None:
                    h.state = "recording"
                else:
                    h.state, h.error, h.code = "failed", err.reason, err.code
        if not self._live():
            self._end("failed", "; ".join(f"{t}: {h.state.error}" for t, h in self.hosts.items()))
            return self
        self.state = "running"
        self._thread = threading.Thread(target=self._loop, name=f"capture-ring-{self.id}", daemon=True)
        self._thread.start()
        return self

    def _probe(self, address: str) -> TargetError | None:
        try:
            self._clients[address].probe()
            return None
        except TargetError as e:
            return e

    def _live(self) -> list[str]:
        return [t for t, h in self.hosts.items() if h.state.state == "recording"]

    def stop(self) -> RingRecorder:
        """End the recording (the piece being recorded is ended now) and free the targets;
        the pieces held are dropped. Returns once the recording thread has ended."""
        if self.state in ("stopped", "failed"):
            return self
        self._stopping.set()
        self._terminate_round()
        if self._thread is not None:  # what the piece in flight holds is dropped: no wait for a slow answer
            self._thread.join(timeout=STOP_GRACE_S)
        self._end("stopped")  # closes the channels: a call still open is cancelled, and the thread ends
        if self._thread is not None:
            self._thread.join(timeout=STOP_GRACE_S)
        return self

    def _end(self, state: str, error: str | None = None) -> None:
        with self._cond:
            if self.state in ("stopped", "failed"):
                return
            self.state, self.error = state, error
            for h in self.hosts.values():
                h.pieces.clear()
                if h.state.state == "recording":
                    h.state.state = "stopped"
            self._cond.notify_all()
        for c in self._clients.values():
            c.close()
        self.capturer.release(self.targets, self.id)

    # -- recording -------------------------------------------------------------------

    def _loop(self) -> None:
        try:
            with ThreadPoolExecutor(max_workers=len(self.targets), thread_name_prefix=f"ring-{self.id}") as pool:
                while not self._stopping.is_set():
                    live = self._live()
                    if not live:
                        self._end("failed", "every host failed: " + "; ".join(
                            f"{t}: {h.state.error}" for t, h in self.hosts.items()))
                        return
                    self._round(pool, live)
        except Exception as e:  # noqa: BLE001 - a bug must end the ring, not leave it "running"
            self._end("failed", f"{type(e).__name__}: {e}")

    def _round(self, pool: ThreadPoolExecutor, live: list[str]) -> None:
        """Record one piece on every live host, all started at one instant."""
        from profscope.formats import xspace_merge  # protobuf: imported when a ring records, not with the server

        with self._cond:
            sid = self._round_sid = f"profscope-ring-{self.id}-{self.rounds}"
        start_ns = 0 if len(live) == 1 else time.time_ns() + int(RING_SYNC_MARGIN_S * 1e9)
        asked = time.time_ns()
        results = list(pool.map(lambda t: self._record(t, start_ns, sid), live))
        answered = time.time_ns()
        with self._cond:
            if self.state != "running":  # stopped meanwhile (its calls cancelled): nothing of the round is kept
                self._round_sid = None
                return
            starts = []
            for t, result in zip(live, results):
                host = self.hosts[t]
                if isinstance(result, TargetError):
                    host.failed_rounds += 1
                    host.state.error, host.state.code = result.reason, result.code
                    if host.failed_rounds >= MAX_FAILED_ROUNDS or result.code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"):
                        host.state.state = "failed"
                    continue
                host.failed_rounds, host.state.error, host.state.code = 0, None, None
                window = xspace_merge.recording_window(result) or xspace_merge.Window(start_ns or asked, answered)
                if host.pieces:
                    host.gaps_ms.append((window.start_ns - host.pieces[-1].stop_ns) / 1e6)
                host.pieces.append(Piece(bytes(result), window.start_ns, window.stop_ns, self.rounds))
                starts.append(window.start_ns)
            self.spread_ms = (max(starts) - min(starts)) / 1e6 if len(starts) > 1 else None
            self._drop_old()
            self.rounds += 1
            self._round_sid = None
            self._cond.notify_all()
        if all(isinstance(r, TargetError) for r in results) and not self._stopping.is_set():
            self._stopping.wait(min(1.0, self.piece_s))  # a busy or failing job: not a tight loop

    def _record(self, address: str, start_ns: int, sid: str):
        try:
            return self._clients[address].profile(self.settings, start_timestamp_ns=start_ns, session_id=sid,
                                                  timeout_s=self._piece_timeout_s(start_ns))
        except TargetError as e:
            return e

    def _piece_timeout_s(self, start_ns: int) -> float:
        """A piece's call deadline: the wait for its start, the piece, and its answer."""
        wait = max(0.0, (start_ns - time.time_ns()) / 1e9)
        return wait + self.piece_s * (1 + PIECE_ANSWER_PER_S) + PIECE_ANSWER_S

    def _drop_old(self) -> None:
        """Keep each host's pieces that reach into the last ``window_s`` (of its newest
        piece's end), and all hosts' pieces under ``max_bytes``, oldest dropped first."""
        for h in self.hosts.values():
            if h.pieces:
                since = h.pieces[-1].stop_ns - int(self.window_s * 1e9)
                while h.pieces and h.pieces[0].stop_ns <= since:
                    h.pieces.popleft()
        while self._bytes() > self.max_bytes:
            oldest = min((h for h in self.hosts.values() if len(h.pieces) > 1), default=None,
                         key=lambda h: h.pieces[0].start_ns)
            if oldest is None:
                break
            oldest.pieces.popleft()

    def _bytes(self) -> int:
        return sum(len(p.xspace) for h in self.hosts.values() for p in h.pieces)

    def _terminate_round(self) -> str | None:
        """Ask every live host to end the piece it records now (its Profile call then
        answers what it has); the round's session id, None between rounds."""
        with self._cond:
            sid = self._round_sid
        if sid is None:
            return None
        for t in self._live():
            try:
                self._clients[t].terminate(sid)
            except TargetError:
                pass  # its own Profile call reports the failure
        return sid

    # -- what it holds -----------------------------------------------------------------

    def latest_pieces(self) -> dict[str, Piece]:
        """Each recording host's newest piece (for a watch that reads the job while the
        ring holds it: the job records one session at a time)."""
        with self._cond:
            return {t: h.pieces[-1] for t, h in self.hosts.items() if h.pieces}

    def wait_round(self, after: int, timeout: float) -> bool:
        """Wait until more than ``after`` rounds are done; False on timeout or when the ring ended."""
        with self._cond:
            return self._cond.wait_for(lambda: self.rounds > after or self.state != "running", timeout) \
                and self.rounds > after

    def snapshot(self, meta: dict | None = None, name_suffix: str = "") -> CaptureJob:
        """Save the last ``window_s`` seconds of every host, ending now, as a run: the
        pieces being recorded are ended (Terminate) and the ring records on. ``meta`` (a
        trigger's reason: app/capture.py write_capture_meta) is saved with it, with the
        window held and the gaps in it. Returns the finished job (``run``, ``stage``)."""
        if self.state != "running":
            raise Conflict(f"ring {self.id} is {self.state}; start a new one")
        with self._snap_lock:
            asked_ns = time.time_ns()
            with self._cond:
                in_flight = self.rounds
            # End the round being recorded (it answers within its collection time); between
            # two rounds, the next one, once it is asked for.
            deadline = time.monotonic() + self.settings.timeout_s()
            while not self.wait_round(in_flight, 0.05 if self._terminate_round() is None else
                                      max(0.0, deadline - time.monotonic())):
                if self.state != "running" or time.monotonic() > deadline:
                    raise Conflict(f"ring {self.id} is {self.state}" + (f": {self.error}" if self.error else ""))
            with self._cond:
                held = {t: list(h.pieces) for t, h in self.hosts.items() if h.pieces}
            return self._save(held, asked_ns, dict(meta or {}), name_suffix)

    def _save(self, held: dict[str, list[Piece]], asked_ns: int, meta: dict, name_suffix: str) -> CaptureJob:
        from profscope.formats import xspace_merge

        cap = self.capturer
        since = asked_ns - int(self.window_s * 1e9)
        held = {t: kept for t, pieces in held.items() if (kept := [p for p in pieces if p.stop_ns > since])}
        job = cap.new_job(list(held), self.settings, routes=self.routes)
        suffix = name_suffix or (f"trigger-{meta['trigger']}" if isinstance(meta.get("trigger"), str) else "")
        if suffix:
            job.stem = f"{job.stem}_{suffix}"
        job.stage = "collecting"
        job.record_starts, job.record_ends = asked_ns / 1e9 - self.window_s, asked_ns / 1e9
        cap.remember(job)
        self.snapshots.append(job.id)
        windows, gaps = {}, {}
        try:
            for t, kept in held.items():
                merged, window = xspace_merge.merge_xspaces([p.xspace for p in kept], since_ns=since)
                cap.folder.write(job.staging, t, merged)
                h = job.hosts[t]
                h.state, h.bytes = "saved", len(merged)
                windows[t] = window
                gaps[t] = [round((b.start_ns - a.stop_ns) / 1e6, 3) for a, b in zip(kept, kept[1:])]
            if not job.saved:
                job.stage, job.error = "failed", "the ring holds no recording yet"
            else:
                meta.update(mode="ring", targets=list(held), window=self._window_meta(windows, asked_ns),
                            gaps_ms=gaps, piece_s=self.piece_s)
                write_capture_meta(job.staging, meta)
                cap.publish(job)
        except OSError as e:
            job.stage, job.error = "failed", f"cannot write into {cap.folder.root}: {e.strerror or e}"
        except ProfscopeError as e:
            job.stage, job.error = "failed", e.message
        finally:
            cap.finish(job)
        return job

    def _window_meta(self, windows: dict, asked_ns: int) -> dict:
        known = [w for w in windows.values() if w is not None]
        starts, stops = [w.start_ns for w in known], [w.stop_ns for w in known]
        return {"requested_s": self.window_s, "asked_ns": asked_ns,
                "start_ns": min(starts) if starts else None, "stop_ns": max(stops) if stops else None,
                "held_s": {t: round((w.stop_ns - w.start_ns) / 1e9, 3) for t, w in windows.items() if w},
                "start_spread_ms": round((max(starts) - min(starts)) / 1e6, 3) if starts else None}

    def status(self) -> dict:
        """Where the ring stands: per host the pieces held, the seconds they cover, the
        gaps between them (ms: last, mean, max over the last 1,000), and the snapshots."""
        with self._cond:
            hosts = []
            for t, h in self.hosts.items():
                gaps = list(h.gaps_ms)
                held = (h.pieces[-1].stop_ns - h.pieces[0].start_ns) / 1e9 if h.pieces else 0.0
                hosts.append({**h.state.to_json(), "pieces": len(h.pieces), "heldS": round(held, 3),
                              "bytes": sum(len(p.xspace) for p in h.pieces),
                              "gapMs": {"last": gaps[-1] if gaps else None,
                                        "mean": round(sum(gaps) / len(gaps), 3) if gaps else None,
                                        "max": max(gaps) if gaps else None, "count": len(gaps)}})
            return {"id": self.id, "targets": self.targets, "state": self.state, "error": self.error,
                    "created": self.created, "windowS": self.window_s, "pieceS": self.piece_s, "rounds": self.rounds,
                    "maxBytes": self.max_bytes,
                    "startSpreadMs": self.spread_ms, "hosts": hosts,
                    "snapshots": [j.to_json() for j in map(self.capturer.find, self.snapshots) if j is not None]}


# Rings remembered for their status (stopped ones too, newest kept).
KEEP_RINGS = 20


def start_ring(capturer: Capturer, targets: list[str] | str, window_s: float, piece_s: float = 1.0,
               settings: CaptureSettings | None = None, max_bytes: int | str | None = None) -> RingRecorder:
    """Start a ring on ``capturer``'s targets and remember it (``capturer.rings``);
    ``max_bytes`` a size (``256MiB``) or bytes, :data:`DEFAULT_MAX_BYTES` when None."""
    from profscope.cache.worker import parse_size

    limit = parse_size(max_bytes, "maxBytes")
    ring = RingRecorder(capturer, targets, window_s, piece_s, settings,
                        max_bytes=DEFAULT_MAX_BYTES if limit is None else limit).start()
    capturer.rings[ring.id] = ring
    ended = [r for r in capturer.rings.values() if r.state in ("stopped", "failed")]
    for old in sorted(ended, key=lambda r: r.created)[: max(0, len(capturer.rings) - KEEP_RINGS)]:
        del capturer.rings[old.id]
    return ring


def ring_of(capturer: Capturer, rid: str) -> RingRecorder:
    found = capturer.rings.get(rid)
    if found is None:
        raise NotFound(f"no ring {rid!r} (rings are remembered until the server restarts)")
    return found

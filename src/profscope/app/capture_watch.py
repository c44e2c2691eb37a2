"""Automatic capture (issue 39 item 1): watch running jobs with short probe captures and
take a full capture (or a ring buffer's snapshot) of every target when a condition holds.

A **condition** is one or more clauses joined by ``or`` (or ``|``); each clause is a
measure, a threshold and options after commas (:func:`parse_condition`, the one parser of
the CLI's ``--when`` and the page's field):

- ``step_time>2x`` (``,for=3``, ``,window=50``, ``,min_steps=5``): a step took more than
  2 × the running median of the steps before it (the last ``window``), for ``for``
  steps in a row;
- ``step_time>250ms`` (``,for=3``): over a fixed time;
- ``memory>0.9``: an allocator's peak in a probe over 90 % of its capacity (the memory
  profile's ``peakShareOfCapacity``); ``memory>12GiB``: over a size;
- ``step_time_trend`` (``,steps=30``, ``,rise=0.2``): the last ``steps`` step times rise
  steadily, by the memory profile's leak rule (least-squares slope > 0, r² >= 0.9), by at
  least ``rise`` (20 %) along the fitted line;
- ``memory_growth`` (``,min=1MiB``): the memory profile's own leak rule
  (``leakHints.heapGrowth.steadyLeak``) holds in a probe, growing at least ``min`` a step.

A **probe** is one short ``Profile`` call per target (storage/profiler_client.py, the
capture's own client) at host tracer level 2, read in memory with profscope's own readers:
the host steps of XProf's step grouping (formats/xplane_step_events.py
``read_step_events``, ``StepTraceAnnotation`` steps) and the allocator events of the
memory profile (formats/xplane_allocator.py, tools/memory_profile_allocator.py). Nothing
of a probe is written to disk. A target being captured by someone else is skipped for
that probe (the Capturer's one-capture-per-target rule holds for probes too).

When a condition holds, the watch **fires**: ``Capturer.start`` of every target with
the watch's capture settings (or ``ring.snapshot(meta)`` when a ring is given, issue 39
item 2), the run named ``<time>_trigger-<measure>`` and its reason in the session's
``profscope_capture.json`` (app/capture.py ``write_capture_meta``). It then re-arms only
once a probe finds the condition false again, so a slowdown that lasts fires once; it
stops after ``max_fires`` fires (0: never). Every probe, fire and failure goes into
``history``. A watch whose every target fails :data:`FAIL_AFTER` probes in a row ends
``failed`` (the job died), saying why; ``stop`` ends the loop, the probe in flight and a
fired capture still recording, and joins the thread.
"""

from __future__ import annotations

import io
import re
import secrets
import statistics
import threading
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from profscope.app.capture import Capturer, CaptureSettings, parse_duration
from profscope.cache.worker import parse_size
from profscope.errors import BadRequest, Conflict, NotFound, ProfscopeError
from profscope.model.units import fmt_bytes
from profscope.storage.profiler_client import ProfilerClient, TargetError

__all__ = ["Clause", "Condition", "Watch", "Watches", "parse_condition", "watches_of"]

MEASURES = ("step_time", "memory", "step_time_trend", "memory_growth")
# Every target failing this many probes in a row ends the watch (the job is gone).
FAIL_AFTER = 2
# The most entries kept in a watch's history (the newest), and ended watches remembered.
MAX_HISTORY = 200
KEEP_ENDED = 50
# Probe settings: at least this long a recording (shorter holds too few steps to judge),
# at most this (a probe is meant to be cheap); intervals from the one to the other.
MIN_PROBE_MS, MAX_PROBE_MS = 100, 60_000
MIN_EVERY_S, MAX_EVERY_S = 0.5, 24 * 3600.0
# The memory profile's leak rule (tools/memory_profile_allocator.py _heap_growth):
# at least 3 points, slope > 0, r² >= 0.9.
TREND_R2 = 0.9
# A threshold with its unit ("250ms", "12GiB"): a bare number is a factor ("2x") or a
# fraction of capacity ("0.9"), never milliseconds or bytes.
_WITH_UNIT = re.compile(r"\d+(?:\.\d+)?\s*[A-Za-z]+")
_CLAUSE = re.compile(r"\s*([A-Za-z_][A-Za-z0-9_]*)\s*(?:(>=|>)\s*(\S+?))?\s*")
_OPTIONS = {"step_time": {"for", "window", "min_steps"}, "memory": set(), "step_time_trend": {"steps", "rise"},
            "memory_growth": {"min"}}


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.0f} ms"


@dataclass(frozen=True)
class Clause:
    """One measure and its threshold: ``kind`` is ``step_ratio`` (k × median),
    ``step_abs`` (seconds), ``memory_share`` (fraction), ``memory_bytes``,
    ``step_time_trend`` or ``memory_growth``."""

    text: str
    measure: str
    kind: str
    value: float = 0.0
    consecutive: int = 1  # for=
    window: int = 50
    min_steps: int = 5
    steps: int = 30
    rise: float = 0.2
    min_bytes: int = 0

    def describe(self) -> str:
        if self.kind == "step_ratio":
            return f"a step over {self.value:g} × the median of the steps before it, {self.consecutive} in a row"
        if self.kind == "step_abs":
            return f"a step over {_ms(self.value)}, {self.consecutive} in a row"
        if self.kind == "memory_share":
            return f"memory over {self.value:.0%} of capacity"
        if self.kind == "memory_bytes":
            return f"memory over {fmt_bytes(self.value)}"
        if self.kind == "step_time_trend":
            return f"step time rising steadily by {self.rise:.0%} or more over {self.steps} steps"
        return "memory growing step over step" + (f" by {fmt_bytes(self.min_bytes)} or more" if self.min_bytes else "")


@dataclass(frozen=True)
class Condition:
    text: str
    clauses: tuple[Clause, ...]

    @property
    def needs_steps(self) -> bool:
        return any(c.measure in ("step_time", "step_time_trend") for c in self.clauses)

    def describe(self) -> str:
        return " or ".join(c.describe() for c in self.clauses)


def _bad(what: str, token: str, why: str) -> BadRequest:
    return BadRequest(f"{what}: {token!r} {why}")


def _whole(what: str, token: str, value: str, low: int, high: int) -> int:
    if not (value.isascii() and value.isdigit()) or not low <= int(value) <= high:
        raise _bad(what, token, f"needs a whole number from {low} to {high}")
    return int(value)


def _clause(part: str, what: str) -> Clause:
    head, *opts = [p.strip() for p in part.split(",")]
    m = _CLAUSE.fullmatch(head)
    if not m:
        raise _bad(what, head, "is not a condition: give MEASURE>THRESHOLD, e.g. step_time>2x or memory>0.9")
    measure, op, value = m.group(1).lower(), m.group(2), m.group(3)
    if measure not in MEASURES:
        raise _bad(what, m.group(1), f"is not a measure: use {', '.join(MEASURES)}")
    kw: dict = {}
    if measure in ("step_time_trend", "memory_growth"):
        if op:
            raise _bad(what, head, f"takes no threshold: write {measure} alone (options after a comma)")
        kind = measure
    elif not op:
        raise _bad(what, head, f"needs a threshold: e.g. {measure}>2x" if measure == "step_time"
                   else "needs a threshold: e.g. memory>0.9 (of capacity) or memory>12GiB")
    elif measure == "step_time":
        if re.fullmatch(r"\d+(\.\d+)?x", value, re.IGNORECASE):
            kind, kw["value"] = "step_ratio", float(value[:-1])
            if not 1.0 < kw["value"] <= 1000:
                raise _bad(what, value, "must be a factor over 1 (e.g. 2x: twice the running median)")
        elif _WITH_UNIT.fullmatch(value):
            kind, kw["value"] = "step_abs", parse_duration(value, f"{what}: {head!r}:") / 1000
        else:
            raise _bad(what, value, "is not a step time threshold: give a factor of the median (2x) or a time (250ms, 1.5s)")
        kw["consecutive"] = 3
    else:
        if re.fullmatch(r"0?\.\d+|1(\.0+)?", value):
            kind, kw["value"] = "memory_share", float(value)
            if not 0 < kw["value"] <= 1:
                raise _bad(what, value, "must be a fraction of capacity from 0 to 1 (0.9 = 90 %)")
        elif _WITH_UNIT.fullmatch(value):
            kind, kw["value"] = "memory_bytes", float(parse_size(value, what))
        else:
            raise _bad(what, value, "is not a memory threshold: give a fraction of capacity (0.9) or a size (12GiB, 512MiB)")
    for opt in opts:
        key, eq, val = opt.partition("=")
        key = key.strip().lower()
        val = val.strip()
        if not eq or key not in _OPTIONS[measure]:
            allowed = ", ".join(sorted(_OPTIONS[measure])) or "none"
            raise _bad(what, opt, f"is not an option of {measure} (its options: {allowed})")
        if key == "for":
            kw["consecutive"] = _whole(what, opt, val, 1, 1000)
        elif key in ("window", "steps"):
            kw[key] = _whole(what, opt, val, 3, 10_000)
        elif key == "min_steps":
            kw[key] = _whole(what, opt, val, 1, 10_000)
        elif key == "rise":
            try:
                kw["rise"] = float(val)
            except ValueError:
                raise _bad(what, opt, "needs a fraction (0.2 = 20 %)") from None
            if not 0 <= kw["rise"] <= 100:
                raise _bad(what, opt, "needs a fraction from 0 to 100 (0.2 = 20 %)")
        else:  # min
            if not _WITH_UNIT.fullmatch(val):
                raise _bad(what, opt, "needs a size with its unit (1MiB, 100KB)")
            kw["min_bytes"] = parse_size(val, what)
    return Clause(text=part.strip(), measure=measure, kind=kind, **kw)


def parse_condition(text: str, what: str = "condition") -> Condition:
    """``step_time>2x,for=3 or memory>0.9`` -> a :class:`Condition`; a
    :class:`BadRequest` naming the token it cannot read (``what``: where it came from,
    ``--when`` or the page's field)."""
    text = (text or "").strip()
    if not text:
        raise BadRequest(f"{what}: no condition given: e.g. step_time>2x,for=3 or memory>0.9")
    if len(text) > 1000:
        raise BadRequest(f"{what}: a condition of {len(text):,} characters; at most 1,000")
    parts = re.split(r"(?<!\w)or(?!\w)|\|", text, flags=re.IGNORECASE)
    if any(not p.strip() for p in parts):
        raise BadRequest(f"{what}: {text!r} has an empty clause around 'or'")
    return Condition(text=text, clauses=tuple(_clause(p, what) for p in parts))


# -- what a probe measured ---------------------------------------------------------------

@dataclass
class HostSeries:
    """One target's steps seen so far (name, number, seconds), oldest first, and where the
    step time clauses stand."""

    steps: deque = field(default_factory=lambda: deque(maxlen=10_000))
    seen: set = field(default_factory=set)
    runs: dict = field(default_factory=dict)  # clause text -> consecutive steps over it
    failures: int = 0
    last_piece: int | None = None  # with a ring: the start (ns) of the ring's piece read last


def _step_number(name: str, fallback: int) -> int:
    m = re.search(r"(\d+)\s*$", name or "")
    return int(m.group(1)) if m else fallback


def read_probe(xspace: bytes, address: str) -> dict:
    """A probe's steps and allocators, read with profscope's own readers: ``steps``:
    [(name, number, seconds)] in time order; ``memory``: [{allocator, peak, capacity,
    share, slope, steady}]."""
    from profscope.formats import xplane_allocator
    from profscope.formats.xplane_step_events import read_step_events
    from profscope.tools.memory_profile_allocator import from_allocator_events

    name = f"{address}.xplane.pb"
    out: dict = {"steps": [], "memory": []}
    se = read_step_events(io.BytesIO(xspace), name)
    for i, s in enumerate(sorted(se.steps, key=lambda s: s["begin_ps"])):
        label = s.get("step_name") or s.get("name") or str(s["step_num"])
        out["steps"].append((label, _step_number(label, i), s["duration_ps"] / 1e12))
    events = xplane_allocator.read_allocator_events(io.BytesIO(xspace), name)
    mp = from_allocator_events(events)
    for mid, a in ((mp.get("profscope") or {}).get("allocators") or {}).items():
        summ, growth = a.get("summary") or {}, (a.get("leakHints") or {}).get("heapGrowth") or {}
        if not summ.get("events"):
            continue
        out["memory"].append({"allocator": mid, "peak": summ.get("peakBytes") or 0,
                              "capacity": summ.get("capacityBytes") or 0, "share": summ.get("peakShareOfCapacity"),
                              "slope": growth.get("slopeBytesPerStep"), "r2": growth.get("r2"),
                              "steady": bool(growth.get("steadyLeak")), "points": len(growth.get("points") or [])})
    return out


def _fit(xs: list[float], ys: list[float]) -> tuple[float, float, float | None]:
    """Least squares: slope, intercept, r² (None when every y is equal), as the memory
    profile's leak rule fits the heap."""
    n = len(xs)
    xm, ym = sum(xs) / n, sum(ys) / n
    sxx = sum((x - xm) ** 2 for x in xs)
    if sxx == 0:
        return 0.0, ym, None
    slope = sum((x - xm) * (y - ym) for x, y in zip(xs, ys)) / sxx
    intercept = ym - slope * xm
    sst = sum((y - ym) ** 2 for y in ys)
    r2 = None if sst == 0 else 1 - sum((y - (intercept + slope * x)) ** 2 for x, y in zip(xs, ys)) / sst
    return slope, intercept, r2


def evaluate_steps(clause: Clause, series: HostSeries, new: list[tuple[str, int, float]], address: str) -> dict | None:
    """Feed ``new`` steps of one target to a step clause; the fire (reason, values) when it
    holds at one of them, else None. The running median is of the steps before each one."""
    hit = None
    if clause.kind == "step_time_trend":
        pts = (list(series.steps) + new)[-clause.steps:]
        if len(pts) >= max(3, clause.steps):
            xs, ys = [float(p[1]) for p in pts], [p[2] for p in pts]
            slope, intercept, r2 = _fit(xs, ys)
            first, last = intercept + slope * xs[0], intercept + slope * xs[-1]
            if slope > 0 and r2 is not None and r2 >= TREND_R2 and first > 0 and last >= first * (1 + clause.rise):
                hit = {"reason": f"step time rose steadily from {_ms(first)} to {_ms(last)} over {len(pts)} steps "
                                 f"({pts[0][0]} to {pts[-1][0]}, r² = {r2:.2f}) on {address}",
                       "values": {"from_s": first, "to_s": last, "r2": r2, "steps": len(pts),
                                  "slope_s_per_step": slope, "host": address}}
        return hit
    history = [p[2] for p in series.steps]
    run = series.runs.get(clause.text, [])
    for name, number, secs in new:
        base = history[-clause.window:]
        if clause.kind == "step_ratio":
            if len(base) < clause.min_steps:
                history.append(secs)
                continue
            median = statistics.median(base)
            over = secs > clause.value * median
        else:
            median = statistics.median(base) if base else None
            over = secs > clause.value
        run = run + [(name, secs, median)] if over else []
        history.append(secs)
        if len(run) >= clause.consecutive and hit is None:
            steps = run[-clause.consecutive:]
            worst = max(s[1] for s in steps)
            med = steps[0][2]
            if clause.kind == "step_ratio":
                reason = (f"step time rose from {_ms(med)} (median of the {min(len(base), clause.window)} steps before) "
                          f"to {_ms(worst)}, over {clause.value:g} × the median for {len(steps)} steps in a row "
                          f"({steps[0][0]} to {steps[-1][0]}) on {address}")
            else:
                reason = (f"step time {_ms(worst)}, over {_ms(clause.value)} for {len(steps)} steps in a row "
                          f"({steps[0][0]} to {steps[-1][0]}) on {address}"
                          + (f"; the median before was {_ms(med)}" if med is not None else ""))
            hit = {"reason": reason, "values": {"median_s": med, "step_s": [s[1] for s in steps],
                                                "steps": [s[0] for s in steps], "host": address,
                                                "threshold": clause.value}}
    series.runs[clause.text] = run
    return hit


def evaluate_memory(clause: Clause, memory: list[dict], address: str) -> dict | None:
    for a in memory:
        if clause.kind == "memory_share" and a["share"] is not None and a["share"] > clause.value:
            return {"reason": f"memory of {a['allocator']} reached {fmt_bytes(a['peak'])}, {a['share']:.0%} of its "
                              f"{fmt_bytes(a['capacity'])} capacity (over {clause.value:.0%}) on {address}",
                    "values": {**a, "host": address, "threshold": clause.value}}
        if clause.kind == "memory_bytes" and a["peak"] > clause.value:
            return {"reason": f"memory of {a['allocator']} reached {fmt_bytes(a['peak'])}, over "
                              f"{fmt_bytes(clause.value)} on {address}",
                    "values": {**a, "host": address, "threshold": clause.value}}
        if clause.kind == "memory_growth" and a["steady"] and (a["slope"] or 0) >= clause.min_bytes:
            return {"reason": f"memory of {a['allocator']} grows {fmt_bytes(a['slope'])} per step over "
                              f"{a['points']} steps (r² = {a['r2']:.2f}), now {fmt_bytes(a['peak'])} on {address}",
                    "values": {**a, "host": address}}
    return None


# -- the watch -----------------------------------------------------------------------------

@dataclass
class Watch:
    """One watch: targets, condition, probe interval and length, what a fire captures,
    and its history. ``state``: watching, capturing (a fired capture is under way),
    stopped, failed (every target stopped answering), done (``max_fires`` reached)."""

    id: str
    targets: list[str]
    condition: Condition
    settings: CaptureSettings  # the fired capture's
    probe_every_s: float
    probe_ms: int
    max_fires: int = 0
    state: str = "watching"
    error: str | None = None
    created: float = field(default_factory=time.time)
    probes: int = 0
    last_probe: dict | None = None
    history: list[dict] = field(default_factory=list)  # newest last
    fires: list[dict] = field(default_factory=list)
    armed: bool = True
    series: dict[str, HostSeries] = field(default_factory=dict)
    stopping: threading.Event = field(default_factory=threading.Event, repr=False)
    thread: threading.Thread | None = field(default=None, repr=False)
    clients: dict[str, ProfilerClient] = field(default_factory=dict, repr=False)
    # the addresses to dial where not the targets themselves (app/capture.py Capturer.checked_targets)
    routes: dict[str, str] = field(default_factory=dict, repr=False)
    # a ring (app/capture_ring.py) whose pieces the probes read and whose snapshot a fire
    # saves; own_ring: started for this watch, stopped when it ends
    ring: object | None = field(default=None, repr=False)
    own_ring: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def note(self, kind: str, text: str, **extra) -> dict:
        entry = {"at": time.time(), "kind": kind, "text": text, **extra}
        with self.lock:
            self.history.append(entry)
            del self.history[:-MAX_HISTORY]
        return entry

    def to_json(self, jobs=None) -> dict:
        fires = []
        for f in self.fires:
            job = jobs(f["job"]) if jobs and f.get("job") else None
            fires.append({**f, "stage": job.stage if job else f.get("stage"), "run": job.run if job else f.get("run")})
        with self.lock:
            history = list(self.history)
        return {"id": self.id, "targets": self.targets, "condition": self.condition.text,
                "describe": self.condition.describe(), "state": self.state, "error": self.error,
                "created": self.created, "probeEveryS": self.probe_every_s, "probeMs": self.probe_ms,
                "durationMs": self.settings.duration_ms, "maxFires": self.max_fires, "probes": self.probes,
                "armed": self.armed, "lastProbe": self.last_probe, "ring": getattr(self.ring, "id", None), "fires": fires, "history": history[-50:]}


class Watches:
    """The watches of one :class:`Capturer` (a server's, or the CLI's): ``start``,
    ``get``, ``stop``, ``stop_all``. ``ring``: a ring buffer (app/capture_ring.py) whose
    ``snapshot(meta)`` a fire takes instead of a new capture."""

    def __init__(self, capturer: Capturer, *, ring=None):
        self.capturer = capturer
        self.ring = ring
        self._watches: dict[str, Watch] = {}
        self._lock = threading.Lock()

    def start(self, targets: list[str] | str, condition: str | Condition, settings: CaptureSettings, *,
              probe_every_s: float = 10.0, probe_ms: int = 1000, max_fires: int = 0,
              what: str = "condition", ring=None, own_ring: bool = False) -> Watch:
        """Start watching ``targets``; ``ring`` (else the Watches' own): probe from its
        pieces and fire its snapshot; ``own_ring``: stop it when the watch ends."""
        cond = condition if isinstance(condition, Condition) else parse_condition(condition, what)
        targets, routes = self.capturer.checked_targets(targets)  # the allow-list, as a capture's
        if not MIN_EVERY_S <= probe_every_s <= MAX_EVERY_S:
            raise BadRequest(f"probe interval {probe_every_s:g} s: give {MIN_EVERY_S:g} s to {MAX_EVERY_S / 3600:g} h")
        if not MIN_PROBE_MS <= probe_ms <= MAX_PROBE_MS:
            raise BadRequest(f"probe duration {probe_ms} ms: give {MIN_PROBE_MS} ms to {MAX_PROBE_MS // 1000} s")
        if probe_ms / 1000 > probe_every_s:
            raise BadRequest(f"probe duration {probe_ms / 1000:g} s is longer than the probe interval "
                             f"{probe_every_s:g} s: probes would overlap")
        if not 0 <= max_fires <= 1000:
            raise BadRequest(f"max fires {max_fires}: give 0 (no limit) to 1000")
        with self._lock:
            mine = {t for w in self._watches.values() if w.state in ("watching", "capturing") for t in w.targets}
            twice = [t for t in targets if t in mine]
            if twice:
                raise Conflict(f"{twice[0]} is already watched; stop that watch first")
            w = Watch(id=secrets.token_hex(6), targets=targets, condition=cond, settings=settings,
                      probe_every_s=probe_every_s, probe_ms=probe_ms, max_fires=max_fires,
                      series={t: HostSeries() for t in targets}, routes=routes,
                      ring=ring if ring is not None else self.ring, own_ring=own_ring and ring is not None)
            self._watches[w.id] = w
            ended = [x for x in self._watches.values() if x.state not in ("watching", "capturing")]
            for old in sorted(ended, key=lambda x: x.created)[: max(0, len(ended) - KEEP_ENDED)]:
                del self._watches[old.id]
        w.note("start", f"watching {', '.join(targets)} for {cond.describe()}: "
                        + (f"a {probe_ms} ms probe every {probe_every_s:g} s" if w.ring is None else
                           f"the ring's pieces every {probe_every_s:g} s; a fire saves the ring's last seconds"))
        w.thread = threading.Thread(target=self._loop, args=(w,), name=f"watch-{w.id}", daemon=True)
        w.thread.start()
        return w

    def get(self, wid: str) -> Watch:
        found = self._watches.get(wid)
        if found is None:
            raise NotFound(f"no capture watch {wid!r} (watches are remembered until the server restarts)")
        return found

    def all(self) -> list[Watch]:
        return sorted(self._watches.values(), key=lambda w: w.created, reverse=True)

    def stop(self, wid: str, *, join_s: float = 30.0) -> Watch:
        """End the watch: its loop, the probe in flight (its gRPC channel closed), and a
        fired capture still recording (stopped as Stop now does: what was recorded is
        kept); waits for the thread."""
        w = self.get(wid)
        w.stopping.set()
        with w.lock:
            clients = list(w.clients.values())
        for c in clients:
            c.close()
        for f in w.fires:
            job = self.capturer.find(f.get("job") or "")
            if job is not None and not job.done.is_set():
                self.capturer.stop(job.id)
        if w.thread is not None and w.thread is not threading.current_thread():
            w.thread.join(join_s)
        if w.state in ("watching", "capturing"):
            w.state = "stopped"
            w.note("stop", "stopped")
        return w

    def stop_all(self) -> None:
        for w in list(self._watches.values()):
            if w.state in ("watching", "capturing"):
                self.stop(w.id)

    # -- the loop --------------------------------------------------------------------------

    def _loop(self, w: Watch) -> None:
        try:
            while not w.stopping.is_set():
                began = time.monotonic()
                self._probe(w)
                if w.state in ("failed", "done") or w.stopping.is_set():
                    return
                w.stopping.wait(max(0.0, w.probe_every_s - (time.monotonic() - began)))
        except Exception as e:  # noqa: BLE001 - a bug must end the watch with its reason, not hang it
            w.state, w.error = "failed", f"{type(e).__name__}: {e}"
            w.note("error", w.error)
        finally:
            if w.own_ring:
                w.ring.stop()

    def _probe_one(self, w: Watch, address: str, settings: CaptureSettings) -> tuple[dict | None, str | None]:
        if w.ring is not None:
            return self._probe_ring(w, address)
        owner = f"watch {w.id} (probe)"
        try:
            self.capturer.claim([address], owner)
        except ProfscopeError as e:
            return None, f"skipped: {e.message}"
        try:
            with w.lock:
                if w.stopping.is_set():
                    return None, None
                client = w.clients[address] = self.capturer.client_for(address, w.routes)
            t0 = time.monotonic()
            xspace = client.profile(settings)
            got = time.monotonic()
            probe = read_probe(xspace, address)
            probe.update(bytes=len(xspace), answer_s=got - t0, read_s=time.monotonic() - got)
            return probe, None
        except TargetError as e:
            return None, e.reason
        finally:
            with w.lock:
                c = w.clients.pop(address, None)
            if c is not None:
                c.close()
            self.capturer.release([address], owner)

    def _probe_ring(self, w: Watch, address: str) -> tuple[dict | None, str | None]:
        """With a ring running (app/capture_ring.py), the job records one session at a
        time and the ring holds it: a probe reads the ring's newest piece of the host
        instead of dialling, once per piece."""
        piece = w.ring.latest_pieces().get(address)
        series = w.series[address]
        if piece is None:
            return None, "skipped: the ring holds no piece of it yet"
        if series.last_piece == piece.start_ns:
            return None, "skipped: no new piece in the ring since the last probe"
        series.last_piece = piece.start_ns
        t0 = time.monotonic()
        probe = read_probe(piece.xspace, address)
        probe.update(bytes=len(piece.xspace), answer_s=w.probe_ms / 1000, read_s=time.monotonic() - t0)
        return probe, None

    def _probe(self, w: Watch) -> None:
        settings = CaptureSettings(duration_ms=w.probe_ms, host_tracer_level=2, device_tracer_level=1,
                                   python_tracer_level=0)
        started = time.time()
        with ThreadPoolExecutor(max_workers=len(w.targets), thread_name_prefix=f"watch-{w.id}") as pool:
            results = dict(zip(w.targets, pool.map(lambda t: self._probe_one(w, t, settings), w.targets)))
        if w.stopping.is_set():
            return
        w.probes += 1
        hits, lines, failed = [], [], 0
        for address, (probe, error) in results.items():
            series = w.series[address]
            if probe is None:
                if error and not error.startswith("skipped"):
                    series.failures += 1
                    failed += 1
                lines.append(f"{address}: {error}")
                continue
            series.failures = 0
            new = [s for s in probe["steps"] if s[0] not in series.seen]
            for clause in w.condition.clauses:
                hit = (evaluate_steps(clause, series, new, address) if clause.measure.startswith("step_time")
                       else evaluate_memory(clause, probe["memory"], address))
                if hit is not None:
                    hits.append((clause, hit))
            for s in new:
                series.seen.add(s[0])
                series.steps.append(s)
            lines.append(_probe_line(address, probe, new, series))
        took = max((p["answer_s"] - w.probe_ms / 1000 + p["read_s"] for p, _ in results.values() if p), default=None)
        w.last_probe = {"at": started, "lines": lines, "took_s": took}
        # took_s: beyond the recording, the longest answer + read of a target (the lag a
        # fire has after the probe's recording ends)
        w.note("probe", "; ".join(lines), probe=w.probes, took_s=took)
        if failed == len(w.targets) and all(w.series[t].failures >= FAIL_AFTER for t in w.targets):
            w.state = "failed"
            w.error = (f"every target stopped answering ({FAIL_AFTER} probes in a row): "
                       + "; ".join(f"{t}: {results[t][1]}" for t in w.targets))
            w.note("error", w.error)
            return
        if not hits:
            if not w.armed:
                w.armed = True
                w.note("rearm", "the condition no longer holds: armed again")
            return
        if w.armed:
            self._fire(w, *hits[0])

    def _fire(self, w: Watch, clause: Clause, hit: dict) -> None:
        w.armed = False
        measure = clause.measure
        meta = {"reason": hit["reason"], "condition": w.condition.text, "clause": clause.text, "trigger": measure,
                "fired_at": time.time(), "values": hit["values"], "targets": w.targets,
                "mode": "ring" if w.ring is not None else "capture", "watch": w.id}
        fire = {"at": meta["fired_at"], "reason": hit["reason"], "clause": clause.text, "trigger": measure,
                "mode": meta["mode"], "job": None, "run": None, "stage": None, "error": None}
        w.fires.append(fire)
        w.note("fire", hit["reason"])
        w.state = "capturing"
        try:
            if w.ring is not None:
                got = w.ring.snapshot(meta, name_suffix=f"trigger-{measure}")
                fire["run"] = getattr(got, "run", got)
                fire["job"] = getattr(got, "id", None)
                fire["stage"] = getattr(got, "stage", "saved")
            else:
                job = self.capturer.start(w.targets, w.settings, meta=meta, name_suffix=f"trigger-{measure}")
                fire["job"] = job.id
                while not job.done.wait(0.2):
                    if w.stopping.is_set():
                        break
                job.done.wait(60)
                fire["stage"], fire["run"], fire["error"] = job.stage, job.run, job.error
        except ProfscopeError as e:
            fire["stage"], fire["error"] = "failed", e.message
        if fire["stage"] == "saved":
            w.note("saved", f"captured into {fire['run']}", run=fire["run"])
        else:
            w.note("error", f"the fired capture {fire['stage']}: {fire['error']}")
        if w.state == "capturing":
            w.state = "watching"
        if w.max_fires and len(w.fires) >= w.max_fires and w.state == "watching":
            w.state = "done"
            w.note("done", f"{len(w.fires)} fire(s), the most asked for: the watch ends")


_WATCHES_LOCK = threading.Lock()


def watches_of(capturer: Capturer) -> Watches:
    """The capturer's :class:`Watches` (``capturer.watches``, which its ``close`` and
    ``shutdown`` stop), made on first use."""
    with _WATCHES_LOCK:
        if capturer.watches is None:
            capturer.watches = Watches(capturer)
        return capturer.watches


def _probe_line(address: str, probe: dict, new: list, series: HostSeries) -> str:
    """What one probe of one target saw, in a phrase: a watch that never fires says why."""
    parts = [f"{address}: {len(new)} new step(s)"]
    if not probe["steps"]:
        parts.append("no steps in the probe (does the job mark them with jax.profiler.StepTraceAnnotation?)")
    if new:
        times = [s[2] for s in new]
        parts.append(f"median {_ms(statistics.median(times))}, max {_ms(max(times))}")
        base = [s[2] for s in series.steps]
        if base:
            parts.append(f"running median {_ms(statistics.median(base[-50:]))}")
    for a in probe["memory"]:
        share = f" ({a['share']:.0%} of {fmt_bytes(a['capacity'])})" if a["share"] is not None else ""
        parts.append(f"{a['allocator']} peak {fmt_bytes(a['peak'])}{share}")
    return ", ".join(parts)

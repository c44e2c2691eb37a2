"""Capturing from running jobs over HTTP: XProf's ``capture_profile`` route, so XProf's own
frontend's "Capture profile" dialog works against profscope, and profscope's asynchronous
capture jobs (``/api/capture...``) that the page follows stage by stage.

XProf's route (profile_plugin.py ``capture_route_impl``) blocks until the capture is
saved and answers ``{"result": ...}``; a capture that fails answers ``{"error": ...}``,
which XProf's frontend shows as "Failed to capture profile: <error>" (it shows an HTTP
error's JSON body as "[object Object]", so an unreachable or busy job is answered 200,
as the frontend reads it). A malformed request is a 400, a target this server may not
dial a 403, answers all over ``--capture-max-bytes`` a 413, and a capture stopped before
any host answered (Stop in the page, or the server stopping) a 503, in the one error
shape, whose ``error`` field carries the message too.
"""

from __future__ import annotations

import json

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from profscope.app.capture import Capturer, CaptureJob, CaptureSettings, parse_duration, parse_targets
from profscope.app.capture_ring import ring_of, start_ring
from profscope.app.capture_watch import parse_condition, watches_of
from profscope.app.workspace import Workspace
from profscope.errors import BadRequest, NotFound, ProfscopeError, Stopping, TooLarge
from profscope.server.responses import json_response

XPROF_PREFIX = "/data/plugin/profile"
# XProf's dialog defaults (profile_plugin.py capture_route_impl's request.args.get defaults).
XPROF_DEFAULTS = {"duration": "1000", "num_retry": "0", "host_tracer_level": "2", "device_tracer_level": "1",
                  "python_tracer_level": "0", "delay": "0"}
# The fields of the JSON body of POST /api/capture (and /api/capture/continuous).
BODY_FIELDS = ("targets", "duration", "durationMs", "delayMs", "hostTracerLevel", "deviceTracerLevel",
               "pythonTracerLevel", "numRetry")
# A body is an object of strings, numbers and one list of strings: 2 levels. Deeper is
# refused before it is parsed (json.loads raises RecursionError past ~1,000 levels, and
# str() of a value nested a little less deep can, in an error message).
MAX_BODY_DEPTH = 8
# POST /api/capture/watch (automatic capture, app/capture_watch.py) takes a capture's
# fields (what a fire records) and the watch's own.
# fields (what a fire records) and the watch's own; ``last`` (a window: "5s"): a fire saves
# the last seconds of a ring started for the watch (app/capture_ring.py), of ``piece``s.
WATCH_FIELDS = BODY_FIELDS + ("when", "probeEvery", "probeDuration", "maxFires", "last", "piece")
# POST /api/capture/ring (the last N seconds, app/capture_ring.py): a capture's fields and
# the window kept and the length of each piece recorded.
RING_FIELDS = BODY_FIELDS + ("window", "piece", "maxBytes")
MAX_BODY_BYTES = 64 << 10


def _level(value, name: str) -> int:
    """A whole number of at most 18 ASCII digits (``str.isdigit`` is true for '²', and
    int() refuses over 4,300 digits)."""
    text = value.strip() if isinstance(value, str) else None
    if isinstance(value, bool) or not (isinstance(value, int) or (text and text.isascii() and text.isdigit()
                                                                  and len(text) <= 18)):
        raise BadRequest(f"{name} must be a whole number, not {str(value)[:40]!r}")
    return int(value)


def _capturer(ws: Workspace) -> Capturer:
    if ws.capture is None:
        raise NotFound(f"capturing is off on this server: {ws.capture_off}")
    return ws.capture


def _settings(duration_ms, delay_ms, host, device, python) -> CaptureSettings:
    try:
        return CaptureSettings(duration_ms=duration_ms, delay_ms=delay_ms, host_tracer_level=host,
                               device_tracer_level=device, python_tracer_level=python)
    except ProfscopeError as e:
        raise BadRequest(e.message) from None


def _too_deep(raw: bytes, limit: int = MAX_BODY_DEPTH) -> str | None:
    """Where ``raw`` (JSON text) nests over ``limit`` levels: ``field 'NAME'`` of the top
    object, or ``the request body``; None where it does not. Brackets inside strings do
    not count."""
    depth, in_string, escaped, start, last, key = 0, False, False, 0, None, None
    for i, c in enumerate(raw):
        if in_string:
            if escaped:
                escaped = False
            elif c == 0x5C:  # backslash
                escaped = True
            elif c == 0x22:  # the closing quote
                in_string = False
                if depth == 1:
                    last = raw[start:i].decode("utf-8", "replace")
        elif c == 0x22:
            in_string, start = True, i + 1
        elif c == 0x3A and depth == 1:  # ':' after a key of the top object
            key = last
        elif c in (0x5B, 0x7B):  # [ {
            depth += 1
            if depth > limit:
                return f"field {key!r}" if key is not None and raw.lstrip()[:1] == b"{" else "the request body"
        elif c in (0x5D, 0x7D):
            depth -= 1
    return None


async def _body(request: Request, fields: tuple[str, ...] = BODY_FIELDS) -> dict:
    raw = await request.body()
    if len(raw) > MAX_BODY_BYTES:
        raise BadRequest(f"the request body is over {MAX_BODY_BYTES >> 10} KiB")
    if raw.count(b"[") + raw.count(b"{") > MAX_BODY_DEPTH and (where := _too_deep(raw)):
        raise BadRequest(f"{where} is nested over {MAX_BODY_DEPTH} levels deep; a capture's fields are strings, "
                         "numbers and a list of strings")
    try:
        body = json.loads(raw or b"{}")
    except ValueError as e:
        raise BadRequest(f"the request body is not JSON: {e}") from None
    if not isinstance(body, dict):
        raise BadRequest("the request body must be a JSON object")
    unknown = sorted(set(body) - set(fields))
    if unknown:
        raise BadRequest(f"unknown field(s) {', '.join(unknown)}; a capture takes {', '.join(fields)}")
    for name, value in body.items():
        if name != "targets" and not isinstance(value, (int, float, str)):
            raise BadRequest(f"{name} must be a number or a string, not {type(value).__name__}")
    return body


def _body_settings(body: dict) -> tuple[str, CaptureSettings, int]:
    targets = body.get("targets")
    if isinstance(targets, list):
        if not all(isinstance(t, str) for t in targets):
            raise BadRequest("targets must be HOST:PORT strings")
        targets = ",".join(targets)
    if not isinstance(targets, str):
        raise BadRequest("missing field 'targets': the job's profiler addresses, HOST:PORT[,HOST:PORT...]")
    targets = ",".join(parse_targets(targets, "targets"))
    duration = body.get("durationMs", body.get("duration", 2000))
    duration_ms = parse_duration(duration, "duration")
    delay_ms = parse_duration(body.get("delayMs", 0), "delay")
    settings = _settings(duration_ms, delay_ms, _level(body.get("hostTracerLevel", 2), "hostTracerLevel"),
                         _level(body.get("deviceTracerLevel", 1), "deviceTracerLevel"),
                         _level(body.get("pythonTracerLevel", 0), "pythonTracerLevel"))
    return targets, settings, _level(body.get("numRetry", 0), "numRetry")


def _state(cap: Capturer) -> dict:
    return {
        "enabled": True,
        "captureDir": str(cap.folder.root),
        "mount": cap.mount,
        "allowed": cap.policy.describe(),
        "jobs": [j.to_json() for j in cap.jobs()],
        "continuous": [s.to_json(cap.find) for s in cap.continuous_sessions()],
        "watches": [w.to_json(cap.find) for w in (cap.watches.all() if cap.watches is not None else [])],
        "rings": [r.status() for r in cap.rings.values()],
    }


def _xprof_answer(job: CaptureJob) -> Response:
    """XProf's answer for a finished capture. A stopped one (from the page, or the server
    stopping) and one whose answers were all over the limit are the one error shape (503,
    413: the client must not read them as a capture that ran and failed); other failures
    are ``{"error"}`` with 200, which XProf's frontend shows (see the module's docstring)."""
    if job.saved:
        return json_response({"result": job.summary().capitalize() + ".", "run": job.run})
    if job.stage == "stopped":
        raise Stopping(f"capture {job.id} of {', '.join(job.targets)}: {job.error}")
    over = [h for h in job.failed if h.over_limit]
    if over and len(over) == len(job.failed):
        raise TooLarge("; ".join(f"{h.address}: {h.error}" for h in over))
    return json_response({"error": job.summary()})


def router(ws: Workspace) -> APIRouter:
    r = APIRouter()

    @r.get(XPROF_PREFIX + "/capture_profile")
    def xprof_capture(request: Request) -> Response:
        """XProf's synchronous capture: records, saves, then answers."""
        args = {k: (request.query_params.get(k) or v) for k, v in XPROF_DEFAULTS.items()}
        if request.query_params.get("is_tpu_name") == "true":
            raise BadRequest("TPU names are resolved with TensorFlow, which profscope does not use: "
                             "give the TPU workers' profiler addresses (HOST:8466,...) instead")
        cap = _capturer(ws)
        settings = _settings(parse_duration(_level(args["duration"], "duration"), "duration"),
                             _level(args["delay"], "delay"), _level(args["host_tracer_level"], "host_tracer_level"),
                             _level(args["device_tracer_level"], "device_tracer_level"),
                             _level(args["python_tracer_level"], "python_tracer_level"))
        targets = parse_targets(request.query_params.get("service_addr") or "", "service_addr")
        return _xprof_answer(cap.capture(targets, settings, num_retry=_level(args["num_retry"], "num_retry")))

    @r.get("/api/capture")
    def capture_state() -> Response:
        if ws.capture is None:
            return json_response({"enabled": False, "jobs": [], "continuous": []})
        return json_response(_state(ws.capture))

    @r.post("/api/capture")
    async def capture_start(request: Request) -> Response:
        cap = _capturer(ws)
        targets, settings, num_retry = _body_settings(await _body(request))
        # in a thread: the allow-list may resolve a name (TargetPolicy.route)
        job = await run_in_threadpool(cap.start, targets, settings, num_retry=num_retry)
        return json_response(job.to_json(), status=202)

    @r.get("/api/capture/job/{job_id}")
    def capture_job(job_id: str) -> Response:
        return json_response(_capturer(ws).job(job_id).to_json())

    @r.post("/api/capture/job/{job_id}/stop")
    def capture_stop(job_id: str) -> Response:
        return json_response(_capturer(ws).stop(job_id).to_json())

    @r.post("/api/capture/continuous")
    async def continuous_start(request: Request) -> Response:
        cap = _capturer(ws)
        targets, settings, _ = _body_settings(await _body(request))
        session = await run_in_threadpool(cap.start_continuous, targets, settings)
        return json_response(session.to_json(cap.find), status=201)

    @r.get("/api/capture/continuous/{sid}")
    def continuous_state(sid: str) -> Response:
        cap = _capturer(ws)
        return json_response(cap.continuous(sid).to_json(cap.find))

    @r.post("/api/capture/continuous/{sid}/snapshot")
    def continuous_snapshot(sid: str) -> Response:
        return json_response(_capturer(ws).snapshot(sid).to_json())

    @r.post("/api/capture/continuous/{sid}/stop")
    def continuous_stop(sid: str) -> Response:
        cap = _capturer(ws)
        return json_response(cap.stop_continuous(sid).to_json(cap.find))

    _watch_routes(r, ws)
    _ring_routes(r, ws)
    return r


def _ring_routes(r: APIRouter, ws: Workspace) -> None:
    """The last N seconds (app/capture_ring.py, docs/capture.md "The last N seconds"):
    start a ring, follow it (pieces held, gaps), save a snapshot, stop it."""

    @r.post("/api/capture/ring")
    async def ring_start(request: Request) -> Response:
        cap = _capturer(ws)
        body = await _body(request, RING_FIELDS)
        targets, settings, _ = _body_settings(body)
        window_s = parse_duration(body.get("window", "5s"), "window") / 1000
        piece_s = parse_duration(body.get("piece", "1s"), "piece") / 1000
        max_bytes = body.get("maxBytes")  # a size, "256MiB" or bytes: start_ring reads it
        # in a thread: the allow-list may resolve a name, and the targets are probed
        ring = await run_in_threadpool(start_ring, cap, targets, window_s, piece_s, settings, max_bytes)
        return json_response(ring.status(), status=201)

    @r.get("/api/capture/ring/{rid}")
    def ring_state(rid: str) -> Response:
        return json_response(ring_of(_capturer(ws), rid).status())

    @r.post("/api/capture/ring/{rid}/snapshot")
    def ring_snapshot(rid: str) -> Response:
        return json_response(ring_of(_capturer(ws), rid).snapshot().to_json())

    @r.post("/api/capture/ring/{rid}/stop")
    def ring_stop(rid: str) -> Response:
        return json_response(ring_of(_capturer(ws), rid).stop().status())


def _watch_routes(r: APIRouter, ws: Workspace) -> None:
    """Automatic capture (app/capture_watch.py, docs/capture.md "Automatic capture"):
    start a watch, follow it (its probes, fires and the runs they made), stop it."""

    @r.post("/api/capture/watch")
    async def watch_start(request: Request) -> Response:
        cap = _capturer(ws)
        body = await _body(request, WATCH_FIELDS)
        targets, settings, _ = _body_settings(body)
        when = body.get("when")
        if not isinstance(when, str):
            raise BadRequest("missing field 'when': the condition, e.g. step_time>2x,for=3 or memory>0.9")
        condition = parse_condition(when, "when")  # before a ring is started for it
        every = parse_duration(body.get("probeEvery", "10s"), "probeEvery") / 1000
        probe_ms = parse_duration(body.get("probeDuration", "1s"), "probeDuration")
        max_fires = _level(body.get("maxFires", 0), "maxFires")
        last = body.get("last")
        window_s = parse_duration(last, "last") / 1000 if last not in (None, "") else None
        piece_s = parse_duration(body.get("piece", "1s"), "piece") / 1000

        def begin():
            ring = start_ring(cap, targets, window_s, piece_s, settings) if window_s is not None else None
            try:
                return watches_of(cap).start(targets, condition, settings, probe_every_s=every, probe_ms=probe_ms,
                                             max_fires=max_fires, what="when", ring=ring, own_ring=True)
            except BaseException:
                if ring is not None:
                    ring.stop()
                raise

        # in a thread: the allow-list may resolve a name (TargetPolicy.route), a ring probes
        watch = await run_in_threadpool(begin)
        return json_response(watch.to_json(cap.find), status=201)

    @r.get("/api/capture/watch/{wid}")
    def watch_state(wid: str) -> Response:
        cap = _capturer(ws)
        return json_response(watches_of(cap).get(wid).to_json(cap.find))

    @r.post("/api/capture/watch/{wid}/stop")
    def watch_stop(wid: str) -> Response:
        cap = _capturer(ws)
        return json_response(watches_of(cap).stop(wid).to_json(cap.find))

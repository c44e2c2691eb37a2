"""A running job's profiler server, as a source of XSpace bytes.

JAX (``jax.profiler.start_server(port)``), TensorFlow
(``tf.profiler.experimental.server.start``) and PyTorch/XLA (``xp.start_server``) all
start the same gRPC service, ``tensorflow.ProfilerService`` (tsl/profiler/rpc/
profiler_service_impl.cc). One capture is one unary ``Profile`` call per target: the
server records for ``ProfileOptions.duration_ms`` and, with ``emit_xspace`` set, answers
the whole XSpace in ``ProfileResponse.xspace``, so nothing is written on the job's disk.

The messages are ours (protos/profiler_service.proto, field numbers from the descriptors
jaxlib ships); the methods are called by their wire path, with no generated stubs.
Every gRPC failure becomes a :class:`TargetError` that names the address and says what
to do; nothing here knows about files, runs or HTTP.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from profscope.errors import ProfscopeError

__all__ = ["DEFAULT_MAX_ANSWER_BYTES", "AnswerTooLarge", "CaptureSettings", "ProfilerClient", "TargetError",
           "split_address", "xspace_of"]

SERVICE = "/tensorflow.ProfilerService/"
# Seconds a call may take beyond the recording itself: the server then collects and
# serialises the XSpace (measured ~0.3-0.5 s per recorded second on 2 cores, jax 0.10.2).
COLLECT_MARGIN_S = 60.0
COLLECT_PER_RECORDED_S = 2.0
# Seconds the cheap calls (Terminate, the continuous-mode start and stop) may take.
CONTROL_TIMEOUT_S = 10.0
# The largest answer (one host's XSpace, as the job serialised it) a capture takes:
# ``--capture-max-bytes``. gRPC's own default, 4 MiB, is too small (10 s of a small jitted
# loop is ~38 MB, 3 s with the Python tracer ~9 MB); a real 13 M-event JAX profile is
# 321 MB (docs/performance.md). gRPC's Python client cannot hand an answer over in pieces:
# it holds the whole message ~3 times while it arrives (the transport's slices, a
# bytearray it appends them to, then bytes(); a 256 MiB answer took the server from 51 to
# 925 MB), so this bounds the server's memory per host. gRPC checks it against the
# message's 5-byte length prefix, before the body is read: an answer over it costs nothing.
DEFAULT_MAX_ANSWER_BYTES = 1 << 30
# A protobuf message is under 2 GiB, and gRPC's channel argument is a C int.
MAX_ANSWER_LIMIT = (1 << 31) - 1
# gRPC's status details for an answer over the limit (chttp2 / message_size_filter:
# "Received message larger than max (268435462 vs. 67108864)").
_TOO_LARGE = re.compile(r"larger than max \((\d+) vs\. (\d+)\)")


def _messages():
    """The generated messages, imported when first needed: a server that never captures
    never loads protobuf for this (tests/test_architecture.py)."""
    from profscope.storage.protos import profiler_service_pb2

    return profiler_service_pb2


class TargetError(ProfscopeError):
    """A profiler server could not be reached or refused the request. ``code`` is gRPC's
    status name (``UNAVAILABLE``, ``INTERNAL``, ...) or ``None`` when the call never left."""

    status = 502

    def __init__(self, address: str, message: str, *, code: str | None = None):
        super().__init__(f"{address}: {message}")
        self.address = address
        self.reason = message  # the message without the address
        self.code = code


class AnswerTooLarge(TargetError):
    """A profiler server's answer is over the limit this client takes (``--capture-max-bytes``):
    refused by gRPC from its length prefix, so none of it was held or written."""

    status = 413

    def __init__(self, address: str, size: int, limit: int):
        super().__init__(address, f"its answer is {size:,} bytes, over the limit of {limit:,} bytes a capture takes "
                                  "(--capture-max-bytes); nothing of it was kept: raise the limit, or record less "
                                  "(a shorter duration, lower tracer levels)", code="RESOURCE_EXHAUSTED")
        self.size, self.limit = size, limit


def split_address(address: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``grpc://host:port`` -> (host, port); a clear
    error for anything else."""
    text = address.strip()
    if text.startswith("grpc://"):
        text = text[len("grpc://"):]
    host, sep, port = text.rpartition(":")
    if text.startswith("["):
        host = host[1:-1] if host.endswith("]") else ""
    # ASCII digits only: str.isdigit() is true for '²' and '١', which int() refuses or reads.
    if not sep or not host or not (port.isascii() and port.isdigit() and len(port) <= 5) or not 0 < int(port) < 65536 \
            or "/" in host:
        raise ProfscopeError(f"{address!r} is not a profiler address: give HOST:PORT, e.g. localhost:9999")
    return host, int(port)


@dataclass(frozen=True, slots=True)
class CaptureSettings:
    """What XProf's capture dialog asks for (profile_plugin.py ``capture_route_impl``),
    as ``ProfileOptions`` fields."""

    duration_ms: int = 2000
    # 0 off, 1 user TraceMe events only, 2 (XProf's default) + high-level runtime, 3 verbose
    host_tracer_level: int = 2
    # 0 off, 1 on (XProf's default)
    device_tracer_level: int = 1
    # 0 off (XProf's default), 1 on: every Python call, expensive
    python_tracer_level: int = 0
    delay_ms: int = 0
    # XProf's capture always asks for dataset (tf.data) ops: profile_plugin.py
    # capture_route_impl calls _pywrap_profiler_plugin.trace(..., True, ...), whose
    # include_dataset_ops argument becomes ProfileOptions.include_dataset_ops (field 1)
    # of every request; its dialog has no switch for it. The job's profiler session hands
    # it to its tracers as it is (tsl profiler_session.cc GetOptions keeps it even from
    # options without a version).
    include_dataset_ops: bool = True

    def __post_init__(self):
        for name, top in (("duration_ms", 3_600_000), ("delay_ms", 3_600_000), ("host_tracer_level", 3),
                          ("device_tracer_level", 1), ("python_tracer_level", 1)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= top:
                raise ProfscopeError(f"{name} must be a whole number from 0 to {top:,}, not {value!r}")

    def options(self, *, start_timestamp_ns: int = 0, session_id: str = ""):
        return _messages().ProfileOptions(
            version=1,  # without it the server ignores the tracer levels
            include_dataset_ops=self.include_dataset_ops,
            host_tracer_level=self.host_tracer_level,
            device_tracer_level=self.device_tracer_level,
            python_tracer_level=self.python_tracer_level,
            enable_hlo_proto=True,  # the /host:metadata plane: the memory viewer's modules
            start_timestamp_ns=start_timestamp_ns,
            duration_ms=self.duration_ms,
            session_id=session_id,
        )

    def request(self, *, start_timestamp_ns: int = 0, session_id: str = ""):
        return _messages().ProfileRequest(
            # JAX's server reads the length from the options; this one is for older servers
            duration_ms=self.duration_ms,
            opts=self.options(start_timestamp_ns=start_timestamp_ns, session_id=session_id),
            session_id=session_id,
            emit_xspace=True,
        )

    def timeout_s(self) -> float:
        """How long a Profile call may take before it counts as hung."""
        recorded = self.duration_ms / 1000
        return self.delay_ms / 1000 + recorded * (1 + COLLECT_PER_RECORDED_S) + COLLECT_MARGIN_S


def _friendly(address: str, code: str, details: str) -> str:
    if code == "UNAVAILABLE":
        # gRPC's details are one long line ("failed to connect to all addresses; last
        # error: UNKNOWN: ipv4:127.0.0.1:1: Failed to connect to remote host: Connection
        # refused"): keep the part a person acts on.
        low = details.lower()
        if "connection refused" in low:
            why = "connection refused"
        elif "resolv" in low or "lookup" in low or "dns" in low:
            why = "the host name does not resolve"
        elif "timeout" in low or "timed out" in low or "deadline" in low:
            why = "no answer in time"
        else:
            why = details.strip() or "connection failed"
        port = address.rsplit(":", 1)[-1]
        return (f"no profiler server answers ({why}); is the job running, and did it call "
                f"jax.profiler.start_server({port})?")
    if code == "INTERNAL" and "another profiling session" in details.lower():
        return ("the job is already recording a profile (another capture, or a jax.profiler.trace in the job "
                "itself); try again when that one ends")
    if code == "UNIMPLEMENTED":
        return f"the profiler server does not offer this ({details.strip() or 'UNIMPLEMENTED'})"
    if code == "DEADLINE_EXCEEDED":
        return "the profiler server did not answer in time"
    return f"{code}: {details.strip() or 'the profiler server failed'}"


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise ValueError("a varint runs past the end")
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def xspace_of(answer: bytes) -> memoryview:
    """``ProfileResponse.xspace`` (field 8, bytes) of a serialised ``ProfileResponse``, as a
    view into ``answer``: decoding the message with protobuf would copy the XSpace twice
    more (into the message, then out as the field's bytes). The last occurrence wins, as
    protobuf reads a repeated scalar field; no field 8 is an empty XSpace. ValueError for
    bytes that are not a protobuf message."""
    view, pos, found, end = memoryview(answer), 0, memoryview(b""), len(answer)
    while pos < end:
        key, pos = _varint(answer, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            _, pos = _varint(answer, pos)
        elif wire in (1, 5):
            pos += 8 if wire == 1 else 4
        elif wire == 2:
            length, pos = _varint(answer, pos)
            if pos + length > end:
                raise ValueError(f"field {number} runs past the end")
            if number == 8:
                found = view[pos:pos + length]
            pos += length
        else:
            raise ValueError(f"field {number} has wire type {wire}")
    if pos > end:
        raise ValueError("the last field runs past the end")
    return found


class ProfilerClient:
    """One profiler server (``host:port``), over one gRPC channel. ``max_answer_bytes``:
    the largest answer taken (:data:`DEFAULT_MAX_ANSWER_BYTES`); over it a call raises
    :class:`AnswerTooLarge`. ``dial``: the ``host:port`` to connect to when it is not
    ``address`` (the address a name was resolved to and checked against an allow-list:
    connecting by the name would resolve it again). ``close()`` ends the calls in flight
    at once (gRPC cancels them: ``CANCELLED``), from any thread."""

    def __init__(self, address: str, *, max_answer_bytes: int = DEFAULT_MAX_ANSWER_BYTES, dial: str | None = None):
        import grpc  # imported here: serving profiles never needs it

        self.check_limit(max_answer_bytes)
        self._grpc = grpc
        host, port = split_address(address)
        self.host, self.port = host, port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self.max_answer_bytes = max_answer_bytes
        options = [("grpc.max_receive_message_length", max_answer_bytes), ("grpc.max_send_message_length", -1)]
        self._channel = grpc.insecure_channel(dial or self.address, options=options)

    @staticmethod
    def check_limit(max_answer_bytes: int) -> None:
        if isinstance(max_answer_bytes, bool) or not isinstance(max_answer_bytes, int) \
                or not 0 < max_answer_bytes <= MAX_ANSWER_LIMIT:
            raise ProfscopeError(f"--capture-max-bytes must be from 1 byte to {MAX_ANSWER_LIMIT:,} (just under 2 GiB, "
                                 f"protobuf's limit), not {max_answer_bytes!r}")

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ProfilerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, response_type, timeout: float):
        """``response_type`` None: the answer's raw bytes."""
        call = self._channel.unary_unary(
            SERVICE + method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString if response_type is not None else None,
        )
        try:
            return call(request, timeout=timeout)
        except self._grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() is not None else "UNKNOWN"
            details = e.details() if hasattr(e, "details") else str(e)
            too_large = _TOO_LARGE.search(details or "") if code == "RESOURCE_EXHAUSTED" else None
            if too_large:
                raise AnswerTooLarge(self.address, int(too_large.group(1)), self.max_answer_bytes) from None
            raise TargetError(self.address, _friendly(self.address, code, details or ""), code=code) from None

    def _xspace(self, method: str, request, timeout: float) -> memoryview:
        answer = self._call(method, request, None, timeout)
        try:
            return xspace_of(answer)
        except ValueError as e:
            raise TargetError(self.address, f"its answer is not a ProfileResponse ({e}): is this a profiler server?",
                              code="INTERNAL") from None

    def profile(self, settings: CaptureSettings, *, start_timestamp_ns: int = 0, session_id: str = "",
                timeout_s: float | None = None) -> memoryview:
        """Record for ``settings.duration_ms`` and return the serialised XSpace (possibly
        with no events: a job that ran nothing in the window), a view of gRPC's answer.
        ``timeout_s``: how long the call may take (``settings.timeout_s()`` by default)."""
        request = settings.request(start_timestamp_ns=start_timestamp_ns, session_id=session_id)
        return self._xspace("Profile", request, settings.timeout_s() if timeout_s is None else timeout_s)

    def terminate(self, session_id: str) -> None:
        """Stop the ``Profile`` call of ``session_id`` early; that call then returns what
        was recorded so far."""
        pb = _messages()
        self._call("Terminate", pb.TerminateRequest(session_id=session_id), pb.TerminateResponse, CONTROL_TIMEOUT_S)

    def probe(self, timeout: float = 5.0) -> None:
        """Raise :class:`TargetError` unless a gRPC server answers at the address: a
        ``Terminate`` of a session that does not exist is a no-op every version has."""
        pb = _messages()
        self._call("Terminate", pb.TerminateRequest(session_id="profscope-probe"), pb.TerminateResponse, timeout)

    # -- continuous mode: the server records into a ring; each snapshot is what it holds
    # since the previous one (profiler_service.proto: StartContinuousProfiling, GetSnapshot)

    def start_continuous(self, settings: CaptureSettings) -> None:
        pb = _messages()
        self._call("StartContinuousProfiling", settings.request(), pb.ContinuousProfilingResponse, CONTROL_TIMEOUT_S)

    def snapshot(self, timeout: float = 120.0) -> memoryview:
        return self._xspace("GetSnapshot", _messages().GetSnapshotRequest(), timeout)

    def stop_continuous(self) -> None:
        pb = _messages()
        self._call("StopContinuousProfiling", pb.StopContinuousProfilingRequest(),
                   pb.StopContinuousProfilingResponse, CONTROL_TIMEOUT_S)

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

from dataclasses import dataclass

from profscope.errors import ProfscopeError

__all__ = ["CaptureSettings", "ProfilerClient", "TargetError", "split_address"]

SERVICE = "/tensorflow.ProfilerService/"
# Seconds a call may take beyond the recording itself: the server then collects and
# serialises the XSpace (measured ~0.3-0.5 s per recorded second on 2 cores, jax 0.10.2).
COLLECT_MARGIN_S = 60.0
COLLECT_PER_RECORDED_S = 2.0
# Seconds the cheap calls (Terminate, the continuous-mode start and stop) may take.
CONTROL_TIMEOUT_S = 10.0
# gRPC refuses answers over 4 MiB by default; 10 s of a small jitted loop is ~38 MB.
# -1: no limit (a protobuf message is at most 2 GiB anyway).
CHANNEL_OPTIONS = [("grpc.max_receive_message_length", -1), ("grpc.max_send_message_length", -1)]


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


def split_address(address: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``grpc://host:port`` -> (host, port); a clear
    error for anything else."""
    text = address.strip()
    if text.startswith("grpc://"):
        text = text[len("grpc://"):]
    host, sep, port = text.rpartition(":")
    if text.startswith("["):
        host = host[1:-1] if host.endswith("]") else ""
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536 or "/" in host:
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


class ProfilerClient:
    """One profiler server (``host:port``), over one gRPC channel."""

    def __init__(self, address: str):
        import grpc  # imported here: serving profiles never needs it

        self._grpc = grpc
        host, port = split_address(address)
        self.host, self.port = host, port
        self.address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        self._channel = grpc.insecure_channel(self.address, options=CHANNEL_OPTIONS)

    def close(self) -> None:
        self._channel.close()

    def __enter__(self) -> ProfilerClient:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _call(self, method: str, request, response_type, timeout: float):
        call = self._channel.unary_unary(
            SERVICE + method,
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_type.FromString,
        )
        try:
            return call(request, timeout=timeout)
        except self._grpc.RpcError as e:
            code = e.code().name if hasattr(e, "code") and e.code() is not None else "UNKNOWN"
            details = e.details() if hasattr(e, "details") else str(e)
            raise TargetError(self.address, _friendly(self.address, code, details or ""), code=code) from None

    def profile(self, settings: CaptureSettings, *, start_timestamp_ns: int = 0, session_id: str = "") -> bytes:
        """Record for ``settings.duration_ms`` and return the serialised XSpace (possibly
        with no events: a job that ran nothing in the window)."""
        pb = _messages()
        request = settings.request(start_timestamp_ns=start_timestamp_ns, session_id=session_id)
        response = self._call("Profile", request, pb.ProfileResponse, settings.timeout_s())
        return response.xspace

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

    def snapshot(self, timeout: float = 120.0) -> bytes:
        pb = _messages()
        return self._call("GetSnapshot", pb.GetSnapshotRequest(), pb.ProfileResponse, timeout).xspace

    def stop_continuous(self) -> None:
        pb = _messages()
        self._call("StopContinuousProfiling", pb.StopContinuousProfilingRequest(),
                   pb.StopContinuousProfilingResponse, CONTROL_TIMEOUT_S)

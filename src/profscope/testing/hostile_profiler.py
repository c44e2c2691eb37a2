"""Profiler servers that misbehave, for capture tests (issue 32): loopback gRPC servers
that speak ``tensorflow.ProfilerService`` by its wire paths, as a job's
``jax.profiler.start_server`` does, but answer what a real job never would.

- ``HostileProfiler(answer_bytes=N)``: ``Profile`` and ``GetSnapshot`` answer a
  ``ProfileResponse`` whose ``xspace`` is a valid XSpace of about N bytes (one plane
  whose name is that long), at once; a profiler gone wrong, or an address that is not
  the job's, sending more than the capturing server should hold.
- ``HostileProfiler(silent=True)``: ``Profile`` never answers (until ``close()``), and
  ``Terminate`` answers but changes nothing: a job stuck while it collects, which keeps
  a capture "collecting" until its gRPC deadline, hours for a long recording.

``Terminate`` (profscope's probe) is always answered, so a capture gets past probing
and the misbehaviour is the ``Profile`` call's. ``calls`` keeps each call's method and
raw request. The answer's bytes are made once per server and kept; to measure another
process's memory, run it apart::

    python -m profscope.testing.hostile_profiler --answer-mib 256    # prints localhost:PORT
"""

from __future__ import annotations

import argparse
import threading
from concurrent.futures import ThreadPoolExecutor

__all__ = ["HostileProfiler", "profile_response"]


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited protobuf field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def profile_response(xspace_bytes: int) -> bytes:
    """A serialised ``ProfileResponse`` (profiler_service.proto: ``xspace`` is field 8)
    holding an XSpace of ``xspace_bytes`` bytes or a few more: one XPlane (XSpace field 1)
    whose ``name`` (XPlane field 2) is ``x`` repeated, so the file reads as an XSpace."""
    name = b"x" * max(0, xspace_bytes - 12)
    return _field(8, _field(1, _field(2, name)))


class HostileProfiler:
    """One misbehaving profiler server on a free loopback port; ``address`` is
    ``localhost:PORT``. Use as a context manager, or call ``close()``."""

    def __init__(self, *, answer_bytes: int | None = None, silent: bool = False):
        import grpc

        if (answer_bytes is None) == (not silent):
            raise ValueError("give answer_bytes or silent=True")
        self.calls: list[tuple[str, bytes]] = []
        self._released = threading.Event()
        answer = profile_response(answer_bytes) if answer_bytes is not None else b""
        calls, released = self.calls, self._released

        def handle(method: str):
            def reply(request: bytes, context) -> bytes:
                calls.append((method, request))
                if method.endswith(("/Profile", "/GetSnapshot")):
                    if silent:
                        released.wait()  # until close(): no answer, no error
                        return b""
                    return answer
                return b""  # Terminate and the rest: an empty message of every answer type

            return reply

        class Handler(grpc.GenericRpcHandler):
            def service(self, details):
                # raw bytes both ways: the answer goes out as it was built
                return grpc.unary_unary_rpc_method_handler(handle(details.method))

        # The server's own send limit is 4 MiB unless lifted; a real job's has none.
        self._server = grpc.server(ThreadPoolExecutor(max_workers=16), handlers=[Handler()],
                                   options=[("grpc.max_send_message_length", -1)])
        self.address = f"localhost:{self._server.add_insecure_port('127.0.0.1:0')}"
        self._server.start()

    def profile_calls(self) -> int:
        return sum(1 for method, _ in self.calls if method.endswith("/Profile"))

    def close(self) -> None:
        self._released.set()
        self._server.stop(grace=None)

    def __enter__(self) -> HostileProfiler:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _main() -> None:
    parser = argparse.ArgumentParser(description="a misbehaving profiler server on loopback, until killed")
    parser.add_argument("--answer-mib", type=float, help="answer Profile with an XSpace of this many MiB")
    parser.add_argument("--silent", action="store_true", help="never answer Profile")
    args = parser.parse_args()
    answer = int(args.answer_mib * (1 << 20)) if args.answer_mib is not None else None
    server = HostileProfiler(answer_bytes=answer, silent=args.silent)
    print(server.address, flush=True)
    threading.Event().wait()


if __name__ == "__main__":
    _main()

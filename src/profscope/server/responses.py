"""Response helpers shared by the routers: one error shape, gzip pass-through, pieces sent
whole or streamed."""

from __future__ import annotations

import gzip
import itertools
from collections.abc import Iterator

import orjson
from fastapi import Request
from isal import igzip
from fastapi.responses import Response, StreamingResponse

from profscope.errors import ProfscopeError
from profscope.server.quick_start import GZIP_MIN


# A trace window's binary answer (``/api/trace/window?format=columns``): its own type, so
# that no client takes it for JSON.
COLUMNS_TYPE = "application/vnd.profscope.columns"


def json_response(value, status: int = 200) -> Response:
    return Response(orjson.dumps(value), status_code=status, media_type="application/json")


def error_response(err: ProfscopeError) -> Response:
    return json_response(err.to_json(), status=err.status)


def gzip_json_response(request: Request, gz: bytes) -> Response:
    """Send a cached gzip JSON payload as stored when the client takes gzip."""
    if "gzip" in request.headers.get("accept-encoding", ""):
        return Response(
            gz,
            media_type="application/json",
            headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"},
        )
    return Response(gzip.decompress(gz), media_type="application/json")


def deflated_response(request: Request, body: bytes, media_type: str = "application/json") -> Response:
    """``body`` gzipped by ISA-L's igzip (level 1) for a client that takes gzip, from
    ``GZIP_MIN`` bytes on, else as it is: the answers made per request that can be big (a
    trace window's, XProf's). Not by the app's middleware (zlib, which passes an answer
    that says its encoding): igzip deflated a busy jax308 window's 2.6 MB of binary
    columns to 1.3 MB in ~6 ms and its 3.1 MB of JSON to 0.9 MB in ~7 ms, where zlib's
    level 1 took 28 ms for either. On loopback raw bytes would do; through an ssh tunnel
    the smaller answer pays."""
    if len(body) >= GZIP_MIN and "gzip" in request.headers.get("accept-encoding", ""):
        return Response(igzip.compress(body, 1), media_type=media_type,
                        headers={"Content-Encoding": "gzip", "Vary": "Accept-Encoding"})
    return Response(body, media_type=media_type)


# An answer made in pieces up to this size is sent whole, with its length. XProf's
# later windows (app/traces.py keeps each up to 16 MiB in memory anyway): jax308's busy
# 1 % windows, 7.7 MB in five pieces, took 68 ms over HTTP streamed against ~50 ms to
# make, and ~54 ms sent whole (a client reads one body faster than chunks arriving as
# they are made, Python's http.client most of all).
WHOLE_MAX_BYTES = 16 << 20


def pieces_response(request: Request, pieces: Iterator[bytes], media_type: str = "application/json") -> Response:
    """``pieces`` as one body when they add up to at most ``WHOLE_MAX_BYTES`` (deflated as
    :func:`deflated_response` does), else streamed (the pieces read so far first; the
    app's middleware deflates those): a gigabyte answer is never held whole."""
    most = WHOLE_MAX_BYTES
    held, size = [], 0
    for piece in pieces:
        held.append(piece)
        size += len(piece)
        if size > most:
            return StreamingResponse(itertools.chain(held, pieces), media_type=media_type)
    return deflated_response(request, b"".join(held), media_type)

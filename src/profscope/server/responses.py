"""Response helpers shared by the routers: one error shape, gzip pass-through."""

from __future__ import annotations

import gzip

import orjson
from fastapi import Request
from fastapi.responses import Response

from profscope.errors import ProfscopeError


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

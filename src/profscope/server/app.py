"""The FastAPI application: routers, the one error shape, compression."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException

from profscope import __version__
from profscope.cache.workspace import Workspace
from profscope.errors import ProfscopeError
from profscope.server import api, pages, trace_api, xprof_api
from profscope.server.responses import json_response

log = logging.getLogger("profscope.server")


def create_app(ws: Workspace) -> FastAPI:
    app = FastAPI(title="profscope", version=__version__, docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.workspace = ws
    # Responses already stored gzip-compressed carry Content-Encoding and are skipped.
    app.add_middleware(GZipMiddleware, minimum_size=2048, compresslevel=5)

    @app.exception_handler(ProfscopeError)
    async def profscope_error(_request: Request, err: ProfscopeError):
        return json_response(err.to_json(), status=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, err: StarletteHTTPException):
        body = {"ok": False, "status": err.status_code, "error": str(err.detail), "file": None}
        return json_response(body, status=err.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, err: RequestValidationError):
        return json_response({"ok": False, "status": 400, "error": str(err), "file": None}, status=400)

    @app.exception_handler(Exception)
    async def bug(_request: Request, err: Exception):
        log.exception("unexpected error")
        body = {"ok": False, "status": 500, "error": f"internal error: {type(err).__name__}: {err}", "file": None}
        return json_response(body, status=500)

    app.include_router(xprof_api.router(ws))
    app.include_router(api.router(ws))
    app.include_router(trace_api.router(ws))
    app.include_router(pages.router(ws))
    return app

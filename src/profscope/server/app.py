"""The FastAPI application: routers, the one error shape, compression, the guard (Host,
Origin, token, URL limits, security headers: server/guard.py)."""

from __future__ import annotations

import asyncio
import logging

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.gzip import GZipMiddleware
from starlette.exceptions import HTTPException as StarletteHTTPException

from profscope import __version__
from profscope.app.workspace import Workspace
from profscope.errors import ProfscopeError
from profscope.server import api, capture_api, convert_api, hlo_api, pages, trace_api, xprof_api
from profscope.server.guard import TEST_CLIENT_HOST, Guard, Security, add_headers
from profscope.server.params import validation_message
from profscope.server.quick_start import GZIP_LEVEL, GZIP_MIN, QuickStart
from profscope.server.responses import json_response

log = logging.getLogger("profscope.server")


def create_app(ws: Workspace, security: Security | None = None) -> FastAPI:
    """The app over ``ws``. ``security`` is what the guard lets through; the CLI passes
    the one for its ``--host`` / ``--allow-host`` / token. Without it (tests, an app run
    in-process): loopback names only, plus Starlette's TestClient host, and no token."""
    if security is None:
        security = Security(allow_hosts=(TEST_CLIENT_HOST,))
    app = FastAPI(title="profscope", version=__version__, docs_url=None, redoc_url=None, openapi_url="/api/openapi.json")
    app.state.workspace = ws
    # Responses already stored gzip-compressed carry Content-Encoding and are skipped.
    app.add_middleware(GZipMiddleware, minimum_size=GZIP_MIN, compresslevel=GZIP_LEVEL)
    # Added last, so outermost of ours: a refused request costs nothing further, and
    # every answer (refusals too) gets the security headers.
    app.add_middleware(Guard, security=security)
    app.state.security = security

    @app.exception_handler(ProfscopeError)
    async def profscope_error(_request: Request, err: ProfscopeError):
        return json_response(err.to_json(), status=err.status)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_request: Request, err: StarletteHTTPException):
        body = {"ok": False, "status": err.status_code, "error": str(err.detail), "file": None}
        return json_response(body, status=err.status_code)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_request: Request, err: RequestValidationError):
        return json_response({"ok": False, "status": 400, "error": validation_message(err), "file": None}, status=400)

    @app.exception_handler(Exception)
    async def bug(_request: Request, err: Exception):
        log.exception("unexpected error")
        body = {"ok": False, "status": 500, "error": f"internal error: {type(err).__name__}: {err}", "file": None}
        response = json_response(body, status=500)
        # Starlette answers this outside the guard's middleware and then re-raises, and
        # uvicorn closes the connection after an exception: say so (Connection: close),
        # or the client sends its next request on a dead connection. The security
        # headers are added here for the same reason.
        response.raw_headers[:] = add_headers(list(response.raw_headers), 500)
        return response

    app.include_router(xprof_api.router(ws))
    app.include_router(capture_api.router(ws))
    app.include_router(api.router(ws))
    app.include_router(trace_api.router(ws))
    app.include_router(hlo_api.router(ws))
    app.include_router(convert_api.router(ws))
    app.include_router(pages.router(ws))
    return app


class Server(uvicorn.Server):
    """uvicorn's server, whose Ctrl+C / SIGTERM also ends the conversions under way
    (``WorkerPool.stop``) and the captures (``Capturer.shutdown``): the requests waiting
    for them are answered at once, a 503 in the one error shape, where uvicorn's graceful
    shutdown cut them after its timeout with a plain-text 500 and the server took that
    long to exit."""

    def __init__(self, config: uvicorn.Config, ws: Workspace, quick: QuickStart | None = None):
        super().__init__(config)
        self.workspace = ws
        self.quick = quick

    async def startup(self, sockets=None) -> None:
        await super().startup(sockets)
        if self.quick is not None and self.started:
            # uvicorn accepts now: the connections the quick start holds become its own,
            # each with a protocol made as uvicorn's startup makes them (server.py's
            # create_protocol)
            config, state, app_state = self.config, self.server_state, self.lifespan.state
            self.quick.hand_over(asyncio.get_running_loop(),
                                 lambda: config.http_protocol_class(config=config, server_state=state, app_state=app_state))

    def handle_exit(self, sig, frame) -> None:
        self.workspace.cache.workers.stop()
        if self.workspace.capture is not None:
            # the captures under way end now: a blocking XProf capture request gets its 503
            self.workspace.capture.shutdown()
        super().handle_exit(sig, frame)

"""HTML pages and static assets. Every asset is served from this process: the pages
work with no network at all (Plotly's JS comes from the installed ``plotly`` package)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from profscope import __version__
from profscope.app.workspace import Workspace
from profscope.errors import NotFound

FRONTEND = Path(str(resources.files("profscope") / "frontend"))
STATIC = FRONTEND / "static"
# The frontend is native ES modules, no build step: app.js (the shell) imports lib/ (shared
# helpers) and pages/ (one module per page, each with its own stylesheet, added when shown).
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html"}


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def router(ws: Workspace) -> APIRouter:
    r = APIRouter()
    env = Environment(loader=FileSystemLoader(FRONTEND / "templates"), autoescape=select_autoescape(["html"]))
    cache_static = {"Cache-Control": "public, max-age=3600"}

    @r.get("/", response_class=HTMLResponse)
    def index(request: Request) -> HTMLResponse:
        page = env.get_template("index.html").render(
            version=__version__, logdir=ws.logdir.url
        )
        return HTMLResponse(page)

    @r.get("/static/vendor/plotly.min.js")
    def plotly() -> Response:
        return FileResponse(plotly_js(), media_type="text/javascript", headers=cache_static)

    @r.get("/static/{name:path}")
    def static(name: str) -> Response:
        # static/, lib/ and pages/ below it: every part a plain name (no '..', no dot file,
        # no backslash, no empty part), so a request can never resolve outside STATIC.
        parts = name.split("/")
        if "\\" in name or any(not part or part.startswith(".") for part in parts):
            raise NotFound(f"no static file {name!r}")
        path = STATIC.joinpath(*parts)
        if not path.is_file():
            raise NotFound(f"no static file {name!r}")
        return FileResponse(path, media_type=MEDIA_TYPES.get(path.suffix), headers=cache_static)

    return r

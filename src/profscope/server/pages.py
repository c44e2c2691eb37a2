"""HTML pages and static assets. Every asset is served from this process: the pages
work with no network at all (Plotly's JS comes from the installed ``plotly`` package)."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, Response
from jinja2 import Environment, FileSystemLoader, select_autoescape

from profscope import __version__
from profscope.cache.workspace import Workspace
from profscope.errors import NotFound

FRONTEND = Path(str(resources.files("profscope") / "frontend"))
STATIC = FRONTEND / "static"
# One script per tool page, loaded when present (each registers itself in TOOL_VIEWS).
TOOL_SCRIPTS = [name for name in ("memory_viewer.js", "memory_profile.js", "torch_snapshot.js", "trace_viewer.js", "oom_risk.js") if (STATIC / name).is_file()]


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
            version=__version__, logdir=ws.logdir.url, tool_scripts=TOOL_SCRIPTS
        )
        return HTMLResponse(page)

    @r.get("/static/vendor/plotly.min.js")
    def plotly() -> Response:
        return FileResponse(plotly_js(), media_type="text/javascript", headers=cache_static)

    @r.get("/static/{name}")
    def static(name: str) -> Response:
        # Flat folder: a name with a separator or '..' can never resolve to a file here.
        path = STATIC / name
        if "/" in name or "\\" in name or name.startswith(".") or not path.is_file():
            raise NotFound(f"no static file {name!r}")
        return FileResponse(path, headers=cache_static)

    return r

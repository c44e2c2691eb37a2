"""HTML pages and static assets. Every asset is served from this process: the pages
work with no network at all (Plotly's JS comes from the installed ``plotly`` package)."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlencode

from fastapi import APIRouter, Request
from fastapi.responses import FileResponse, HTMLResponse, RedirectResponse, Response

from profscope.app import tool_table
from profscope.app.workspace import Workspace
from profscope.errors import NotFound
from profscope.server.quick_start import index_html
from profscope.frontend import render

# The frontend is native ES modules, no build step: app.js (the shell) imports lib/ (shared
# helpers) and pages/ (one module per page, each with its own stylesheet, added when shown).
# lib/colors.js imports lib/palette.json as a JSON module, which a browser runs only when
# it is answered with a JSON MIME type (HTML: "fetch a single module script").
MEDIA_TYPES = {".js": "text/javascript", ".css": "text/css", ".html": "text/html", ".json": "application/json"}


def _without_tag(request: Request, tool: str | None) -> str:
    """The page URL with ``tag=`` replaced by ``tool=`` (kept where the URL had one)."""
    items = []
    for key, value in request.query_params.multi_items():
        if key == "tag":
            if tool and "tool" not in request.query_params:
                items.append(("tool", tool))
        else:
            items.append((key, value))
    query = urlencode(items)
    return f"/?{query}" if query else "/"


def plotly_js() -> Path:
    import plotly

    return Path(plotly.__file__).parent / "package_data" / "plotly.min.js"


def router(ws: Workspace) -> APIRouter:
    r = APIRouter()
    cache_static = {"Cache-Control": "public, max-age=3600"}

    @r.get("/", response_class=HTMLResponse)
    def index(request: Request) -> Response:
        # An XProf link (tag=) opens our page of that tool; a tag we have no page for is
        # left in the URL for the shell (app.js) to say so, naming the run's tools.
        tag = request.query_params.get("tag")
        if tag is not None:
            tool = request.query_params.get("tool") or tool_table.page_tool(tag)
            if tool is not None:
                return RedirectResponse(_without_tag(request, tool), status_code=302)
        return HTMLResponse(index_html(ws.logdir.url, tool_table.page_rows()))

    @r.get("/static/vendor/plotly.min.js")
    def plotly() -> Response:
        return FileResponse(plotly_js(), media_type="text/javascript", headers=cache_static)

    @r.get("/static/{name:path}")
    def static(name: str) -> Response:
        # static/, lib/ and pages/ below it: every part a plain name (no '..', no dot file,
        # no backslash, no empty part), so a request can never resolve outside static/.
        parts = name.split("/")
        if "\\" in name or any(not part or part.startswith(".") for part in parts):
            raise NotFound(f"no static file {name!r}")
        path = render.STATIC.joinpath(*parts)
        if not path.is_file():
            raise NotFound(f"no static file {name!r}")
        return FileResponse(path, media_type=MEDIA_TYPES.get(path.suffix), headers=cache_static)

    return r

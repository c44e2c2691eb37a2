"""The package's one Jinja environment. Every HTML page made on the Python side renders a
template of ``templates/`` here from plain values (memray's reporters/templates is the
model: the callers build the data, the templates only display it):

- ``index.html``, the dashboard's page (server/pages.py);
- ``memory_viewer_timeline.html``, XProf's allocation-timeline page (server/xprof_api.py,
  from tools/memory_viewer_timeline.py's values);
- ``oom_report.html``, ``profscope report``'s offline file (frontend/oom_report.py).

Every template sees ``palette``: static/lib/palette.json, the file lib/colors.js imports,
so the report and the pages draw a tier or a category in one colour.
"""

from __future__ import annotations

import json
from pathlib import Path

from jinja2 import Environment, FileSystemLoader, Undefined, select_autoescape
from markupsafe import Markup, escape

from profscope.model.units import fmt_bytes

__all__ = ["PALETTE", "STATIC", "TEMPLATES", "bytes_text", "page", "path_text", "pct_text"]

FRONTEND = Path(__file__).parent
TEMPLATES = FRONTEND / "templates"
STATIC = FRONTEND / "static"


def _palette() -> dict:
    """palette.json with OOM_CATEGORY's names in P resolved to colours, as colors.js does."""
    raw = json.loads((STATIC / "lib" / "palette.json").read_text(encoding="utf-8"))
    return {**raw, "OOM_CATEGORY": {k: raw["P"][name] for k, name in raw["OOM_CATEGORY"].items()}}


PALETTE = _palette()


def bytes_text(n) -> str:
    """Binary units, the pages' rule (model/units.py = lib/format.js fmtBytes); "—" for a
    field a payload leaves out (a template reads it as Undefined)."""
    return "—" if n is None or isinstance(n, Undefined) else fmt_bytes(n)


def pct_text(x) -> str:
    return "—" if x is None or isinstance(x, Undefined) else f"{100 * x:.1f} %"


def path_text(path) -> Markup:
    """A run or file path, escaped, with a line-break opportunity (``<wbr>``) after each
    ``/``: a narrow table cell then breaks it between folders, not inside a name."""
    return Markup("/<wbr>").join(escape(part) for part in str(path).split("/"))


_ENV = Environment(loader=FileSystemLoader(TEMPLATES), autoescape=select_autoescape(["html"]))
_ENV.filters["bytes"] = bytes_text
_ENV.filters["pct"] = pct_text
_ENV.filters["path"] = path_text
_ENV.globals["palette"] = PALETTE


def page(template: str, **values) -> str:
    """``templates/<template>`` rendered with ``values`` (autoescaped)."""
    return _ENV.get_template(template).render(**values)

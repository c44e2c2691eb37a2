"""Works offline: no page or asset of ours points at another host."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

import profscope

FRONTEND = Path(profscope.__file__).parent / "frontend"
# What makes a browser fetch something: src/href attributes, CSS url(), @import, fetch().
LOADS = re.compile(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//|url\(\s*["']?\s*(?:https?:)?//|@import\s+["']?(?:https?:)?//|fetch\(\s*["'`](?:https?:)?//""", re.I)
ANY_URL = re.compile(r"https?://", re.I)


def test_no_external_url_in_templates_or_static_assets():
    files = [p for p in FRONTEND.rglob("*") if p.is_file() and p.suffix in {".html", ".js", ".css"}]
    assert files, "frontend files not found"
    for path in files:
        text = path.read_text()
        assert not ANY_URL.search(text), f"{path.relative_to(FRONTEND)} names an external URL"


def test_rendered_pages_load_nothing_from_elsewhere(demo_client):
    for url in ["/", "/?run=dumps/mlp&tool=memory_viewer"]:
        html = demo_client.get(url).text
        assert not LOADS.search(html), url
        # The page's assets, and what its ES modules import and add (each page's stylesheet).
        todo = re.findall(r"""(?:src|href)="(/[^"]+)\"""", html)
        seen = set()
        while todo:
            asset = todo.pop()
            if asset in seen:
                continue
            seen.add(asset)
            res = demo_client.get(asset)
            assert res.status_code == 200, asset
            if asset.endswith(".js") and "/vendor/" not in asset:
                base = asset.rsplit("/", 1)[0]
                for rel in re.findall(r"""^import\s[^;]*?from\s+"(\.{1,2}/[^"]+)";""", res.text, re.M | re.S):
                    todo.append(posixpath.normpath(f"{base}/{rel}"))
                todo += [f"/static/{css}" for css in re.findall(r"""["'](pages/[\w-]+\.css)["']""", res.text)]
        assert any(a.startswith("/static/pages/") for a in seen), "the page modules were not reached"
    js = demo_client.get("/static/vendor/plotly.min.js")
    assert js.status_code == 200 and b"plotly.js v" in js.content[:200]


def test_the_pattern_catches_a_cdn_link():
    assert LOADS.search('<script src="https://cdn.plot.ly/plotly.min.js"></script>')
    assert LOADS.search("background: url(//fonts.example/x.woff)")
    assert not LOADS.search('<script src="/static/vendor/plotly.min.js"></script>')

"""The layer rules, as an explicit allow-list of layer-to-layer imports (Perfetto's
tools/check_imports.py is the model): data flows storage -> formats -> model -> tools ->
app -> server -> frontend, with the cache beside the app.

* the model is the shared language: formats produce its types, tools consume only them
  (a tool knows no file format, no cache, no HTTP);
* the app (the workspace) is the only layer that puts readers, tools and the cache
  together, and knows no HTTP;
* the server calls only the app (and reads the model's types it hands back), and hands
  the frontend the plain values of the HTML pages it answers;
* the frontend only displays: it knows no workspace, only the model's byte format;
* ``errors`` (the one error family) and ``forksafe`` (what a forked conversion worker
  renews) are shared by every layer; only the CLI, the entry point, imports the server.

Every import counts: top-level, inside functions (lazy), relative, and the app's
``lazy.module("...")`` stand-ins. The table in
docs/architecture.md is checked against ALLOWED below.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import profscope

PACKAGE = Path(profscope.__file__).parent
DOCS = PACKAGE.parents[1] / "docs" / "architecture.md"
SHARED = {"errors", "forksafe"}
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "forksafe": set(),
    "storage": set(),
    "model": {"storage"},  # a run lists the storage's file records
    "formats": {"model"},
    "tools": {"model"},
    "cache": set(),
    "app": {"storage", "formats", "model", "tools", "cache"},
    "server": {"app", "model", "frontend"},  # the pages render through frontend/render.py
    "frontend": {"model"},  # renders plain data: model/units.py's byte format
    "testing": {"storage", "formats", "model", "tools", "cache", "app", "server"},  # builders, test servers, the fuzz harness
}
ENTRY_POINTS = {"cli", "__main__"}  # may import every layer
ROOT = ""  # ``profscope`` itself: only __version__


def layer_of(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == "profscope", module
    return parts[1] if len(parts) > 1 else ROOT


def imports(path: Path, module: str):
    """(line, imported module) for every import in a file, relative ones resolved."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rsplit(".", 1)[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module is None or (node.level and not node.module):
                # ``from . import x`` names modules: check each one
                for alias in node.names:
                    yield node.lineno, f"{target}.{alias.name}"
            else:
                yield node.lineno, target
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "module"
              and isinstance(node.func.value, ast.Name) and node.func.value.id == "lazy"):
            # app/lazy.py: ``x = lazy.module("profscope.formats.x")`` imports x when first used
            arg = node.args[0] if node.args else None
            assert isinstance(arg, ast.Constant) and isinstance(arg.value, str), f"{path}:{node.lineno}: a lazy import names its module"
            yield node.lineno, arg.value


def module_name(root: Path, path: Path) -> str:
    rel = path.relative_to(root).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(["profscope", *parts])


def violations(root: Path = PACKAGE) -> list[str]:
    out = []
    for path in sorted(root.rglob("*.py")):
        module = module_name(root, path)
        own = layer_of(module)
        if own in ENTRY_POINTS or own == ROOT:
            continue
        if own not in ALLOWED:
            out.append(f"{path.relative_to(root)}: in no layer (add it to ALLOWED)")
            continue
        for lineno, target in imports(path, module):
            if target != "profscope" and not target.startswith("profscope."):
                continue
            to = layer_of(target)
            if to == own or to in SHARED or to == ROOT:
                continue
            if to not in ALLOWED[own]:
                out.append(f"{path.relative_to(root)}:{lineno} ({own}) imports {target} ({to})")
    return out


def matrix(root: Path = PACKAGE) -> dict[tuple[str, str], int]:
    """Import statements per (importing layer, imported layer): the note's table."""
    counts: dict[tuple[str, str], int] = {}
    for path in sorted(root.rglob("*.py")):
        module = module_name(root, path)
        for _, target in imports(path, module):
            if target.startswith("profscope."):
                key = (layer_of(module), layer_of(target))
                counts[key] = counts.get(key, 0) + 1
    return counts


def test_every_import_is_allowed():
    found = violations()
    assert not found, "imports the layer rules do not allow:\n" + "\n".join(found)


def test_the_checker_catches_each_kind_of_violation(tmp_path):
    pkg = tmp_path / "profscope"
    for name, text in {
        "__init__.py": "",
        "tools/__init__.py": "",
        "tools/bad_tool.py": "def f():\n    from profscope.formats import xplane  # lazy: still counted\n",
        "server/__init__.py": "",
        "server/bad_route.py": "import profscope.tools.oom_risk\nfrom profscope.cache.store import DiskCache\n"
                               "from profscope.app import lazy\nx = lazy.module('profscope.formats.xplane')\n",
        "formats/__init__.py": "",
        "formats/bad_reader.py": "from ..app import workspace\nfrom . import xplane\n",
        "model/__init__.py": "",
        "model/fine.py": "from profscope.errors import BadInput\nfrom profscope.storage import FileInfo\n",
        "gadgets/thing.py": "",
    }.items():
        (pkg / name).parent.mkdir(parents=True, exist_ok=True)
        (pkg / name).write_text(text)
    found = violations(pkg)
    assert found == [
        "formats/bad_reader.py:1 (formats) imports profscope.app (app)",
        "gadgets/thing.py: in no layer (add it to ALLOWED)",
        "server/bad_route.py:1 (server) imports profscope.tools.oom_risk (tools)",
        "server/bad_route.py:2 (server) imports profscope.cache.store (cache)",
        "server/bad_route.py:4 (server) imports profscope.formats.xplane (formats)",
        "tools/bad_tool.py:2 (tools) imports profscope.formats (formats)",
    ], found


def test_the_documented_rules_are_the_checked_ones():
    """docs/architecture.md's allow-list table (its section "The rules, checked") lists,
    per layer, exactly ALLOWED."""
    section = DOCS.read_text().split("## The rules, checked", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", section, flags=re.M)
    documented = {layer: set(re.findall(r"`(\w+)`", allowed)) for layer, allowed in rows}
    assert documented == {k: v for k, v in ALLOWED.items()}, documented


def test_no_two_modules_share_a_name():
    """A module's name says what it handles, once: ``torch_snapshot`` in two layers (or
    ``chrome_trace`` as a reader and a builder) made every traceback and grep ambiguous."""
    seen: dict[str, list[str]] = {}
    for path in PACKAGE.rglob("*.py"):
        if path.name != "__init__.py":
            seen.setdefault(path.stem, []).append(str(path.relative_to(PACKAGE)))
    assert not {k: v for k, v in seen.items() if len(v) > 1}


def test_the_server_answers_without_the_readers(demo_logdir, tmp_path):
    """The first answers (the page, the run lists) import no numpy, protobuf or fsspec:
    the readers and tools are imported when a request needs them (app/lazy.py), so a
    server starts in about the time FastAPI takes to import (bench_startup.py)."""
    import subprocess
    import sys

    code = f"""
import sys
from fastapi.testclient import TestClient
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.server import create_app
from profscope.storage import LogDir
ws = Workspace(LogDir({str(demo_logdir)!r}), DiskCache({str(tmp_path / "cache")!r}))
client = TestClient(create_app(ws))
for path in ("/", "/api/runs", "/data/plugin/profile/runs"):
    assert client.get(path).status_code == 200, path
print(sorted(m for m in ("numpy", "google.protobuf", "fsspec", "gcsfs") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
    # ... and a request that needs them still gets them
    code2 = code.replace('for path in ("/", "/api/runs", "/data/plugin/profile/runs"):',
                         'for path in ("/api/trace/window?run=" + next(r.name for r in ws.runs() if r.kind.value == "profile"),):')
    out = subprocess.run([sys.executable, "-c", code2], capture_output=True, text=True, check=True).stdout
    assert "numpy" in out


# -- The frontend's ES modules (static/**/*.js) ---------------------------------------------
# The rules of docs/frontend.md, read from each file's static ``import ... from "..."`` and
# ``export ... from "..."`` (a dynamic ``import()`` is not followed):
#
# * the import graph of static/ has no cycle;
# * lib/ imports only lib/ (it knows no page, nor the shell);
# * every ``tool: "..."`` a module names (a page's declaration, a link's state) is a tool
#   the server has, and every page module (a default export in pages/) declares its tool.
#
# The checkers take the static root, so the test below runs them on a deliberately bad tree.

STATIC = PACKAGE / "frontend" / "static"
_JS_FROM = re.compile(  # import x, { a as b } from "..." / import * as m from "..." / export { a } from / export * from
    r"""^[ \t]*(?:import\s*(?:[\w$]+\s*,?\s*)?(?:\*\s*as\s+[\w$]+\s*|\{[^}]*\}\s*)?"""
    r"""|export\s*(?:\*\s*(?:as\s+[\w$]+\s*)?|\{[^}]*\}\s*))from\s*(["'])([^"'\n]+)\1""", re.M)
_JS_BARE = re.compile(r"""^[ \t]*import\s*(["'])([^"'\n]+)\1""", re.M)  # import "./x.js";
_JS_TOOL = re.compile(r"""\btool:\s*(["'])([^"'\n]*)\1""")


def registry_tool_names() -> set[str]:
    """The names of the tools the server has (``trace_viewer@``, ``memory_profile``, ...):
    the rows of the tool table, the one place the JS checks ask."""
    from profscope.app.tool_table import TOOLS

    return {t.name for t in TOOLS}


def _line(text: str, pos: int) -> int:
    return text.count("\n", 0, pos) + 1


def js_imports(root: Path = STATIC) -> tuple[dict[str, list[tuple[int, str]]], list[str]]:
    """Every .js file under ``root`` (by its path relative to it) with the (line, file)
    of each module it imports statically; and the imports that name no file under root."""
    graph: dict[str, list[tuple[int, str]]] = {}
    problems: list[str] = []
    base = root.resolve()
    for path in sorted(base.rglob("*.js")):
        rel = path.relative_to(base).as_posix()
        text = path.read_text()
        found = sorted((m.start(), m.group(2)) for pattern in (_JS_FROM, _JS_BARE) for m in pattern.finditer(text))
        graph[rel] = []
        for pos, spec in found:
            line = _line(text, pos)
            if spec.startswith(("./", "../")):
                target = (path.parent / spec).resolve()
            elif spec.startswith("/static/"):
                target = base / spec.removeprefix("/static/")
            else:
                problems.append(f"{rel}:{line} imports {spec!r}, not a file under static/")
                continue
            if not target.is_relative_to(base) or not target.is_file():
                problems.append(f"{rel}:{line} imports {spec!r}, not a file under static/")
                continue
            graph[rel].append((line, target.relative_to(base).as_posix()))
    return graph, problems


def js_import_cycles(root: Path = STATIC) -> list[str]:
    """Each import cycle found, as its files in import order (``a.js -> b.js -> a.js``)."""
    graph, _ = js_imports(root)
    state: dict[str, int] = {}  # 1: on the walk's path, 2: done
    path: list[str] = []
    cycles: list[str] = []

    def walk(node: str) -> None:
        state[node] = 1
        path.append(node)
        for _, target in graph.get(node, []):
            if state.get(target) == 1:
                cycles.append(" -> ".join(path[path.index(target):] + [target]))
            elif target not in state:
                walk(target)
        path.pop()
        state[node] = 2

    for node in sorted(graph):
        if node not in state:
            walk(node)
    return cycles


def js_lib_violations(root: Path = STATIC) -> list[str]:
    """lib/ modules that import anything but lib/."""
    graph, _ = js_imports(root)
    return [f"{rel}:{line} imports {target} (lib/ imports only lib/)"
            for rel, targets in graph.items() if rel.startswith("lib/")
            for line, target in targets if not target.startswith("lib/")]


def js_tool_violations(root: Path = STATIC, known: set[str] | None = None) -> list[str]:
    """Tools named (``tool: "..."``) that the server does not have, a trailing ``@``
    ignored on both sides; and page modules whose default export declares no tool."""
    names = {n.removesuffix("@") for n in (registry_tool_names() if known is None else known)}
    # the run overview: no tool of the server's, a page of the shell's own (tool=overview;
    # a bare ?run=R opens the run's Summary, app.js openingTool)
    names |= {"", "overview"}
    out = []
    base = root.resolve()
    for path in sorted(base.rglob("*.js")):
        rel = path.relative_to(base).as_posix()
        text = path.read_text()
        for m in _JS_TOOL.finditer(text):
            name = m.group(2)
            if name.removesuffix("@") not in names:
                out.append(f"{rel}:{_line(text, m.start())} names tool {name!r}, which the server does not have")
        default = text.find("export default {")
        if rel.startswith("pages/") and default >= 0 and not _JS_TOOL.search(text, default):
            out.append(f"{rel}:{_line(text, default)} is a page module that declares no tool")
    return out


def test_the_frontend_modules_keep_their_rules():
    graph, problems = js_imports()
    assert "app.js" in graph and any(r.startswith("lib/") for r in graph) and sum(map(len, graph.values())) > 50, graph
    assert not problems, "imports of no file under static/:\n" + "\n".join(problems)
    cycles = js_import_cycles()
    assert not cycles, "import cycles in static/:\n" + "\n".join(cycles)
    lib = js_lib_violations()
    assert not lib, "lib/ modules importing outside lib/:\n" + "\n".join(lib)
    tools = js_tool_violations()
    assert not tools, "tools the frontend names that the server does not have:\n" + "\n".join(tools)


def test_the_frontend_checker_catches_each_kind_of_violation(tmp_path):
    static = tmp_path / "static"
    for name, text in {
        "app.js": 'import { a } from "./pages/a.js";\nimport "./lib/ok.js";\nimport x from "https://cdn.example/x.js";\n',
        "pages/a.js": 'import { el } from "../lib/ok.js";\nimport {\n  b,\n  c as d,\n} from "./b.js";\n'
                      'export default {\n  tool: "no_such_tool",\n  render() {},\n};\n',
        "pages/b.js": 'import * as c from "./c.js";\nexport const link = { tool: "trace_viewer" };\n',
        "pages/c.js": 'export { a } from "./a.js";\n// import { z } from "./zzz.js"; (a comment, not an import)\n'
                      'const later = () => import("./a.js"); // dynamic: not followed\n',
        "pages/d.js": 'import { a } from "./missing.js";\nexport default { css: [], render() {} };\n',
        "pages/self.js": 'import { me } from "/static/pages/self.js";\nexport default { tool: "memory_profile@" };\n',
        "lib/ok.js": 'export const el = 1;\nexport default { tool: "" };\n',
        "lib/bad.js": 'import { el } from "./ok.js";\nimport page from "../pages/b.js";\nimport shell from "/static/app.js";\n',
    }.items():
        (static / name).parent.mkdir(parents=True, exist_ok=True)
        (static / name).write_text(text)
    graph, problems = js_imports(static)
    assert graph["pages/a.js"] == [(1, "lib/ok.js"), (2, "pages/b.js")], graph
    assert problems == [
        "app.js:3 imports 'https://cdn.example/x.js', not a file under static/",
        "pages/d.js:1 imports './missing.js', not a file under static/",
    ], problems
    assert js_import_cycles(static) == [
        "pages/a.js -> pages/b.js -> pages/c.js -> pages/a.js",
        "pages/self.js -> pages/self.js",
    ], js_import_cycles(static)
    assert js_lib_violations(static) == [
        "lib/bad.js:2 imports pages/b.js (lib/ imports only lib/)",
        "lib/bad.js:3 imports app.js (lib/ imports only lib/)",
    ], js_lib_violations(static)
    assert js_tool_violations(static, known={"trace_viewer@", "memory_profile"}) == [
        "pages/a.js:7 names tool 'no_such_tool', which the server does not have",
        "pages/d.js:2 is a page module that declares no tool",
    ], js_tool_violations(static, known={"trace_viewer@", "memory_profile"})


# ---------------------------------------------------------------------------
# Rendering in one place (issue 30): one Jinja environment, one palette
# ---------------------------------------------------------------------------

FRONTEND = PACKAGE / "frontend"
HEX = re.compile(r"#[0-9a-fA-F]{6}\b")


def _jinja_uses() -> tuple[list[str], list[str]]:
    """(every module importing jinja2, every ``Environment(...)`` call) in the package."""
    importers, calls = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = str(path.relative_to(PACKAGE))
        for node in ast.walk(ast.parse(path.read_text(), filename=where)):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            if any(n.split(".")[0] == "jinja2" for n in names):
                importers.append(where)
            elif isinstance(node, ast.Call):
                f = node.func
                if (f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else None) == "Environment":
                    calls.append(f"{where}:{node.lineno}")
    return importers, calls


def test_one_template_environment():
    """Every HTML page the Python side makes (the dashboard's page, the allocation
    timeline, the report) renders through frontend/render.py's one environment: a second
    one had its own loader, filters and escaping rules (server/pages.py and the report
    each built theirs)."""
    importers, calls = _jinja_uses()
    assert set(importers) == {"frontend/render.py"}, importers
    assert len(calls) == 1 and calls[0].startswith("frontend/render.py:"), calls


def test_the_report_and_the_pages_share_one_palette():
    """The risk and category colours come from static/lib/palette.json, for the page
    (lib/colors.js imports it) and the report (frontend/render.py reads it): no copy of
    them remains in the Python renderer, the templates or the OOM page's script."""
    from profscope.frontend.render import PALETTE

    palette = json.loads((FRONTEND / "static" / "lib" / "palette.json").read_text())
    assert PALETTE["RISK"] == palette["RISK"] and PALETTE["RISK_ZONE"] == palette["RISK_ZONE"]
    assert PALETTE["OOM_CATEGORY"] == {k: palette["P"][name] for k, name in palette["OOM_CATEGORY"].items()}
    colors_js = (FRONTEND / "static" / "lib" / "colors.js").read_text()
    assert 'import palette from "./palette.json" with { type: "json" };' in colors_js
    assert not HEX.findall(colors_js), "colors.js takes every colour from palette.json"
    risk = {c.lower() for group in ("RISK", "RISK_ZONE") for c in palette[group].values()}
    risk |= {c.lower() for c in PALETTE["OOM_CATEGORY"].values()}
    files = [*FRONTEND.glob("*.py"), *(FRONTEND / "templates").glob("*.html"), FRONTEND / "static" / "pages" / "oom_risk.js",
             FRONTEND / "static" / "pages" / "oom_risk.css"]
    copies = {f"{p.relative_to(FRONTEND)}: {c}" for p in files for c in HEX.findall(p.read_text()) if c.lower() in risk}
    assert not copies, copies


def test_the_palette_is_served_as_json(demo_client):
    """A JSON module runs only when it is answered with a JSON MIME type (HTML's "fetch a
    single module script"): otherwise colors.js, and every page importing it, fails."""
    res = demo_client.get("/static/lib/palette.json")
    assert res.status_code == 200 and res.headers["content-type"].split(";")[0] == "application/json"
    assert res.json()["RISK"] == json.loads((FRONTEND / "static" / "lib" / "palette.json").read_text())["RISK"]


# -- No absolute paths (issue 30) ------------------------------------------------------------

# Spelled with "⁄" (U+2044) so that the rule does not count itself.
ABSOLUTE_PATH_ROOTS = tuple(p.replace("⁄", "/") for p in ("⁄work⁄", "⁄home⁄", "⁄root⁄", "⁄Users⁄"))
# Made-up data that only looks like a path: the placeholder user of fake stack frames.
ABSOLUTE_PATH_PLACEHOLDERS = ("⁄home⁄user⁄".replace("⁄", "/"),)
ABSOLUTE_PATH = re.compile(r"(?<![\w.~/-])(?:" + "|".join(re.escape(r) for r in ABSOLUTE_PATH_ROOTS) + ")")


def absolute_path_literals(repo: Path = PACKAGE.parents[1], roots=("src", "tests", "benchmarks", "scripts")) -> list[str]:
    """``file:line: literal`` for each string literal (docstrings and f-string parts
    included, read with ``ast``) of the Python files under ``roots`` that names a folder
    under /work, /home, /root or /Users: where one machine keeps a checkout, a home or
    the shared fixtures. A path there is true on that machine only; the fixtures come
    from the ``shared_fixtures`` fixture (tests) or ``profscope.testing.shared_fixtures``
    (helpers, benchmarks, scripts: ``$PROFSCOPE_SHARED_FIXTURES`` or ../shared/fixtures).
    Not counted: synthetic data under the placeholder ``/home/user/`` (a builder's fake
    stack frames), an f-string part that continues a value (``f"{root}/sub"`` with a root
    folder named like one of them), and
    the generated protobuf modules."""
    found = []
    for root in roots:
        for path in sorted((repo / root).rglob("*.py")):
            if path.name.endswith("_pb2.py") or "__pycache__" in path.parts:
                continue
            tree = ast.parse(path.read_text(), filename=str(path))
            continuations = {id(v) for node in ast.walk(tree) if isinstance(node, ast.JoinedStr)
                             for before, v in zip(node.values, node.values[1:]) if isinstance(before, ast.FormattedValue)}
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Constant) and isinstance(node.value, str)):
                    continue
                for m in ABSOLUTE_PATH.finditer(node.value):
                    if node.value.startswith(ABSOLUTE_PATH_PLACEHOLDERS, m.start()) or (m.start() == 0 and id(node) in continuations):
                        continue
                    found.append(f"{path.relative_to(repo)}:{node.lineno}: {node.value[m.start():m.start() + 60]!r}")
    return found


def test_no_absolute_paths():
    """A count that can only fall, and is 0: tests that typed the shared fixtures'
    absolute path skipped themselves on every other machine (or failed under CI)."""
    assert absolute_path_literals() == []


def test_the_absolute_path_rule_sees_what_it_should(tmp_path):
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "m.py").write_text((
        '"""Reads ⁄root⁄x."""\nA = "⁄work⁄shared⁄fixtures⁄x"\nB = f"{A}⁄home⁄x"\nC = "⁄home⁄user⁄proj⁄m.py"\n'
        'D = f"see ⁄Users⁄me⁄{A}"\nE = "a⁄work⁄b ~⁄home⁄c https:⁄⁄h⁄work⁄d"\n').replace("⁄", "/"))
    found = absolute_path_literals(tmp_path, roots=("src",))
    assert [f.split(": ", 1)[0] for f in found] == ["src/m.py:1", "src/m.py:2", "src/m.py:5"], found


# -- The tool table and the size of functions (issue 30) --------------------------------
# Each rule is a count that can only fall: a new tool is a row of app/tool_table.py, so
# the server names none; a long function may only shrink, and leaves the list when it
# is short enough.

# Tool names (and XProf's tags) the server may spell out as string literals.
MAX_SERVER_TOOL_LITERALS = 0


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the docstring constants of a module, its classes and functions."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
                out.add(id(first.value))
    return out


def tool_name_literals(root: Path = PACKAGE / "server") -> list[str]:
    """``file:line 'name'`` for every string literal (docstrings aside) in ``root`` that is
    a tool's name, alias or bare name, or one of XProf's tool tags."""
    from profscope.app import tool_table

    names = {n for t in tool_table.TOOLS for n in (t.name, t.name.rstrip("@"), *t.aliases)}
    names |= set(tool_table.XPROF_TOOL_ORDER) | tool_table.XPROF_ALL_HOSTS_ONLY | tool_table.XPROF_ALL_HOSTS_SUPPORTED
    found = []
    for path in sorted(root.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        skip = _docstrings(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip and node.value in names:
                found.append(f"{path.relative_to(root.parent)}:{node.lineno} {node.value!r}")
    return found


def test_the_server_names_no_tool():
    """The server derives every tool-specific choice from the tool table (which query
    type, how it answers, whether XProf lists it): it spells out no tool name."""
    found = tool_name_literals()
    assert len(found) <= MAX_SERVER_TOOL_LITERALS, "\n".join(found)


def test_the_tool_literal_count_sees_a_tool_name(tmp_path):
    (tmp_path / "server").mkdir()
    (tmp_path / "server" / "route.py").write_text(
        '"""Serves memory_viewer."""\nif tag == "memory_viewer":\n    pass\nX = {"trace_viewer", "kernel_stats", "other"}\n')
    assert tool_name_literals(tmp_path / "server") == [
        "server/route.py:2 'memory_viewer'", "server/route.py:4 'trace_viewer'", "server/route.py:4 'kernel_stats'"]


# Functions (methods, nested functions) over MAX_FUNCTION_LINES lines: today's, with
# their length; each may only get shorter, and one that fits leaves the list.
MAX_FUNCTION_LINES = 100
LONG_FUNCTIONS = {
    "formats/buffer_assignment_text.py:parse_buffer_assignment": 266,
    "formats/chrome_trace.py:memory_events": 223,
    "formats/chrome_trace.py:trace_columns": 265,
    "formats/safe_pickle.py:load": 371,
    "formats/snapshot_pickle.py:_bulk": 129,
    "formats/xplane_allocator.py:_build": 106,
    "formats/xplane_steps.py:run": 162,
    "formats/xplane_trace.py:_read": 114,
    "testing/allocator_xplane.py:bulk_xspace": 103,
    "testing/fuzz/reader_worker.py:steps_for": 106,
    "tools/memory_profile_snapshot.py:overview": 106,
    "tools/memory_profile_snapshot.py:__init__": 136,
    "tools/memory_profile_torch.py:_device_payload": 164,
    "tools/memory_profile_torch.py:_leak_hints": 127,
    "tools/memory_viewer.py:_simulate_py": 156,
    "tools/memory_viewer.py:from_hlo": 198,
    "tools/oom_risk.py:findings": 106,
    "tools/oom_risk.py:assess": 136,
    "tools/trace_index.py:finish": 133,
}


def long_functions(root: Path = PACKAGE) -> dict[str, int]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        if path.name.endswith("_pb2.py"):
            continue  # generated (scripts/gen_protos.py)
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines = node.end_lineno - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    out[f"{path.relative_to(root).as_posix()}:{node.name}"] = lines
    return out


def test_long_functions_only_shrink():
    found = long_functions()
    new = {k: v for k, v in found.items() if k not in LONG_FUNCTIONS}
    grown = {k: (LONG_FUNCTIONS[k], v) for k, v in found.items() if k in LONG_FUNCTIONS and v > LONG_FUNCTIONS[k]}
    gone = sorted(set(LONG_FUNCTIONS) - set(found))
    assert not new, f"functions over {MAX_FUNCTION_LINES} lines: split them: {new}"
    assert not grown, f"long functions that grew (was, now): {grown}"
    assert not gone, f"these fit in {MAX_FUNCTION_LINES} lines now: take them off LONG_FUNCTIONS: {gone}"

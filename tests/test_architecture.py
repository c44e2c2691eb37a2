"""The layer rules, as an explicit allow-list of layer-to-layer imports (Perfetto's
tools/check_imports.py is the model): data flows storage -> formats -> model -> tools ->
app -> server -> frontend, with the cache beside the app.

* the model is the shared language: formats produce its types, tools consume only them
  (a tool knows no file format, no cache, no HTTP);
* the app (the workspace) is the only layer that puts readers, tools and the cache
  together, and knows no HTTP;
* the server calls only the app (and reads the model's types it hands back);
* ``errors`` (the one error family) and ``forksafe`` (what a forked conversion worker
  renews) are shared by every layer; only the CLI, the entry point, imports the server.

Every import counts: top-level, inside functions (lazy), relative, and the app's
``lazy.module("...")`` stand-ins. The table in
docs/architecture.md is checked against ALLOWED below.
"""

from __future__ import annotations

import ast
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
    "server": {"app", "model"},
    "frontend": {"app", "model"},
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
    """docs/architecture.md's allow-list table lists, per layer, exactly ALLOWED."""
    rows = re.findall(r"^\| `(\w+)` \| ([^|]*) \|", DOCS.read_text(), flags=re.M)
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

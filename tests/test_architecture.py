"""Data flows one way: storage -> formats -> model -> tools -> cache -> server -> frontend.

A module may import from its own layer and the layers before it, never after it; only the
CLI (the entry point) imports the server. ``errors`` and ``forksafe`` (what a forked
conversion worker renews) are shared by every layer.
"""

from __future__ import annotations

import ast
from pathlib import Path

import profscope

PACKAGE = Path(profscope.__file__).parent
LAYERS = ["errors", "forksafe", "storage", "formats", "model", "tools", "cache", "server", "frontend", "testing"]
ENTRY_POINTS = {"cli", "__main__"}


def _layer(module: str) -> str:
    parts = module.split(".")
    assert parts[0] == "profscope"
    return parts[1] if len(parts) > 1 else ""


def _imports(path: Path):
    tree = ast.parse(path.read_text(), filename=str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def test_every_module_sits_in_a_known_layer():
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        top = rel.parts[0].removesuffix(".py")
        assert top in LAYERS or top in ENTRY_POINTS or top == "__init__", f"{rel}: not in a layer"


def test_imports_only_flow_downstream():
    violations = []
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE)
        own = rel.parts[0].removesuffix(".py")
        if own in ENTRY_POINTS or own == "__init__":
            continue
        for lineno, module in _imports(path):
            if not module.startswith("profscope.") and module != "profscope":
                continue
            target = _layer(module)
            if target in ("", "__init__"):
                continue  # the package root only holds __version__
            if target in ENTRY_POINTS and own != "server":
                violations.append(f"{rel}:{lineno} imports the entry point {module}")
            elif target in LAYERS and LAYERS.index(target) > LAYERS.index(own):
                violations.append(f"{rel}:{lineno} ({own}) imports {module} ({target})")
    assert not violations, "imports against the flow:\n" + "\n".join(violations)


def test_the_checker_catches_an_upstream_import(tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("from profscope.server import create_app\nimport profscope.cache.store\n")
    found = [m for _, m in _imports(bad)]
    assert found == ["profscope.server", "profscope.cache.store"]
    assert LAYERS.index(_layer(found[0])) > LAYERS.index("formats")

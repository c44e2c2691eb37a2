"""The wheel is the product (issue 30): every other test runs on the editable install,
where the package's files are the checkout's, so a file the wheel leaves out is seen by
none of them. (``frontend/static/*`` in the package data kept that folder's files only:
a wheel held 7 of the 34 frontend files, and the page's first import answered 404.)

Here the wheel is built from a copy of the checkout (no build isolation, no index:
nothing is downloaded while tests run) and installed, without its dependencies and
without an index, into a fresh venv whose ``.pth`` names this venv's site-packages for
the runtime dependencies. A path line in a ``.pth`` adds that folder to ``sys.path``
without running the ``.pth`` files in it, so the editable install's finder is never
loaded: ``profscope`` is the wheel's (checked). Then ``profscope serve --demo`` from that
venv answers the page, every module and stylesheet the page loads (the import graph
walked from ``/``), and the data API on a demo run.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path
from urllib.parse import quote, urljoin, urlparse

import httpx
import pytest

from tests.fixtures.paths import REPO

# What the sdist of a build needs: the package sources and the build's own files.
BUILD_FILES = ("setup.py", "pyproject.toml", "README.md", "LICENSE")
NOT_SOURCES = shutil.ignore_patterns("__pycache__", "*.pyc", "*.so", "*.egg-info", "build")
PIP_ENV = {"PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1"}


def _env(**extra) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP")}
    env.update(PIP_ENV, PYTHONNOUSERSITE="1", **extra)
    return env


def _run(cmd, **kw) -> subprocess.CompletedProcess:
    done = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=_env(), **kw)
    assert done.returncode == 0, f"{' '.join(map(str, cmd))}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@pytest.fixture(scope="module")
def source(tmp_path_factory) -> Path:
    """A copy of the checkout's package sources: the build writes build/ and *.egg-info
    there, never in the checkout other processes are using."""
    dest = tmp_path_factory.mktemp("source")
    for name in BUILD_FILES:
        shutil.copy2(REPO / name, dest / name)
    shutil.copytree(REPO / "src", dest / "src", ignore=NOT_SOURCES)
    return dest


@pytest.fixture(scope="module")
def wheel(source, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-q",
          ".", "-w", out], cwd=source, timeout=600)
    (whl,) = out.glob("profscope-*.whl")
    return whl


@pytest.fixture(scope="module")
def fresh_venv(wheel, tmp_path_factory) -> Path:
    """A new venv holding the wheel (no editable install), this venv's site-packages
    behind it for the runtime dependencies."""
    venv = tmp_path_factory.mktemp("venv") / "v"
    _run([sys.executable, "-m", "venv", "--without-pip", venv], timeout=120)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "--no-index", "-q", wheel], timeout=300)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "zz_project_dependencies.pth").write_text("".join(f"{p}\n" for p in sorted(ours)))
    return venv


def test_the_wheel_holds_every_frontend_and_demo_file(wheel, source):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = source / "src" / "profscope"
    for folder in ("frontend", "demo"):
        files = sorted(p.relative_to(package.parent).as_posix() for p in (package / folder).rglob("*") if p.is_file())
        assert files, folder
        missing = [f for f in files if f not in names]
        assert not missing, f"{len(missing)} of {len(files)} files under {folder}/ are not in the wheel: {missing[:10]}"
    # the native decoders are built into it (where a compiler is: the build skips them elsewhere)
    if shutil.which("cc") or shutil.which("gcc"):
        assert any(re.match(r"profscope/formats/_xplane_scan\..*\.so$", n) for n in names), sorted(names)[:20]


def test_the_fresh_venv_imports_profscope_from_the_wheel(fresh_venv):
    code = "import profscope, profscope.cli, fastapi; print(profscope.__file__)"
    where = Path(_run([fresh_venv / "bin" / "python", "-c", code], cwd=fresh_venv).stdout.strip())
    assert where.is_relative_to(fresh_venv), f"profscope came from {where}, not the wheel in {fresh_venv}"


# -- the demo served from the wheel ------------------------------------------------------

IMPORT = re.compile(r"""(?:^|[;\s}])(?:import|export)\s[^;'"`]*?\bfrom\s*["']([^"']+)["']"""  # import x from "y"
                    r"""|(?:^|[;\s])import\s*["']([^"']+)["']"""  # import "y"
                    r"""|\bimport\(\s*["']([^"']+)["']\s*\)""", re.M)  # import("y")
PAGE_CSS = re.compile(r"""\bcss:\s*\[([^\]]*)\]""")  # a page's stylesheets, app.js loads /static/<name>
HTML_REF = re.compile(r"""<(?:script|link)\b[^>]*?\b(?:src|href)=["']([^"']+)["']""", re.I)
CSS_REF = re.compile(r"""@import\s+(?:url\()?["']?([^"')\s;]+)|url\(\s*["']?([^"')]+)""")


def _references(url: str, ctype: str, text: str) -> list[str]:
    """The same-origin URLs a fetched page, module or stylesheet makes the browser load."""
    refs = []
    if "html" in ctype:
        refs = HTML_REF.findall(text)
    elif "javascript" in ctype:
        # comments can name modules too: drop them first (no string here holds "//" or "/*")
        code = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
        code = re.sub(r"(?m)^\s*//.*$", "", code)
        refs = [a or b or c for a, b, c in IMPORT.findall(code)]
        for group in PAGE_CSS.findall(code):
            refs += ["/static/" + name for name in re.findall(r"""["']([^"']+)["']""", group)]
    elif "css" in ctype:
        refs = [a or b for a, b in CSS_REF.findall(text)]
    out = []
    for ref in refs:
        if ref.startswith("data:"):
            continue
        full = urljoin(url, ref)
        if urlparse(full).netloc == urlparse(url).netloc:
            out.append(full.split("#")[0])
    return out


@pytest.fixture(scope="module")
def wheel_server(fresh_venv, tmp_path_factory):
    """``profscope serve --demo`` run by the fresh venv's console script."""
    work = tmp_path_factory.mktemp("serve")
    cmd = [str(fresh_venv / "bin" / "profscope"), "serve", "--demo", "--port", "0", "--no-capture",
           "--cache-dir", str(work / "cache")]
    proc = subprocess.Popen(cmd, cwd=work, env=_env(HOME=str(work)), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"serving at (http://\S+?)/?\s", line)
            if m:
                break
        else:
            raise AssertionError("profscope serve (from the wheel) did not start:\n" + "".join(lines))
        yield m.group(1)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait(20)
        except ProcessLookupError:
            pass
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)


def test_the_demo_served_from_the_wheel_loads_every_module(wheel_server):
    seen: dict[str, int] = {}
    todo = [wheel_server + "/"]
    with httpx.Client(timeout=120) as c:
        while todo:
            url = todo.pop()
            if url in seen:
                continue
            r = c.get(url)
            seen[url] = r.status_code
            if r.status_code == 200:
                todo += _references(url, r.headers.get("content-type", ""), r.text)
    bad = {u: s for u, s in seen.items() if s != 200}
    assert not bad, f"{len(bad)} of {len(seen)} files the page loads did not answer 200: {bad}"
    paths = {urlparse(u).path for u in seen}
    # the walk reached the shell, its libraries (lib/ was missing from the wheel), the
    # pages and their stylesheets: every .js and .css file in static/
    for path in ("/static/app.js", "/static/app.css", "/static/lib/dom.js", "/static/pages/trace_viewer.js",
                 "/static/pages/trace_viewer.css", "/static/vendor/plotly.min.js"):
        assert path in paths, sorted(paths)
    static = REPO / "src" / "profscope" / "frontend" / "static"
    files = {"/static/" + p.relative_to(static).as_posix() for p in static.rglob("*") if p.suffix in (".js", ".css")}
    assert not files - paths, f"files in static/ the page never loads (dead, or the walk misses a way in): {sorted(files - paths)}"


def test_the_data_api_answers_from_the_wheel(wheel_server):
    with httpx.Client(timeout=300) as c:
        runs = c.get(wheel_server + "/data/plugin/profile/runs")
        assert runs.status_code == 200 and runs.json(), runs.text[:300]
        catalog = c.get(wheel_server + "/api/runs").json()["runs"]
        run = next(r["name"] for r in catalog if r["kind"] == "profile")
        q = quote(run, safe="")
        tools = c.get(f"{wheel_server}/data/plugin/profile/run_tools?run={q}")
        assert tools.status_code == 200 and "memory_viewer" in tools.json(), tools.text[:300]
        modules = c.get(f"{wheel_server}/data/plugin/profile/module_list?run={q}")
        assert modules.status_code == 200, modules.text[:300]
        module = modules.text.split(",")[0]
        data = c.get(f"{wheel_server}/data/plugin/profile/data?run={q}&tag=memory_viewer"
                     f"&module_name={quote(module, safe='')}&memory_space=0")
        assert data.status_code == 200, data.text[:300]
        assert json.loads(data.content)

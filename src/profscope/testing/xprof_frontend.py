"""XProf 2.24.2's own web frontend, as a client of profscope in tests.

``fetch()`` (``python -m profscope.testing.xprof_frontend fetch``, run by ``make`` before
pytest starts) downloads the pinned ``xprof==2.24.2`` wheel from PyPI into a cache folder
that persists between runs and checks its sha256 (``WHEEL_SHA256``). ``xprof_static()``,
what the tests call, never touches the network: it unpacks only ``xprof/static/*`` (the
Angular app and trace viewer that XProf's server hands to browsers) from the wheel
``fetch`` left, and raises :class:`FrontendUnavailable` (saying to run ``make``) when it
is not there. XProf is never a dependency of profscope: nothing of it is imported or
run, only its static files are served to a browser.

``xprof_frontend_app(profscope_app, static_dir)`` is the ASGI app a test serves: the
static files where XProf's server (``xprof/server.py``, ``make_wsgi_app``, and
``profile_plugin.py``'s ``*_ROUTE`` constants) puts them, and profscope for the data API.

The cache folder is ``$PROFSCOPE_TEST_CACHE/xprof-frontend`` when that is set (the
Makefile and the test suite set it to ``<repo>/.cache``, git-ignored), else
``$XDG_CACHE_HOME/profscope-testing/xprof-frontend`` (``~/.cache/...``).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

from starlette.responses import FileResponse, PlainTextResponse

__all__ = ["XPROF_VERSION", "FrontendUnavailable", "cache_dir", "fetch", "xprof_static", "xprof_frontend_app"]

XPROF_VERSION = "2.24.2"
# The wheel is platform-tagged although its static files are the same everywhere: ask
# for the one Linux x86_64 wheel so every machine gets the bytes pinned here.
WHEEL_PLATFORM = "manylinux_2_27_x86_64"
WHEEL_NAME = f"xprof-{XPROF_VERSION}-py3-none-{WHEEL_PLATFORM}.whl"
WHEEL_SHA256 = "14342674c53cede2a4c17c4e2327a9e749f3971795c24754e0e1b2a638935e55"

# profile_plugin.py's static routes (INDEX_HTML_ROUTE, BUNDLE_JS_ROUTE, ...): the only
# files XProf's server hands out, each at /<name> and /data/plugin/profile/<name>.
STATIC_FILES = (
    "index.html", "index.js", "bundle.js", "runtime.js", "zone.js", "styles.css",
    "materialicons.woff2", "material_symbols_outlined.woff2",
    "trace_viewer_index.html", "trace_viewer_index.js", "trace_viewer_v2.js", "trace_viewer_v2.wasm",
)
MEDIA_TYPES = {".html": "text/html", ".js": "application/javascript", ".css": "text/css",
               ".wasm": "application/wasm", ".woff2": "font/woff2"}
PREFIX = "/data/plugin/profile"
# The data routes of profile_plugin.py's get_plugin_apps(); served by profscope (or its
# 404 for the ones profscope does not have, e.g. capture_profile).
DATA_ROUTES = frozenset({"data", "data_csv", "version", "runs", "run_tools", "hosts", "module_list",
                         "capture_profile", "config", "generate_cache"})


class FrontendUnavailable(RuntimeError):
    """The wheel is not in the cache folder (``make`` fetches it), could not be
    downloaded, or is not the pinned one."""


def cache_dir() -> Path:
    root = os.environ.get("PROFSCOPE_TEST_CACHE")
    if root:
        return Path(root) / "xprof-frontend"
    xdg = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(xdg) / "profscope-testing" / "xprof-frontend"


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _check(wheel: Path) -> None:
    digest = _sha256(wheel)
    if digest != WHEEL_SHA256:
        wheel.unlink()  # a truncated or different file: fetch it again next time
        raise FrontendUnavailable(f"{wheel} has sha256 {digest}, expected {WHEEL_SHA256} (removed: `make downloads` fetches it again)")


def fetch(root: Path | None = None) -> Path:
    """Download the pinned wheel into the cache folder unless it is there, check its
    sha256 and unpack its static files; answer the static folder. The only function
    here that uses the network: ``make`` runs it before the tests, never a test."""
    root = root or cache_dir()
    wheel = root / WHEEL_NAME
    if not wheel.is_file():
        root.mkdir(parents=True, exist_ok=True)
        cmd = [sys.executable, "-m", "pip", "download", f"xprof=={XPROF_VERSION}", "--no-deps",
               "--only-binary=:all:", "--platform", WHEEL_PLATFORM, "--timeout", "30", "--retries", "3",
               "--disable-pip-version-check", "-d", str(root)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        except subprocess.TimeoutExpired as e:
            raise FrontendUnavailable(f"pip download of xprof=={XPROF_VERSION} timed out") from e
        if done.returncode or not wheel.is_file():
            tail = (done.stdout + done.stderr).strip().splitlines()[-3:]
            raise FrontendUnavailable(f"pip download of xprof=={XPROF_VERSION} failed: {' | '.join(tail)}")
    _check(wheel)
    return xprof_static(root)


def xprof_static(root: Path | None = None) -> Path:
    """The folder holding XProf 2.24.2's static files, unpacked from the wheel that
    :func:`fetch` left in the cache folder. Never downloads: without the wheel it raises
    :class:`FrontendUnavailable` saying to run ``make``."""
    root = root or cache_dir()
    static = root / f"static-{XPROF_VERSION}"
    if all((static / name).is_file() for name in STATIC_FILES):
        return static
    wheel = root / WHEEL_NAME
    if not wheel.is_file():
        raise FrontendUnavailable(
            f"XProf {XPROF_VERSION}'s wheel is not at {wheel}: run `make downloads` (`make test` does; it is "
            f"`python -m profscope.testing.xprof_frontend fetch`): tests never download it")
    _check(wheel)
    # Unpack into a temporary folder and rename it, so an interrupted run never leaves a
    # half-written folder that the check above would take for complete.
    partial = root / f"static-{XPROF_VERSION}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    with zipfile.ZipFile(wheel) as z:
        for name in STATIC_FILES:
            (partial / name).write_bytes(z.read(f"xprof/static/{name}"))
    if all((static / name).is_file() for name in STATIC_FILES):
        # another test process (pytest-xdist's other worker) unpacked it meanwhile
        shutil.rmtree(partial, ignore_errors=True)
        return static
    shutil.rmtree(static, ignore_errors=True)  # an older layout's leftover
    try:
        partial.rename(static)
    except OSError:  # the other process renamed its copy first: the same files
        shutil.rmtree(partial, ignore_errors=True)
    return static


def xprof_frontend_app(profscope_app, static_dir: Path):
    """One origin for XProf's frontend and profscope's API, routed like ``make_wsgi_app``:

    - ``/`` and unknown dot-less paths under ``/data/plugin/profile`` (the Angular app's
      own routes, e.g. ``/data/plugin/profile/memory_viewer`` on reload): ``index.html``;
    - a static file name at ``/`` or under the prefix: that file (index.html sets
      ``<base href="/data/plugin/profile/">``, so the app asks for them under the prefix);
    - a data route under the prefix, or profscope's own ``/api/...``: profscope.
    Everything else is a 404, as from XProf.
    """
    static_dir = Path(static_dir)

    def static(name: str):
        return FileResponse(static_dir / name, media_type=MEDIA_TYPES[Path(name).suffix])

    async def app(scope, receive, send):
        if scope["type"] != "http":  # serve it with lifespan="off": profscope starts nothing
            return
        path = scope["path"]
        under_prefix = path == PREFIX or path.startswith(PREFIX + "/")
        rest = path[len(PREFIX):] if under_prefix else path
        if rest != "/" and rest.endswith("/"):
            rest = rest[:-1]
        name = rest.lstrip("/")
        # profscope's own API too (XProf's page never asks for it): the tests compare
        # what XProf prints with what profscope computes there.
        if (under_prefix and name in DATA_ROUTES) or path.startswith("/api/"):
            await profscope_app(scope, receive, send)
            return
        if name in STATIC_FILES:
            response = static(name)
        elif name == "" or (under_prefix and "." not in name.rsplit("/", 1)[-1]):
            response = static("index.html")
        else:
            response = PlainTextResponse("Not Found", status_code=404)
        await response(scope, receive, send)

    return app


def main(argv: list[str] | None = None) -> int:
    """``python -m profscope.testing.xprof_frontend fetch``: what ``make`` runs."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["fetch"]:
        print("usage: python -m profscope.testing.xprof_frontend fetch", file=sys.stderr)
        return 2
    try:
        static = fetch()
    except FrontendUnavailable as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"XProf {XPROF_VERSION} static files (sha256 {WHEEL_SHA256[:12]}...): {static}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

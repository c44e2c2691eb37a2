"""``profscope serve``'s first answers before FastAPI is imported (server/quick_start.py):
the same answers as the app's routes, every other request handed to uvicorn unread."""

from __future__ import annotations

import gzip
import http.client
import json
import socket
import subprocess
import sys
import threading
import time

import pytest
import uvicorn
from fastapi.testclient import TestClient

from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.server import Server, create_app
from profscope.server.guard import SECURITY_HEADERS, Security
from profscope.server.quick_start import QuickStart
from profscope.storage import LogDir

ROUTES = ("/", "/?run=x&tool=overview", "/api/runs", "/data/plugin/profile/runs")


def _bound() -> socket.socket:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    return sock


def _get(conn: http.client.HTTPConnection, path: str, **headers):
    conn.request("GET", path, headers=headers)
    resp = conn.getresponse()
    return resp, resp.read()


@pytest.fixture
def quick(demo_logdir, tmp_path):
    sock = _bound()
    port = sock.getsockname()[1]
    logdir = LogDir(str(demo_logdir))
    security = Security.for_bind("127.0.0.1", port)
    q = QuickStart(sock, logdir, security).start()
    assert q.warm.wait(90)
    ws = Workspace(logdir, DiskCache(str(tmp_path / "cache")))
    yield q, ws, security, port
    q.stop()
    sock.close()


def test_the_first_routes_answer_as_the_app_does(quick):
    q, ws, security, port = quick
    # Starlette's TestClient sends Host: testserver, which the CLI's policy refuses
    app = TestClient(create_app(ws, Security(allow_hosts=("testserver",), port=port)))
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
    for path in ROUTES:
        resp, body = _get(conn, path, **{"Accept-Encoding": "identity"})  # one kept-alive connection
        want = app.get(path, headers={"Accept-Encoding": "identity"})
        assert (resp.status, resp.getheader("content-type")) == (want.status_code, want.headers["content-type"]), path
        assert body == want.content, path
        for name, value in SECURITY_HEADERS:
            assert resp.getheader(name.decode()) == value.decode() == want.headers[name.decode()], (path, name)
    assert q.answered == len(ROUTES)
    assert json.loads(body) == [r.name for r in ws.runs()] and body != b"[]"
    # gzip as the app's GZipMiddleware: the page is over its 2 KiB minimum
    resp, body = _get(conn, "/", **{"Accept-Encoding": "gzip"})
    assert resp.getheader("content-encoding") == "gzip" and resp.getheader("vary") == "Accept-Encoding"
    assert gzip.decompress(body) == app.get("/").content
    assert q.answered == len(ROUTES) + 1
    # Both deflate at level 1, what the gzip header's XFL byte says (RFC 1952: 4, the
    # fastest): a busy timeline window took 58 ms of CPU at level 5 against 19 at 1
    with app.stream("GET", "/", headers={"Accept-Encoding": "gzip"}) as raw:
        app_body = b"".join(raw.iter_raw())
    assert raw.headers["content-encoding"] == "gzip" and (body[8], app_body[8]) == (4, 4)


def test_every_other_request_waits_for_uvicorn_and_gets_the_apps_answer(quick):
    q, ws, security, port = quick
    kept = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
    assert _get(kept, "/api/runs")[0].status == 200  # answered here, the connection kept alive
    answers: dict[str, tuple[int, bytes]] = {}

    def ask(name, path, **headers):
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
        resp, body = _get(conn, path, **headers)
        answers[name] = (resp.status, body)

    asks = [threading.Thread(target=ask, args=args, kwargs=kw) for args, kw in (
        (("static", "/static/app.js"), {}),  # not a first route
        (("rebinding", "/"), {"Host": "evil.example:80"}),  # the guard's refusal: the app's answer
        (("tag", "/?tag=memory_viewer"), {}),  # the tool table's redirect
        (("session_path", "/data/plugin/profile/runs?session_path=../../etc"), {}),
    )]
    for t in asks:
        t.start()
    time.sleep(0.5)
    assert not answers and q.answered == 1  # held, unread, until uvicorn serves
    config = uvicorn.Config(create_app(ws, security), log_level="warning", lifespan="off")
    server = Server(config, ws, q)
    serving = threading.Thread(target=server.run, kwargs={"sockets": [q.sock]})
    serving.start()
    try:
        for t in asks:
            t.join(90)
        assert answers["static"][0] == 200 and b"import" in answers["static"][1]
        assert answers["rebinding"][0] == 403 and json.loads(answers["rebinding"][1])["status"] == 403
        assert answers["tag"][0] == 302
        assert answers["session_path"][0] in (400, 403, 404) and json.loads(answers["session_path"][1])["ok"] is False
        # the kept-alive connection went to uvicorn too: its next request is the app's
        resp, body = _get(kept, "/api/run?run=" + ws.runs()[0].name)
        assert resp.status == 200 and json.loads(body)["name"] == ws.runs()[0].name
        assert q.answered == 1
    finally:
        server.should_exit = True
        serving.join(90)


def test_the_first_answers_import_no_fastapi_nor_readers(demo_logdir):
    # nor the tool table (the page reads app/tool_pages.py): its rows import the app's
    # producers, a third of the page's CPU before (docs/performance.md, issue 40)
    code = f"""
import http.client, socket, sys
from profscope.server.guard import Security
from profscope.server.quick_start import QuickStart
from profscope.storage import LogDir
sock = socket.socket(); sock.bind(("127.0.0.1", 0)); sock.listen(8)
port = sock.getsockname()[1]
q = QuickStart(sock, LogDir({str(demo_logdir)!r}), Security.for_bind("127.0.0.1", port)).start()
conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
for path in ("/", "/api/runs", "/data/plugin/profile/runs"):
    conn.request("GET", path); resp = conn.getresponse(); resp.read()
    assert resp.status == 200, path
assert q.answered == 3
print(sorted(m for m in ("fastapi", "starlette", "uvicorn", "pydantic", "numpy", "google.protobuf", "fsspec",
                         "profscope.app.tool_table", "profscope.app.summary", "profscope.app.traces")
             if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=90).stdout
    assert out.strip() == "[]"


def test_the_quick_run_lists_hold_the_captured_runs_as_the_apps_do(demo_logdir, tmp_path):
    """``profscope serve`` mounts its capture folder into the log directory (captures/):
    the quick start lists the runs there too, as the workspace does (app/run_list.py)."""
    import shutil

    from profscope.cli import _logdir, _quick_start, _workspace, build_parser

    session = tmp_path / "capture" / "plugins" / "profile" / "2026_12_06_19_00_00"
    session.mkdir(parents=True)
    shutil.copy(next(demo_logdir.rglob("*.xplane.pb")), session / "localhost_9999.xplane.pb")
    args = build_parser().parse_args(["serve", str(demo_logdir), "--port", "0", "--cache-dir", str(tmp_path / "cache"),
                                      "--capture-dir", str(tmp_path / "capture")])
    args.capture_unsafe = False  # as cmd_serve sets it on loopback
    sock = _bound()
    port = sock.getsockname()[1]
    security = Security.for_bind("127.0.0.1", port)
    logdir = _logdir(args)
    q = _quick_start(args, logdir, sock, security)
    try:
        assert q.warm.wait(90)
        app = TestClient(create_app(_workspace(args, logdir), Security(allow_hosts=("testserver",), port=port)))
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=90)
        for path in ("/api/runs", "/data/plugin/profile/runs"):
            resp, body = _get(conn, path)
            assert body == app.get(path).content, path
            assert b"captures/" in body, path
        assert q.answered == 2
        # a request asking to close gets Connection: close, and the connection ends
        resp, body = _get(conn, "/data/plugin/profile/runs", Connection="close")
        assert resp.getheader("connection") == "close" and json.loads(body)
        assert q.answered == 3
    finally:
        q.stop()
        sock.close()


def test_descriptors_over_1023_are_answered(demo_logdir, tmp_path):
    """A process holding over 1,023 descriptors (a test run's did): select() refuses such a
    descriptor and the thread died, holding its connections for ever; the selector
    (epoll) answers them."""
    import os
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < 1200:
        pytest.skip(f"the descriptor limit is {hard}")
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, 1200), hard))
    null = os.open(os.devnull, os.O_RDONLY)
    filler = [os.dup(null) for _ in range(1100)]  # the next socket's descriptor is over 1023
    try:
        sock = _bound()
        assert sock.fileno() > 1023
        port = sock.getsockname()[1]
        q = QuickStart(sock, LogDir(str(demo_logdir)), Security.for_bind("127.0.0.1", port)).start()
        try:
            assert q.warm.wait(90)
            resp, body = _get(http.client.HTTPConnection("127.0.0.1", port, timeout=90), "/api/runs")
            assert resp.status == 200 and json.loads(body)["runs"] and q.answered == 1
        finally:
            q.stop()
            sock.close()
    finally:
        for fd in filler:
            os.close(fd)
        os.close(null)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

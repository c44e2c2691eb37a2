"""The server's defences (server/guard.py, server/params.py; docs/security.md): the Host
and Origin checks against DNS rebinding and cross-site requests, the token when bound
beyond loopback (through a real ``profscope serve --host 0.0.0.0`` too), the security
headers on every kind of answer, URL and query limits, ``Connection: close`` after a
5xx, and a fuzz of every route's query parameters with hostile values: never a 500,
always the one error shape."""

from __future__ import annotations

import http.client
import json
import re
import socket
import urllib.error
import urllib.request
from contextlib import contextmanager
from urllib.parse import quote, urlparse

import pytest
from fastapi.testclient import TestClient

from profscope.cache.store import DiskCache
from profscope.app.workspace import Workspace
from profscope.errors import CacheFull
from profscope.server import create_app
from profscope.server.guard import CSP, H11_MAX_HEAD_BYTES, MAX_VALUE_BYTES, Security
from profscope.storage import LogDir
from profscope.testing.local_server import serve_in_thread
from tests.conftest import profscope_server

PROFILE = "mlp/2026_11_29_19_47_08"
SNAPSHOT = "torch_snapshots/flexgen_oom.pickle"
TRACE = "torch/mlp_train.pt.trace.json.gz"
DUMP = "dumps/mlp"
MODULE = "jit_train_step(14)"
HEADERS = ("content-security-policy", "x-content-type-options", "referrer-policy", "x-frame-options")


def _shape(res, status: int) -> dict:
    """The one error shape, with ``status`` in the body and on the answer."""
    assert res.status_code == status, (res.status_code, res.text[:300])
    body = res.json()
    assert set(body) == {"ok", "status", "error", "file"}, body
    assert body["ok"] is False and body["status"] == status and body["file"] is None and body["error"]
    return body


@pytest.fixture
def client_for(tmp_path, demo_logdir):
    """``client_for(security, host)``: a TestClient whose requests say ``Host: host``."""
    ws = Workspace(LogDir(str(demo_logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))

    def make(security: Security, host: str = "127.0.0.1:8791") -> TestClient:
        return TestClient(create_app(ws, security), base_url=f"http://{host}", follow_redirects=False)

    return make


# -- Host ----------------------------------------------------------------------------------

LOOPBACK = Security(bind_host="127.0.0.1", port=8791)


@pytest.mark.parametrize("host", ["127.0.0.1:8791", "127.0.0.1", "localhost:8791", "LOCALHOST", "localhost.",
                                  "profiles.localhost:8791", "127.7.8.9:1", "[::1]:8791", "[::1]",
                                  "[::ffff:127.0.0.1]:8791"])
def test_loopback_names_and_addresses_pass(client_for, host):
    assert client_for(LOOPBACK).get("/api/runs", headers={"host": host}).status_code == 200


@pytest.mark.parametrize("host", ["evil.example", "evil.example:8791", "127.0.0.1.evil.example",
                                  "localhost.evil.example", "localhostevil", "10.0.0.5:8791", "0.0.0.0:8791",
                                  "[::2]:8791", "testserver"])
def test_other_names_are_refused_as_dns_rebinding(client_for, host):
    body = _shape(client_for(LOOPBACK).get("/api/runs", headers={"host": host}), 403)
    assert "--allow-host" in body["error"]


@pytest.mark.parametrize("host", ["", "[::1", "a:b:c", "127.0.0.1:port", "user@127.0.0.1", "\xe9.localhost".encode("latin-1")])
def test_malformed_host_is_a_400(client_for, host):
    _shape(client_for(LOOPBACK).get("/api/runs", headers={"host": host}), 400)


def test_allow_host_names_and_patterns(client_for):
    sec = Security(bind_host="127.0.0.1", allow_hosts=("profiles.example.com", "*.corp.example"))
    client = client_for(sec)
    for host in ("profiles.example.com", "profiles.example.com:443", "a.corp.example", "b.a.corp.example:80"):
        assert client.get("/api/runs", headers={"host": host}).status_code == 200, host
    for host in ("corp.example", "example.com", "profiles.example.com.evil.example"):
        _shape(client.get("/api/runs", headers={"host": host}), 403)


def test_the_bind_host_passes_and_a_wildcard_bind_takes_addresses_not_names(client_for):
    named = client_for(Security.for_bind("10.0.0.5", 8791))
    assert named.get("/api/runs", headers={"host": "10.0.0.5:8791"}).status_code == 200
    _shape(named.get("/api/runs", headers={"host": "10.0.0.6:8791"}), 403)
    wildcard = client_for(Security.for_bind("0.0.0.0", 8791))
    for host in ("10.1.2.3:8791", "[fe80::1]:8791", socket.gethostname().lower()):
        assert wildcard.get("/api/runs", headers={"host": host}).status_code == 200, host
    _shape(wildcard.get("/api/runs", headers={"host": "evil.example:8791"}), 403)


# -- Origin and fetch metadata -------------------------------------------------------------


def test_same_origin_passes_and_other_origins_are_refused(client_for):
    client = client_for(LOOPBACK)
    assert client.get("/api/runs", headers={"origin": "http://127.0.0.1:8791"}).status_code == 200
    for origin in ("http://evil.example", "http://127.0.0.1:9999", "http://localhost:8791", "null",
                   "file://", "https://127.0.0.1", "http://127.0.0.1:8791.evil.example", "http://127.0.0.1"):
        body = _shape(client.get("/api/runs", headers={"origin": origin}), 403)
        assert "another origin" in body["error"]


def test_a_tls_proxy_origin_passes_for_its_allowed_name(client_for):
    client = client_for(Security(allow_hosts=("profiles.example.com",)), host="profiles.example.com")
    assert client.get("/api/runs", headers={"origin": "https://profiles.example.com"}).status_code == 200
    # A proxy that rewrites Host to 127.0.0.1 keeps the browser's origin: allowed by name.
    assert client.get("/api/runs", headers={"host": "127.0.0.1:8791", "origin": "https://profiles.example.com"}).status_code == 200
    _shape(client.get("/api/runs", headers={"origin": "https://evil.example"}), 403)
    # '*' lifts the Host check, never the Origin check.
    star = client_for(Security(allow_hosts=("*",)), host="anything.example")
    assert star.get("/api/runs").status_code == 200
    _shape(star.get("/api/runs", headers={"origin": "http://evil.example"}), 403)


def test_cross_site_subresources_are_refused_but_a_shared_link_opens_the_page(client_for):
    client = client_for(LOOPBACK)
    # <img src=".../data?..."> from another page: no Origin, but Sec-Fetch-Site says it.
    img = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "no-cors", "sec-fetch-dest": "image"}
    _shape(client.get("/data/plugin/profile/data", params={"run": PROFILE, "tag": "memory_viewer"}, headers=img), 403)
    _shape(client.get("/api/runs", headers={**img, "sec-fetch-site": "same-site"}), 403)
    nav = {"sec-fetch-site": "cross-site", "sec-fetch-mode": "navigate", "sec-fetch-dest": "document"}
    assert client.get("/", params={"run": PROFILE}, headers=nav).status_code == 200
    _shape(client.get("/api/runs", headers=nav), 403)  # a link straight to the data API is not needed
    for site in ("same-origin", "none"):
        assert client.get("/api/runs", headers={"sec-fetch-site": site}).status_code == 200


# -- token ---------------------------------------------------------------------------------

TOKEN = "t0ken-for-tests-0123456789"


def test_token_flows_through_the_app(client_for):
    client = client_for(Security.for_bind("0.0.0.0", 8791, token=TOKEN), host="10.0.0.5:8791")
    body = _shape(client.get("/api/runs"), 401)
    assert "token" in body["error"]
    _shape(client.get("/api/runs", params={"token": "wrong"}), 403)
    _shape(client.get("/api/runs", headers={"authorization": "token wrong"}), 403)
    # Scripts: the query parameter or the header (Jupyter's "token", or "Bearer").
    assert client.get("/api/runs", params={"token": TOKEN}).status_code == 200
    assert client.get("/data/plugin/profile/runs", headers={"authorization": f"token {TOKEN}"}).status_code == 200
    assert client.get("/data/plugin/profile/runs", headers={"authorization": f"Bearer {TOKEN}"}).status_code == 200
    # A browser opening the printed URL: a cookie, and the same URL without the token.
    res = client.get(f"/?run={quote(PROFILE, safe='')}&token={TOKEN}&tool=memory_viewer",
                     headers={"accept": "text/html", "sec-fetch-mode": "navigate"})
    assert res.status_code == 302, res.text
    assert res.headers["location"] == f"/?run={quote(PROFILE, safe='')}&tool=memory_viewer"
    cookie = res.headers["set-cookie"]
    assert cookie.startswith(f"profscope-token-8791={TOKEN};")
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Path=/" in cookie
    assert res.headers["content-security-policy"] == CSP  # a redirect is an answer too
    page = client.get(res.headers["location"])  # the TestClient keeps the cookie
    assert page.status_code == 200 and "<html" in page.text
    assert client.get("/data/plugin/profile/run_tools", params={"run": PROFILE}).status_code == 200
    client.cookies.clear()
    client.cookies.set("profscope-token-8791", "stale")
    assert "stale" in _shape(client.get("/api/runs"), 403)["error"]


def test_the_token_parameter_never_reaches_a_route(client_for):
    """A snapshot view keys its cache entry by its parameters: the token must not be one."""
    client = client_for(Security(token=TOKEN))
    a = client.get(f"/api/snapshot/overview?run={quote(SNAPSHOT, safe='')}&token={TOKEN}")
    b = client.get(f"/api/snapshot/overview?run={quote(SNAPSHOT, safe='')}", headers={"authorization": f"token {TOKEN}"})
    assert a.status_code == b.status_code == 200 and a.content == b.content


def test_loopback_needs_no_token(client_for):
    assert client_for(LOOPBACK).get("/api/runs").status_code == 200


@contextmanager
def _serve_cli(tmp_path, *args):
    with profscope_server("serve", "--demo", "--port", "0", "--cache-dir", str(tmp_path / "cache"), *args) as (url, lines):
        yield url, lines


def _get(url: str, headers=None):
    req = urllib.request.Request(url, headers=headers or {})
    opener = urllib.request.build_opener(_NoRedirect)
    try:
        with opener.open(req, timeout=60) as res:
            return res.status, res.headers, res.read()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read()


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    def redirect_request(self, *args, **kwargs):
        return None


def test_serve_beyond_loopback_prints_a_token_url_and_asks_for_it(tmp_path):
    with _serve_cli(tmp_path, "--host", "0.0.0.0") as (url, lines):
        m = re.fullmatch(r"http://127\.0\.0\.1:(\d+)/\?token=([0-9a-f]{48})", url)
        assert m, url
        port, token = m.groups()
        base = f"http://127.0.0.1:{port}/"
        assert any("only a browser that brings the token" in line for line in lines)
        status, _, body = _get(base + "api/runs")
        assert status == 401 and json.loads(body)["status"] == 401
        status, _, body = _get(base + "data/plugin/profile/runs", {"Authorization": f"token {token}"})
        assert status == 200 and DUMP in json.loads(body)
        # XProf's data API clients with the header or the query parameter: answered.
        assert _get(base + f"data/plugin/profile/run_tools?run={quote(PROFILE, safe='')}&token={token}")[0] == 200
        status, headers, _ = _get(url, {"Accept": "text/html", "Sec-Fetch-Mode": "navigate"})
        assert status == 302 and headers["Location"] == "/"
        cookie = headers["Set-Cookie"].split(";", 1)[0]
        status, headers, page = _get(base, {"Cookie": cookie, "Accept": "text/html"})
        assert status == 200 and b"profscope" in page and headers["Content-Security-Policy"] == CSP
        # Bound on every interface: an address is fine, a foreign name is not.
        assert _get(base + "api/runs", {"Host": "evil.example", "Cookie": cookie})[0] == 403


def test_serve_with_a_given_token_and_with_no_token(tmp_path):
    with _serve_cli(tmp_path, "--host", "0.0.0.0", "--token", TOKEN) as (url, _):
        assert url.endswith(f"/?token={TOKEN}")
        base = url.split("?", 1)[0]
        assert _get(base + "api/runs", {"Authorization": f"token {TOKEN}"})[0] == 200
    with _serve_cli(tmp_path, "--host", "0.0.0.0", "--no-token") as (url, lines):
        assert "token" not in url
        assert any("warning: listening on 0.0.0.0 with no token" in line for line in lines)
        assert _get(url + "api/runs")[0] == 200
        assert _get(url + "api/runs", {"Host": "evil.example"})[0] == 403  # the Host check stays


def test_loopback_serve_prints_no_token_and_refuses_a_rebinding_host(tmp_path):
    with _serve_cli(tmp_path) as (url, _):
        assert re.fullmatch(r"http://127\.0\.0\.1:\d+/", url)
        assert _get(url + "api/runs")[0] == 200
        status, _, body = _get(url + "api/runs", {"Host": "evil.example"})
        assert status == 403 and json.loads(body)["error"].startswith("refused: Host 'evil.example'")


# -- security headers ----------------------------------------------------------------------


@pytest.mark.parametrize("path", ["/", "/api/runs", "/static/app.css", "/static/app.js", "/static/vendor/plotly.min.js",
                                  "/data/plugin/profile/version", "/static/nope.js", "/api/run?run=nope",
                                  f"/data/plugin/profile/data?run={quote(DUMP, safe='')}&tag=memory_viewer"
                                  f"&module_name={quote(MODULE, safe='')}&view_memory_allocation_timeline=1",
                                  "/api/runs?x=%00"])
def test_security_headers_on_every_answer(demo_client, path):
    res = demo_client.get(path)
    assert res.status_code < 500
    for name in HEADERS:
        assert name in res.headers, (path, name)
    assert res.headers["content-security-policy"] == CSP
    assert "script-src 'self'" in CSP and "'unsafe-eval'" not in CSP and "frame-ancestors 'self'" in CSP
    assert res.headers["x-content-type-options"] == "nosniff"
    assert res.headers["referrer-policy"] == "no-referrer"
    assert res.headers["x-frame-options"] == "SAMEORIGIN"


# -- 5xx: Connection: close ------------------------------------------------------------------


def _app_with_failures(tmp_path, demo_logdir):
    app = create_app(Workspace(LogDir(str(demo_logdir), listing_ttl=0), DiskCache(tmp_path / "cache")))

    def boom():
        raise RuntimeError("a bug")

    def full():
        raise CacheFull("the cache folder's disk is full")

    app.add_api_route("/api/boom", boom)
    app.add_api_route("/api/full", full)
    return app


def test_a_5xx_says_connection_close(tmp_path, demo_logdir):
    client = TestClient(_app_with_failures(tmp_path, demo_logdir), raise_server_exceptions=False)
    for path, status in (("/api/boom", 500), ("/api/full", 507)):
        res = client.get(path)
        _shape(res, status)
        assert res.headers["connection"] == "close"
        assert res.headers["content-security-policy"] == CSP
    assert "connection" not in client.get("/api/run?run=nope").headers  # a 4xx keeps the connection


def _uvicorn(app, **config):
    # A real uvicorn: what it does after a 5xx and with long heads is the point.
    return serve_in_thread(app, log_level="critical", **config)


def test_the_next_request_on_a_keep_alive_connection_works_after_a_500(tmp_path, demo_logdir):
    with _uvicorn(_app_with_failures(tmp_path, demo_logdir)) as port:
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        for path in ("/api/runs", "/api/boom", "/api/runs", "/api/full", "/api/runs"):
            conn.request("GET", path)
            res = conn.getresponse()
            body = json.loads(res.read())
            if res.status >= 500:
                assert res.getheader("connection") == "close" and body["status"] == res.status
            else:
                assert res.status == 200 and "runs" in body
        conn.close()


def test_uvicorn_limits_and_ours(tmp_path, demo_logdir):
    """The CLI raises h11's 16 KiB limit on a request head, so a long query gets the
    guard's JSON 414; beyond H11_MAX_HEAD_BYTES uvicorn's own plain-text 400 (with
    Connection: close) answers, before any of profscope runs."""
    app = create_app(Workspace(LogDir(str(demo_logdir), listing_ttl=0), DiskCache(tmp_path / "cache")))
    with _uvicorn(app, h11_max_incomplete_event_size=H11_MAX_HEAD_BYTES) as port:
        def get(path):
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            conn.request("GET", path)
            res = conn.getresponse()
            out = res.status, res.getheader("content-type"), res.getheader("connection"), res.read()
            conn.close()
            return out

        status, kind, _, body = get("/api/runs?x=" + "a" * 20_000)  # over h11's default, under ours
        assert status == 414 and kind == "application/json" and json.loads(body)["status"] == 414
        status, kind, _, body = get("/api/runs?" + "&".join(f"x{i}=" + "a" * 1000 for i in range(70)))
        assert status == 414 and "query string" in json.loads(body)["error"]
        # Beyond it: h11 enforces its limit on a head still incomplete, so a long one that
        # arrives in pieces gets uvicorn's 400; one read whole reaches the guard's 414.
        # uvicorn may close the socket while the client still writes: a reset, not a 5xx.
        try:
            status, kind, connection, _ = get("/api/runs?x=" + "a" * (4 * H11_MAX_HEAD_BYTES))
        except (ConnectionResetError, BrokenPipeError):
            return
        assert (status, kind) == (414, "application/json") or (
            status == 400 and kind.startswith("text/plain") and connection == "close")


# -- URL limits and bad text -----------------------------------------------------------------


def test_url_and_value_limits(demo_client):
    assert demo_client.get("/api/runs?x=" + "a" * MAX_VALUE_BYTES).status_code == 200
    assert "8,192" in _shape(demo_client.get("/api/runs?x=" + "a" * (MAX_VALUE_BYTES + 1)), 414)["error"]
    # The whole query over MAX_QUERY_BYTES: httpx refuses such URLs itself (test_uvicorn_limits_and_ours).
    _shape(demo_client.get("/static/" + "a" * 5000), 414)
    _shape(demo_client.get("/api/runs?" + "&".join(f"k{i}=1" for i in range(300))), 400)


@pytest.mark.parametrize("query", ["run=%00", "run=a%00b", "x%00=1", "run=%ED%A0%80", "run=%FF", "run=%C3"])
def test_nul_and_invalid_utf8_are_a_400(demo_client, query):
    body = _shape(demo_client.get(f"/data/plugin/profile/hosts?{query}"), 400)
    assert "NUL" in body["error"] or "UTF-8" in body["error"]


def test_nul_in_the_path_is_a_400(demo_client):
    _shape(demo_client.get("/api/snapshot/over%00view"), 400)
    _shape(demo_client.get("/static/app%ED%A0%80.js"), 400)


@pytest.mark.parametrize("value", ["1" + "0" * 400, "1e309", "-1e309", "9" * 5000, "99999999999999999999",
                                   "18446744073709551616", "%C2%B2", "%D9%A1%D9%A2", "%EF%BC%91"])
def test_numbers_no_parameter_can_mean_are_a_400(demo_client, value):
    """Each of these was a 500 before (tests/test_server_security.py's fuzz found them)."""
    for path, param in ((f"/api/module_peaks?run={quote(PROFILE, safe='')}", "memory_space"),
                        (f"/api/trace/window?run={quote(PROFILE, safe='')}", "resolution"),
                        (f"/api/trace/event?run={quote(PROFILE, safe='')}", "id"),
                        (f"/data/plugin/profile/data?run={quote(PROFILE, safe='')}&tag=oom_risk", "capacity_bytes"),
                        (f"/data/plugin/profile/data?run={quote(PROFILE, safe='')}&tag=oom_risk", "device_memory")):
        body = _shape(demo_client.get(f"{path}&{param}={value}"), 400)
        assert param in body["error"] or "size" in body["error"], body


def test_a_huge_size_with_a_unit_is_a_400(demo_client):
    body = _shape(demo_client.get(f"/data/plugin/profile/data?run={quote(PROFILE, safe='')}&tag=oom_risk"
                                  "&device_memory=1e300GiB"), 400)
    assert "out of range" in body["error"]


# -- fuzz: every route, every parameter, hostile values ----------------------------------------

# Raw (percent-encoded where needed) values: huge and special numbers, empty, non-ASCII
# digits, NUL, a lone surrogate, bytes that are no UTF-8, long ones, paths.
HOSTILE = ["1" + "0" * 400, "1e309", "1e308", "nan", "inf", "-1", "0", "", "%20", "99999999999999999999",
           "-9223372036854775809", "1.5", "%EF%BC%91%EF%BC%92", "%C2%B2", "%D9%A1%D9%A2", "%00", "a%00b",
           "%ED%A0%80", "%FF", "%F0%9F%92%A5", "..%2F..%2Fetc%2Fpasswd", "A" * 9000, "9" * 5000, "1_000", "-1e-400"]
# What each /api/trace endpoint reads (trace_api.py); an export streams the whole trace,
# so it gets only its own parameters.
TRACE_PARAMS = {"window": ["start_ms", "end_ms", "resolution", "format"], "event": ["id"], "search": ["q", "limit", "offset"],
                "export": ["start_ms", "end_ms"], "preview": ["start_ms", "end_ms", "resolution"],
                "preview/event": ["id"], "preview/search": ["q", "limit", "offset"], "summary": ["start_ms", "end_ms"],
                "counter": ["track", "t", "peak", "start_ms", "end_ms"]}
XPROF_TRACE = ["host", "start_time_ms", "end_time_ms", "resolution", "event_name", "duration_ms", "unique_id"]
OOM = ["host", "module_name", "capacity_bytes", "device_memory", "device", "threshold_medium", "threshold_high"]
ROUTES = [
    ("/api/runs", {}, ["x"]),
    ("/api/run", {"run": PROFILE}, ["run"]),
    ("/api/module_peaks", {"run": PROFILE}, ["run", "memory_space"]),
    ("/api/memory_profile", {"run": TRACE}, ["run"]),
    ("/api/memory_hosts", {"run": PROFILE}, ["run"]),
    ("/api/trace_hosts", {"run": PROFILE}, ["run"]),
    ("/api/progress", {}, ["x"]),
    # the HLO view and the instruction panel (app/hlo_links.py); source lines, inside the roots only
    ("/api/hlo", {"run": DUMP, "module_name": MODULE}, ["run", "module_name", "host", "instr"]),
    ("/api/hlo/instruction", {"run": PROFILE, "module_name": "jit_train_step(14)", "instr": "reduce_sum.50"},
     ["run", "module_name", "host", "instr", "hops"]),
    ("/api/source", {"run": PROFILE, "file": "train.py", "line": "3"}, ["run", "file", "line", "context"]),
    *[(f"/api/snapshot/{view}", {"run": SNAPSHOT}, ["run", "host", "start", "end", "x", "max_points", "top", "event",
                                                   "stack", "filtered", "other", "other_host"])
      for view in ("overview", "timeline", "state", "stack", "stacks", "compare")],
    *[(f"/api/trace/{end}", {"run": run, "id": "0"}, ["run", "host", "hosts", *TRACE_PARAMS[end]])
      for end in TRACE_PARAMS for run in (PROFILE, TRACE)],
    ("/api/steps_ops", {"run": PROFILE}, ["run", "host", "hosts", "within_steps", "step"]),
    # the memory profile's clock against the run's trace (issue 37: memory profile -> trace)
    ("/api/trace_clock", {"run": PROFILE}, ["run", "host", "index"]),
    ("/data/plugin/profile/runs", {}, ["session_path", "run_path"]),
    ("/data/plugin/profile/run_tools", {"run": PROFILE}, ["run", "session_path", "run_path"]),
    ("/data/plugin/profile/hosts", {"run": PROFILE}, ["run", "tag"]),
    ("/data/plugin/profile/module_list", {"run": PROFILE}, ["run"]),
    ("/data/plugin/profile/version", {}, ["x"]),
    ("/data/plugin/profile/config", {}, ["x"]),
    # capturing is on in the fuzz's workspace; nothing listens at port 1, so every
    # capture that gets past the parameters fails at once (a 200 with XProf's "error")
    ("/data/plugin/profile/capture_profile", {"service_addr": "localhost:1", "duration": "100"},
     ["service_addr", "duration", "num_retry", "host_tracer_level", "device_tracer_level", "python_tracer_level",
      "delay", "is_tpu_name", "worker_list"]),
    ("/api/capture", {}, ["x"]),
    # the fuzz's workspace has no Dask cluster: a 404 whatever the parameters (POST: the same path)
    ("/api/convert", {"run": PROFILE}, ["run", "host"]),
    # the POST routes answer a GET with the 405 of the one error shape
    *[(path, {}, ["x"]) for path in ("/api/capture/job/{job_id}", "/api/capture/job/{job_id}/stop",
                                     "/api/capture/continuous", "/api/capture/continuous/{sid}",
                                     "/api/capture/continuous/{sid}/snapshot", "/api/capture/continuous/{sid}/stop")],
    # automatic capture (app/capture_watch.py): GET of the start and stop routes is a 405, an unknown watch a 404
    *[(path, {}, ["x"]) for path in ("/api/capture/watch", "/api/capture/watch/{wid}", "/api/capture/watch/{wid}/stop")],
    # the last N seconds (app/capture_ring.py), likewise
    *[(path, {}, ["x"]) for path in ("/api/capture/ring", "/api/capture/ring/{rid}", "/api/capture/ring/{rid}/snapshot",
                                     "/api/capture/ring/{rid}/stop")],
    *[("/data/plugin/profile/data", {"run": run, "tag": tag, **extra}, keys) for run, tag, extra, keys in (
        (PROFILE, "trace_viewer@", {"host": "demo-host"}, XPROF_TRACE),
        (TRACE, "trace_viewer@", {}, XPROF_TRACE),
        (PROFILE, "memory_profile", {"host": "demo-host"}, ["host", "view", "memory_id"]),
        (SNAPSHOT, "memory_profile", {}, ["host"]),
        (TRACE, "memory_profile", {}, ["host"]),
        (PROFILE, "memory_viewer", {"host": "demo-host", "module_name": MODULE},
         ["host", "module_name", "memory_space", "view", "view_memory_allocation_timeline"]),
        (DUMP, "memory_viewer", {"module_name": MODULE}, ["module_name", "memory_space", "view"]),
        (DUMP, "memory_viewer", {"module_name": MODULE, "view_memory_allocation_timeline": "1"},
         ["module_name", "memory_space"]),
        (PROFILE, "oom_risk", {}, OOM),
        (SNAPSHOT, "oom_risk", {}, OOM),
        (PROFILE, "nope", {}, ["tag"]),
    )],
    ("/", {}, ["run", "tool"]),
]


@pytest.fixture(scope="module")
def fuzz_client(tmp_path_factory, demo_logdir):
    """One workspace for the whole fuzz: what a route converts once, the next reuses."""
    ws = Workspace(LogDir(str(demo_logdir), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("fuzz-cache")),
                   capture_dir=tmp_path_factory.mktemp("fuzz-captures"))
    return TestClient(create_app(ws), raise_server_exceptions=False)


def _encode(params: dict) -> str:
    return "&".join(f"{quote(k, safe='')}={quote(v, safe='')}" for k, v in params.items())


@pytest.mark.slow  # 48 routes x hostile values: 38 s on 2 cores (make test-fast leaves it out)
@pytest.mark.parametrize("path,base,keys", ROUTES, ids=[f"{p}:{b.get('tag', '')}:{b.get('run', '')[:12]}" for p, b, _ in ROUTES])
def test_fuzz_query_parameters_never_answer_a_500(fuzz_client, path, base, keys):
    problems = []
    for key in keys:
        rest = _encode({k: v for k, v in base.items() if k != key})
        for value in HOSTILE:
            query = (rest + "&" if rest else "") + f"{key}={value}"
            res = fuzz_client.get(f"{path}?{query}")
            if res.status_code >= 500:
                problems.append(f"{key}={value[:40]}: {res.status_code} {res.text[:200]}")
            elif res.status_code >= 400:
                body = res.json()
                if set(body) != {"ok", "status", "error", "file"} or body["status"] != res.status_code or body["ok"] is not False:
                    problems.append(f"{key}={value[:40]}: not the error shape: {res.text[:200]}")
            if res.status_code >= 400 and "connection" in res.headers:
                problems.append(f"{key}={value[:40]}: a {res.status_code} closed the connection")
    assert not problems, "\n".join(problems)


def _route_paths(routes, prefix: str = ""):
    """Every route's path, through included routers (``include_router`` nests them)."""
    for r in routes:
        inner = getattr(r, "original_router", None)
        if inner is not None:
            yield from _route_paths(inner.routes, prefix + r.include_context.prefix)
        elif hasattr(r, "path"):
            yield prefix + r.path


def test_the_fuzz_covers_every_route(demo_client):
    """A new route is added to ROUTES above (with its parameters), or this fails."""
    paths = set(_route_paths(demo_client.app.routes))
    # the walk reaches the routers' routes (FastAPI 0.165 lists an included router as one
    # _IncludedRouter without a path: a walk of app.routes alone found none of ours)
    assert {"/data/plugin/profile/data", "/api/trace/window", "/api/run"} <= paths, sorted(paths)
    covered = {re.sub(r"/(overview|timeline|state|stack|stacks|compare)$", "/{view}", p) for p, _, _ in ROUTES}
    ours = {p for p in paths if p.startswith(("/api", "/data")) and p != "/api/openapi.json"}
    missing = ours - covered - {"/static/{name}", "/static/vendor/plotly.min.js"}
    assert not missing, f"routes without a fuzz entry: {sorted(missing)}"
    assert urlparse("/").path in covered


@pytest.mark.parametrize("args,message", [(["--token", "short"], "at least 8"), (["--token", "semi;colon=x"], "at least 8"),
                                          (["--token", TOKEN, "--no-token"], "not both")])
def test_bad_token_options_are_refused_before_serving(tmp_path, args, message):
    import subprocess
    import sys

    res = subprocess.run([sys.executable, "-m", "profscope", "serve", "--demo", "--port", "0",
                          "--cache-dir", str(tmp_path), *args], capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and message in res.stderr, res.stderr

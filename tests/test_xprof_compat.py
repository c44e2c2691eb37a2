"""Listing endpoints answer as XProf 2.24.2 does, request for request.

``tests/golden/xprof_listing.json`` holds XProf's real answers for the layout that
``src/profscope/testing/xprof_layout.py`` builds (recorded by ``scripts/record_xprof_golden.py``
in a private network namespace). Every recorded request is replayed here. Where XProf
crashes (no response, or a 500) we must answer a 4xx with a JSON error; where XProf reads
``*.xplane.pb.gz`` not at all, we read it, so gzipped hosts may be extra; ``run_tools``
offers only tools profscope can serve, in XProf's order. Everything else must be equal.
See docs/xprof_compat.md.
"""

from __future__ import annotations

import json
import urllib.parse
from pathlib import Path

import pytest

from profscope.testing.xprof_layout import FILES, build_xprof_layout

GOLDEN = json.loads((Path(__file__).parent / "golden" / "xprof_listing.json").read_text())
LISTING = ("/data/plugin/profile/runs", "/data/plugin/profile/run_tools", "/data/plugin/profile/hosts",
           "/data/plugin/profile/module_list", "/data/plugin/profile/data", "/data/plugin/profile/version",
           "/data/plugin/profile/config")
CASES = [k for k in GOLDEN if k.split("?")[0] in LISTING]
GZ_HOSTS = {(path.rsplit("/plugins/profile/", 1)[0] if "/plugins/" in path else ".", path.split("/")[-2], path.split("/")[-1][: -len(".xplane.pb.gz")])
            for path, kind in FILES if kind == "xplane_gz"}


@pytest.fixture(scope="module")
def layout(tmp_path_factory, demo_logdir):
    root = tmp_path_factory.mktemp("xprof_layout")
    xplane = (demo_logdir.parent.parent.parent.parent / GOLDEN["_meta"]["xplane_path"]).read_bytes()
    build_xprof_layout(root, xplane)
    return root


@pytest.fixture(scope="module")
def client(layout, tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    ws = Workspace(LogDir(str(layout), listing_ttl=0), DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws))


def _gz_hosts_of(query: dict) -> set[str]:
    """Hosts of the session a request names that exist only as .xplane.pb.gz."""
    run = query.get("run", [""])[0]
    session = query.get("session_path", [""])[0] or query.get("run_path", [""])[0]
    out = set()
    for tb, sess, host in GZ_HOSTS:
        name = sess if tb == "." else f"{tb}/{sess}"
        if run in (name, sess) and (not session or f"{tb}/plugins/profile".lstrip("./") in session or tb == "."):
            out.add(host)
    return out


def test_golden_covers_every_listing_endpoint():
    assert GOLDEN["_meta"]["recorded_with"].startswith("xprof 2.24.2")
    assert {k.split("?")[0] for k in CASES} == set(LISTING)


@pytest.mark.parametrize("target", CASES)
def test_answer_matches_xprof(client, layout, target):
    expected = GOLDEN[target]
    url = target.replace("{LOGDIR}", urllib.parse.quote(str(layout)))
    res = client.get(url)
    path, _, qs = target.partition("?")
    endpoint = path.rsplit("/", 1)[1]
    query = urllib.parse.parse_qs(qs.replace("{LOGDIR}", str(layout)))

    if expected["status"] is None or expected["status"] >= 500:
        # XProf crashed on this request; we answer a clear 4xx.
        assert 400 <= res.status_code < 500, res.text
        assert res.json()["ok"] is False
        return
    if expected["status"] >= 400:
        if endpoint == "data" and res.status_code == 200 and _gz_hosts_of(query):
            return  # XProf cannot read the .gz profile; profscope's trace viewer can
        assert res.status_code == expected["status"], res.text
        assert res.json()["error"]
        return
    if res.status_code == 404 and endpoint != "runs" and expected["body"] in ("[]", ""):
        # XProf answers an empty 200 for a run folder that does not exist; we say so.
        assert "no run named" in res.json()["error"]
        return
    assert res.status_code == 200, res.text
    if endpoint == "version":
        assert res.text == expected["body"]
    elif endpoint == "config":
        assert set(res.json()) == set(expected["json"])
    elif endpoint == "runs":
        assert res.json() == expected["json"]
    elif endpoint == "run_tools":
        ours = res.json()
        if not expected["json"] and _gz_hosts_of(query):
            return  # XProf cannot read the .gz profile, so it offers nothing
        theirs = [t for t in expected["json"] if t in ours]
        assert ours == theirs, "run_tools must be XProf's list, in its order, less what we cannot serve"
    elif endpoint == "hosts":
        ours = [h["hostname"] for h in res.json()]
        theirs = [h["hostname"] for h in expected["json"]]
        extra = set(ours) - set(theirs)
        assert extra <= _gz_hosts_of(query) | ({"ALL_HOSTS"} if extra else set()), (ours, theirs)
        assert [h for h in ours if h in theirs] == theirs
    elif endpoint == "module_list":
        if expected["body"] == "" and _gz_hosts_of(query):
            assert res.text  # XProf cannot read the .gz profile; we list its modules
        else:
            assert res.text == expected["body"]
    assert res.headers["content-type"].split(";")[0] == expected["content_type"]

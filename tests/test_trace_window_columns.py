"""The page's window as binary columns (issue 40, "the page's own later window"):
``/api/trace/window?format=columns`` (``TraceView.window_columns``) is the JSON answer
with its slices' and flows' columns as raw little-endian arrays after a JSON header. Here,
decoded as the page decodes it (lib/columns.js), it is exactly the JSON answer on the
public fixtures' real windows, one host and two merged (ids and tracks with host bits);
the JSON answer is unchanged (tests/test_trace_window_encoding.py); a bad ``format`` is a
400."""

from __future__ import annotations

import numpy as np
import orjson
import pytest
from fastapi.testclient import TestClient

from profscope.app.queries import TraceQuery
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.server.app import create_app
from profscope.storage import LogDir
from profscope.testing.timelines import build_index
from profscope.tools import trace_viewer as tvw

PROFILES = [
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.180_6003.xplane.pb",
    "xplane/tf_gpu/plugins/profile/GPU-multi-worker/34.83.195.179_6003.xplane.pb",
    "xplane/tpu_inference/plugins/profile/2025_12_10_tpu/tpu_inference_2.xplane.pb",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
]
GROUPS = {"slices": tvw.SLICE_COLUMNS, "flows": tvw.FLOW_COLUMNS}


@pytest.fixture(scope="module")
def views(shared_fixtures, tmp_path_factory) -> dict[str, tvw.TraceView]:
    ix = {rel: build_index(shared_fixtures / "public_profiles" / rel, tmp_path_factory.mktemp("ix")) for rel in PROFILES}
    out = {rel: tvw.TraceView("r", [tvw.HostIndex(0, "host", i, 1000)]) for rel, i in ix.items()}
    # two hosts on one timeline: ids host << 40 | row (float64 in the answer), tracks host << 20 | track
    tf = [ix[r] for r in PROFILES if "tf_gpu" in r]
    out["tf_gpu, both hosts"] = tvw.TraceView("r", [tvw.HostIndex(k, f"h{k}", i, 1000 * (k + 1)) for k, i in enumerate(tf)])
    return out


def decode(body: bytes) -> tuple[dict, dict[str, dict[str, np.ndarray]]]:
    """The answer's header and its columns as numpy views of the body, as lib/columns.js
    reads them: a uint32 header length, the header, columns from 4 + H at their offsets."""
    h = int.from_bytes(body[:4], "little")
    assert (4 + h) % 8 == 0
    head = orjson.loads(body[4:4 + h])
    cols = {}
    for group, names in GROUPS.items():
        cols[group] = {}
        for k in names:
            c = head[group][k]
            assert c["dtype"] in tvw.COLUMN_DTYPES and (4 + h + c["offset"]) % np.dtype(c["dtype"]).itemsize == 0
            cols[group][k] = np.frombuffer(body, np.dtype(c["dtype"]).newbyteorder("<"), c["length"], 4 + h + c["offset"])
    return head, cols


def _same_as_json(body: bytes, json_body: bytes) -> int:
    """The decoded answer equals the JSON answer: the header's every other key, each
    column's values (an integer column's as integers, whatever its dtype)."""
    head, cols = decode(body)
    want = orjson.loads(json_body)
    for group, names in GROUPS.items():
        for k in names:
            got, exp = cols[group][k], want[group].pop(k)
            assert len(got) == len(exp), (group, k)
            if exp and isinstance(exp[0], int):
                assert got.dtype.kind in "iu" or np.all(got == np.floor(got)), (group, k)
                assert got.astype(np.int64).tolist() == exp, (group, k)
            else:
                assert got.tolist() == exp, (group, k)
            head[group].pop(k)
    assert head == want
    return len(cols["slices"]["id"])


def _windows(span_ms: float):
    yield None, None, 8000
    rnd = np.random.default_rng(4)
    for a in rnd.random(6) * span_ms:
        for frac, res in ((0.01, 8000), (0.2, 1500), (0.00001, 300)):
            yield a, a + frac * span_ms, res


def test_columns_decode_to_the_json_answer(views):
    seen = {"empty": False, "full": False, "wide ids": False, "flows": False}
    for name, view in views.items():
        for a, b, res in _windows(view.end_ps / tvw.PS_PER_MS):
            body = view.window_columns(a, b, res)
            n = _same_as_json(body, view.window_json(a, b, res))
            _, cols = decode(body)
            seen["empty"] |= n == 0
            seen["full"] |= n > 1000
            seen["wide ids"] |= cols["slices"]["id"].dtype == np.float64 and n > 0
            seen["flows"] |= len(cols["flows"]["from"]) > 0
    assert all(seen.values()), seen


def test_columns_answer_sends_int64_narrow_or_as_float64():
    """An int64 column goes as int32 where it fits, else float64 (exact below 2^53); a
    column of a dtype the page has no typed array for is refused, not sent."""
    w = {"slices": {k: np.zeros(0, np.int64) for k in tvw.SLICE_COLUMNS},
         "flows": {**{k: np.zeros(0, np.float64) for k in tvw.FLOW_COLUMNS}, "truncated": 0}}
    w["slices"]["id"] = np.array([1, (3 << 40) | 7], np.int64)
    w["slices"]["track"] = np.array([-5, 1 << 20], np.int64)
    w["slices"]["depth"] = np.array([0, 3], np.int8)
    head, cols = decode(tvw.columns_answer(w))
    assert cols["slices"]["id"].dtype == np.float64 and cols["slices"]["id"].tolist() == [1, (3 << 40) | 7]
    assert cols["slices"]["track"].dtype == np.int32 and cols["slices"]["track"].tolist() == [-5, 1 << 20]
    assert cols["slices"]["depth"].dtype == np.int8 and head["flows"]["truncated"] == 0
    w["slices"]["depth"] = np.zeros(2, np.float16)
    with pytest.raises(ValueError):
        tvw.columns_answer(w)


def test_the_route_sends_columns_and_refuses_a_bad_format(shared_fixtures, tmp_path):
    """``format=columns`` answers ``Workspace.trace_window_columns`` with its own media
    type, gzipped by igzip for a client that takes gzip and as it is for one that does not;
    ``format=json`` (and none) the JSON bytes as before; any other value a 400 with the
    JSON error every refusal has."""
    logdir = shared_fixtures / "public_profiles" / "xplane" / "tf_gpu"
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))
    run = ws.runs()[0]
    client = TestClient(create_app(ws))
    hosts = ",".join(ws.trace_window(run, TraceQuery(resolution=100))["hosts"] + [h for h, _ in ws.trace_sources(run)][1:])
    for params in ({"resolution": 3000}, {"resolution": 3000, "hosts": hosts}):
        r = client.get("/api/trace/window", params={"run": run.name, **params, "format": "columns"})
        assert r.status_code == 200 and r.headers["content-type"] == "application/vnd.profscope.columns"
        assert r.headers["content-encoding"] == "gzip"  # (httpx asks for gzip and inflates it)
        assert r.content == ws.trace_window_columns(run, TraceQuery(**params))
        raw = client.get("/api/trace/window", params={"run": run.name, **params, "format": "columns"},
                         headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in raw.headers and raw.content == r.content
        plain = client.get("/api/trace/window", params={"run": run.name, **params})
        assert plain.headers["content-type"] == "application/json" and plain.headers["content-encoding"] == "gzip"
        assert client.get("/api/trace/window", params={"run": run.name, **params, "format": "json"}).content == plain.content
        assert _same_as_json(r.content, plain.content) > 100
    bad = client.get("/api/trace/window", params={"run": run.name, "format": "arrow"})
    assert bad.status_code == 400 and "format" in bad.json()["error"]


def test_per_request_answers_are_deflated_by_igzip_where_the_client_takes_gzip(shared_fixtures, tmp_path):
    """The trace window's answers (JSON and columns) and XProf's trace_viewer@ answer, made
    per request, are gzipped by igzip at level 1 for a client that takes gzip (its header's
    XFL byte is 0, where the app's zlib middleware at level 1 writes 4, RFC 1952) and sent
    as they are to one that does not: the same bytes either way once inflated."""
    import gzip

    logdir = shared_fixtures / "public_profiles" / "xplane" / "tf_gpu"
    ws = Workspace(LogDir(str(logdir), listing_ttl=0), DiskCache(tmp_path / "cache"))
    run = ws.runs()[0]
    client = TestClient(create_app(ws))
    for path, params in (("/api/trace/window", {"run": run.name, "resolution": 3000}),
                         ("/api/trace/window", {"run": run.name, "resolution": 3000, "format": "columns"}),
                         ("/data/plugin/profile/data", {"run": run.name, "tag": "trace_viewer@", "host": run.hosts[0]})):
        with client.stream("GET", path, params=params, headers={"Accept-Encoding": "gzip"}) as r:
            raw = b"".join(r.iter_raw())
        assert r.status_code == 200 and r.headers["content-encoding"] == "gzip", path
        assert raw[:2] == b"\x1f\x8b" and raw[8] == 0, path
        plain = client.get(path, params=params, headers={"Accept-Encoding": "identity"})
        assert "content-encoding" not in plain.headers and gzip.decompress(raw) == plain.content, path

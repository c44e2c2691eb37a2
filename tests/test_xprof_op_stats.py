"""XProf's ``hlo_stats`` and ``op_profile`` from profscope against XProf 2.24.2's own
answers, on the real GPU/ROCm profiles of ``shared/fixtures/public_profiles`` and on the
demo's CPU profiles.

Goldens: ``tests/golden/op_stats/<case>.<hlo_stats|op_profile|op_profile_category>.json.gz``
(listed in ``index.json``), recorded by ``scripts/record_xprof_op_golden.py`` from XProf
itself. Every answer is asked of the server's XProf data route
(``/data/plugin/profile/data?tag=hlo_stats`` / ``tag=op_profile``).

op_profile: the whole JSON (both trees, ``deviceType``, ``aggDvfsTimeScaleMultiplier``)
equal, node by node, key order included, but for the FLOP and byte fields (XLA's
HloCostAnalysis: 0 here) and the HLO text past its op name; siblings of equal time may
come in either order (XProf sorts them with ``std::partial_sort``, which is not stable),
so each node's children are compared as a list of times and then matched by name.

Compared per op (a row is keyed by program id and op name, and must sit at XProf's rank):
the columns XProf's converter computes from the trace and the module, occurrences and
text (the source cell with its stack included) exactly, times
and shares to 1e-9 relative (XProf prints doubles in full, ps / 1e6; the sums are of the
same integers, so only the last bits of a float division can differ). Not compared
(docs/xprof_compat.md): the roofline columns (XLA's HloCostAnalysis) and the HLO text
beyond its op name.

The TPU profile is compared the same way (XProf reads TPU TensorCore planes by another
path: formats/xplane_op_metrics.py): hlo_stats with its HLO text and core type too, the
op profile with each fusion's fused instructions under it and the nominal-clock times
(``normalizedTimePs``, ``aggDvfsTimeScaleMultiplier``). A CPU-only profile (no device
plane) is XProf's empty table; an unreadable file is a 4xx naming the file.
"""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

GOLDEN = Path(__file__).parent / "golden" / "op_stats"
INDEX = json.loads((GOLDEN / "index.json").read_text())
CASES = sorted(k for k in INDEX if not k.startswith("_"))
ROOT = Path(__file__).parents[1]
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"

EXACT = ("rank", "program_id", "category", "hlo_op_name", "tf_op_name", "occurrences", "source_info")
TIMES = ("total_time", "avg_time", "total_self_time", "avg_self_time", "total_self_time_percent",
         "cumulative_total_self_time_percent")


def _client(root: Path, cache: Path):
    from fastapi.testclient import TestClient

    from profscope.app.workspace import Workspace
    from profscope.cache.store import DiskCache
    from profscope.server.app import create_app
    from profscope.storage import LogDir

    return TestClient(create_app(Workspace(LogDir(str(root), listing_ttl=0), DiskCache(cache))),
                      raise_server_exceptions=False)


@pytest.fixture(scope="module")
def clients(shared_fixtures, tmp_path_factory):
    for case in CASES:
        entry = INDEX[case]
        path = (shared_fixtures if entry["fixture"] else ROOT) / entry["path"]
        assert hashlib.sha256(path.read_bytes()).hexdigest() == entry["sha256"], f"{path} is not the file recorded"
    return {True: _client(shared_fixtures / "public_profiles" / "xplane", tmp_path_factory.mktemp("cache")),
            False: _client(DEMO, tmp_path_factory.mktemp("cache"))}


def _table(body: dict) -> list[dict]:
    ids = [c["id"] for c in body["cols"]]
    return [dict(zip(ids, [cell.get("v") for cell in row["c"]])) for row in body["rows"]]


def _ask(client, entry: dict, tag: str = "hlo_stats", **more):
    return client.get("/data/plugin/profile/data",
                      params={"run": entry["run"], "tag": tag, "host": entry["host"], **more})


COST_FIELDS = ("flops", "rawFlops", "bf16Flops", "uncappedFlops", "bandwidthUtils", "rawBytesAccessedArray")


def _comparable(node: dict) -> dict:
    """The node without what XLA's cost analysis gives, its HLO text cut to the op name,
    its children (equal times in name order) made comparable too."""
    out = {k: v for k, v in node.items() if k != "children"}
    out["metrics"] = {k: v for k, v in node["metrics"].items() if k not in COST_FIELDS}
    if "xla" in node:
        out["xla"] = {**node["xla"], "expression": node["xla"]["expression"].split(" = ")[0]}
    kids = sorted(node["children"], key=lambda c: (-c["metrics"]["rawTime"], c["name"]))
    out["children"] = [_comparable(c) for c in kids]
    out["childTimes"] = [c["metrics"]["rawTime"] for c in node["children"]]  # the order as sent
    return out


@pytest.mark.parametrize("case", CASES)
def test_hlo_stats_equals_xprof(clients, case):
    entry = INDEX[case]
    golden = json.loads(gzip.decompress((GOLDEN / entry["hlo_stats"]).read_bytes()))
    res = _ask(clients[entry["fixture"]], entry)
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["cols"] == golden["cols"]  # XProf's frontend reads the columns by id
    theirs, ours = _table(golden), _table(body)
    key = lambda r: (r["program_id"], r["hlo_op_name"])  # noqa: E731
    assert [key(r) for r in ours] == [key(r) for r in theirs], "the same ops, in XProf's rank order"
    for t, o in zip(theirs, ours):
        for col in EXACT:
            assert o[col] == t[col], (key(t), col, o[col], t[col])
        for col in TIMES:
            assert o[col] == pytest.approx(t[col], rel=1e-9, abs=1e-12), (key(t), col, o[col], t[col])
        # the op name XProf reads out of its HLO text is the one at the head of ours; a
        # TPU's text is the profile's own (the event metadata's name), XProf's exactly
        assert o["hlo_op_expression"].startswith(f"%{t['hlo_op_name']} = ")
        assert o["core_type"] == t["core_type"]
        if t["core_type"]:
            assert o["hlo_op_expression"] == t["hlo_op_expression"]


@pytest.mark.parametrize("group_by", [None, "category"])
@pytest.mark.parametrize("case", CASES)
def test_op_profile_equals_xprof(clients, case, group_by):
    entry = INDEX[case]
    golden = json.loads(gzip.decompress((GOLDEN / entry["op_profile" if group_by is None else
                                                       "op_profile_category"]).read_bytes()))
    res = _ask(clients[entry["fixture"]], entry, "op_profile", **({"group_by": group_by} if group_by else {}))
    assert res.status_code == 200, res.text
    body = res.json()
    assert list(body) == list(golden)
    for key, value in golden.items():
        if isinstance(value, dict):
            assert json.dumps(_comparable(body[key])) == json.dumps(_comparable(value)), key
        else:
            assert body[key] == value, key


def test_op_profile_by_provenance_is_a_clear_400(clients):
    res = _ask(clients[True], INDEX["mi300_jax08_gemm"], "op_profile", group_by="provenance")
    assert res.status_code == 400 and "group_by" in res.json()["error"], res.text


def test_goldens_cover_rows_and_empty_tables():
    """The cases hold ops to compare (ROCm) and the CPU-only profiles' empty table."""
    assert sum(INDEX[c]["hlo_stats_rows"] for c in CASES) >= 37
    assert INDEX["tpu_inference"]["hlo_stats_rows"] == 17
    assert any(INDEX[c]["hlo_stats_rows"] == 0 and not INDEX[c]["fixture"] for c in CASES)


def test_hlo_stats_is_listed_where_xprof_lists_it(clients):
    entry = INDEX["mi300_jax08_gemm"]
    tools = clients[True].get("/data/plugin/profile/run_tools", params={"run": entry["run"]}).json()
    assert "hlo_stats" in tools and "op_profile" in tools


@pytest.mark.parametrize("tag", ["hlo_stats", "op_profile"])
def test_unreadable_profile_is_a_clear_4xx(clients, shared_fixtures, tag):
    corrupt = sorted((shared_fixtures / "public_profiles" / "xplane" / "tpu_inference_corrupt").glob(
        "plugins/profile/*/*.xplane.pb"))[0]
    entry = {"run": f"tpu_inference_corrupt/{corrupt.parent.name}", "host": corrupt.name[: -len(".xplane.pb")]}
    res = _ask(clients[True], entry, tag)
    assert 400 <= res.status_code < 500, res.text
    assert res.json()["file"].endswith(corrupt.name)


@pytest.mark.parametrize("case", ["mi300_jax08_gemm", "tpu_inference"])
def test_a_host_is_decoded_once_for_every_op_tool(shared_fixtures, tmp_path, monkeypatch, case):
    """hlo_stats, then op_profile by program and by category on the same host: the op
    metrics are read out of the xplane once (the cached OP_METRICS entry, app/op_stats.py);
    with the decoder refusing after the first tool, the other two still equal XProf's."""
    from profscope.formats import xplane_op_metrics

    entry = INDEX[case]
    client = _client(shared_fixtures / "public_profiles" / "xplane", tmp_path / "cache")
    assert _ask(client, entry).status_code == 200

    def refuse(*a, **k):
        raise AssertionError("the xplane's op metrics were decoded again")

    # conversions run in children forked per conversion (cache/worker.py): they see this
    monkeypatch.setattr(xplane_op_metrics, "read_op_metrics", refuse)
    for group_by, golden_name in ((None, "op_profile"), ("category", "op_profile_category")):
        res = _ask(client, entry, "op_profile", **({"group_by": group_by} if group_by else {}))
        assert res.status_code == 200, res.text
        golden = json.loads(gzip.decompress((GOLDEN / entry[golden_name]).read_bytes()))
        for key, value in golden.items():
            if isinstance(value, dict):
                assert json.dumps(_comparable(res.json()[key])) == json.dumps(_comparable(value)), key
            else:
                assert res.json()[key] == value, key
    # a new host's file is still decoded: the refusal is what a decode meets
    other = _client(shared_fixtures / "public_profiles" / "xplane", tmp_path / "cache2")
    res = _ask(other, entry)
    assert res.status_code != 200 and "decoded again" in res.text, res.text

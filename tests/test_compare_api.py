"""The compare framework (issue 36, docs/compare.md): ``base``/``base_host``/``base_module``
on the comparable tools' data route, checked against the catalog before anything is
read; mismatched inputs answer ``comparable: false`` with why (200), unknown names a 404
naming them, never a 500. On the real public profiles (shared fixtures)."""

from __future__ import annotations

import pytest

TF_GPU = "xplane/tf_gpu/GPU-multi-worker"
TPU = "xplane/tpu_inference/2025_12_10_tpu"
SNAPSHOT = "snapshots/niu_fwd_bwd_200_mixed.pickle"
TRACE = "traces/tracelens_h100_bert_small.trace.json.gz"


@pytest.fixture
def client(make_client, shared_fixtures):
    return make_client(shared_fixtures / "public_profiles")


def _data(client, run, tag, **params):
    return client.get("/data/plugin/profile/data", params={"run": run, "tag": tag, **params})


@pytest.mark.parametrize("tag", ["memory_viewer", "memory_profile", "steps_ops", "oom_risk", "summary"])
def test_an_unknown_base_run_is_a_404_naming_it(client, tag):
    res = _data(client, TPU, tag, base="no/such/run")
    assert res.status_code == 404, res.text
    assert "no/such/run" in res.json()["error"]


def test_a_base_is_a_run_name_never_a_path(client, shared_fixtures):
    for base in ("../../etc", str(shared_fixtures / "public_profiles" / TPU), "/etc/passwd"):
        res = _data(client, TPU, "oom_risk", base=base)
        assert res.status_code == 404, res.text
        assert "no run named" in res.json()["error"]


def test_an_unknown_base_host_or_module_is_a_404_naming_it(client):
    res = _data(client, TF_GPU, "steps_ops", base_host="nohost:1")
    assert res.status_code == 404 and "nohost:1" in res.json()["error"], res.text
    res = _data(client, TPU, "memory_viewer", base_module="no_module(7)")
    assert res.status_code == 404 and "no_module(7)" in res.json()["error"], res.text


def test_a_memory_viewer_against_a_snapshot_says_it_cannot_compare(client):
    """A snapshot has no compiled module: the answer says what cannot be compared, as a
    200 diff body with comparable false, not an error."""
    res = _data(client, TPU, "memory_viewer", base=SNAPSHOT)
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["comparable"] is False and body["tool"] == "memory_viewer"
    assert SNAPSHOT in body["why"] and "torch_snapshot" in body["why"]
    assert body["base"]["run"] == SNAPSHOT and body["current"]["run"] == TPU
    assert body["rows"] == [] and body["totals"] is None


def test_a_profile_against_a_trace_says_it_cannot_compare(client):
    res = _data(client, TPU, "steps_ops", base=TRACE)
    assert res.status_code == 200, res.text
    body = res.json()
    assert body["comparable"] is False
    assert "chrome_trace" in body["why"] and "profile" in body["why"]


def test_without_a_base_the_tool_answers_as_before(client):
    res = _data(client, TPU, "oom_risk")
    assert res.status_code == 200
    assert "comparable" not in res.json()


def _single(client, run, tag, **params):
    res = _data(client, run, tag, **params)
    assert res.status_code == 200, res.text
    return res.json()


def _check_sums(body):
    """The contract's invariant: every grouping's and the rows' deltas sum to the total's
    delta minus its residual."""
    totals = body["totals"]
    for name, rows in [("rows", body["rows"]), *body["groups"].items()]:
        assert sum(r["delta"] for r in rows) == pytest.approx(totals["delta"] - totals["residual"], abs=1e-6), name
    for r in body["rows"]:
        assert r["delta"] == r["current"] - r["base"]
    deltas = [abs(r["delta"]) for r in body["rows"]]
    assert deltas == sorted(deltas, reverse=True)


@pytest.mark.parametrize("run", [TPU, SNAPSHOT, TRACE])
@pytest.mark.parametrize("tag", ["oom_risk", "summary"])
def test_a_run_against_itself_changes_nothing(client, run, tag):
    body = _single(client, run, tag, base=run)
    assert body["comparable"] is True and body["verdict"]["change"] == "same"
    if body["totals"] is not None:
        assert body["totals"]["delta"] == 0 and body["totals"]["residual"] == 0
        _check_sums(body)
    assert all(r["delta"] == 0 and r["in"] == "both" for r in body["rows"])
    if tag == "summary":
        assert all(f["in"] == "both" and f["priority_base"] == f["priority_current"] for f in body["findings"])


def test_oom_risk_of_two_snapshots_what_changed(client):
    """Two real snapshots: the peak's change is the difference of the two single answers,
    split by contributor category; what the categories do not cover is the residual."""
    other = "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle"
    body = _single(client, SNAPSHOT, "oom_risk", base=other)
    then, now = _single(client, other, "oom_risk"), _single(client, SNAPSHOT, "oom_risk")
    assert body["totals"]["delta"] == now["peakBytes"] - then["peakBytes"] < 0
    assert body["verdict"]["text"] == f"{then['risk']} → {now['risk']}"
    assert body["totals"]["residual"] == (now["peakBytes"] - sum(c["bytes"] for c in now["contributors"])) - (
        then["peakBytes"] - sum(c["bytes"] for c in then["contributors"]))
    _check_sums(body)
    assert {r["key"] for r in body["rows"]} == {c["category"] for c in then["contributors"] + now["contributors"]}
    assert body["rows"][0]["link_base"].startswith("?run=snapshots%2Fbolong")
    assert body["items"] and all(i["delta"] == i["current"] - i["base"] for i in body["items"])


def test_summary_of_two_programs_what_changed(client):
    """Two unrelated programs are still two summaries: the status then -> now, the median
    step's change split by category (equal to the difference of the single answers), the
    findings that came and went."""
    other = "xplane/mi300_jax08_gemm/jax08_gemm"
    body = _single(client, TPU, "summary", base=other)
    then, now = _single(client, other, "summary"), _single(client, TPU, "summary")
    assert body["totals"]["delta"] == now["metrics"]["steps"]["median_us"] - then["metrics"]["steps"]["median_us"]
    _check_sums(body)
    assert abs(body["totals"]["residual"]) < 0.01  # the categories are the median step's, rounded to ns
    ids_then, ids_now = {f["id"] for f in then["findings"]}, {f["id"] for f in now["findings"]}
    got = {f["id"]: f["in"] for f in body["findings"]}
    assert {i for i, w in got.items() if w == "current_only"} == ids_now - ids_then
    assert {i for i, w in got.items() if w == "base_only"} == ids_then - ids_now
    assert body["verdict"]["text"] == f"{then['status']} → {now['status']}"


def test_host_against_host_of_one_run(client):
    """base_host alone: another host of the same run (the straggler against the median)."""
    hosts = ["34.83.195.179_6003", "34.83.195.180_6003"]
    body = _single(client, TF_GPU, "summary", host=hosts[1], base_host=hosts[0])
    assert body["base"]["run"] == body["current"]["run"] == TF_GPU
    assert (body["base"]["host"], body["current"]["host"]) == (hosts[0], hosts[1])
    then, now = (_single(client, TF_GPU, "summary", host=h) for h in hosts)
    assert body["totals"]["delta"] == now["metrics"]["steps"]["median_us"] - then["metrics"]["steps"]["median_us"]
    _check_sums(body)
    # one rule's finding on each host is the same finding, kept (each host's own is named by its host)
    assert {f["id"] for f in then["findings"]} == {f["id"] for f in now["findings"]}
    assert body["findings"] and all(f["in"] == "both" for f in body["findings"])


def test_the_base_module_is_the_same_program_up_to_its_id(client):
    """Without base_module, the base run's module of the same name up to XProf's program id
    (two compilations never share the id); several such modules: a 400 listing them."""
    gemm = "xplane/mi300_jax08_gemm/jax08_gemm"
    body = _single(client, TPU, "memory_viewer", module_name="jit_convert_element_type(2433868464432466958)", base=gemm)
    assert body["base"]["module"] == "jit_convert_element_type(1)"
    assert body["current"]["module"] == "jit_convert_element_type(2433868464432466958)"
    res = _data(client, TPU, "memory_viewer", module_name="jit_broadcast_in_dim(11287434908481120160)", base=gemm)
    assert res.status_code == 400, res.text
    assert "9 modules named 'jit_broadcast_in_dim'" in res.json()["error"] and "jit_broadcast_in_dim(19)" in res.json()["error"]
    res = _data(client, TPU, "memory_viewer", module_name="jit_broadcast_in_dim(11287434908481120160)", base=gemm,
                base_module="jit_broadcast_in_dim(3)")
    assert res.status_code == 200 and res.json()["base"]["module"] == "jit_broadcast_in_dim(3)"

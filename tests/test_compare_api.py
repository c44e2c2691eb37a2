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

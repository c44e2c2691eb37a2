"""Steps & ops, run vs run (issue 36, tools/compare_steps_ops.py, docs/compare.md "Steps &
ops"): the diff of two real single answers of ``/api/steps_ops`` equals their difference
exactly, its split by category adds up to the step time's change, a run compared with
itself is zero everywhere, and a run without steps is said so rather than failing.

Inputs: the public profiles of ``shared/fixtures`` (the TF GPU session's two hosts, the
PyTorch traces of HTA and TraceLens), answered by the server as the page reads them."""

from __future__ import annotations

import math

import pytest

from profscope.tools import compare_steps_ops
from tests.test_xprof_op_stats import _client  # a TestClient of a logdir with its own cache

TF = "xplane/tf_gpu/GPU-multi-worker"
TF_HOSTS = ("34.83.195.179_6003", "34.83.195.180_6003")
RESNET = "traces/kineto_resnet50_v100.pt.trace.json.gz"
BERT = "traces/tracelens_h100_bert_small.trace.json.gz"
B200 = "traces/tracelens_b200_eager.trace.json.gz"  # no ProfilerStep: no steps
MI300_CONV = "xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal"
MI300_GEMM = "xplane/mi300_jax08_gemm/jax08_gemm"
# The TF GPU session's two host files are byte for byte the same profile (one SHA-256):
# their compare is zero, as a self-compare; the MI300 pair and the PyTorch pair differ.
PAIRS = {"tf_gpu_hosts": ((TF, TF_HOSTS[0]), (TF, TF_HOSTS[1])),
         "mi300_programs": ((MI300_CONV, None), (MI300_GEMM, None)),  # two JAX programs, no op in common
         "kineto_traces": ((RESNET, None), (BERT, None)),
         "tf_gpu_self": ((TF, TF_HOSTS[0]), (TF, TF_HOSTS[0])),
         "kineto_self": ((BERT, None), (BERT, None))}


def _link(tool, **keys):
    return "?" + "&".join(f"{k}={v}" for k, v in {"tool": tool, **keys}.items())


@pytest.fixture(scope="module")
def client(shared_fixtures, tmp_path_factory):
    return _client(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("cache"))


@pytest.fixture(scope="module")
def answers(client):
    out = {}

    def get(run, host):
        if (run, host) not in out:
            res = client.get("/api/steps_ops", params={"run": run, **({"host": host} if host else {})})
            assert res.status_code == 200, res.text
            out[(run, host)] = res.json()
        return out[(run, host)]

    return get


def _diff(answers, pair):
    (br, bh), (cr, ch) = PAIRS[pair] if isinstance(pair, str) else pair
    base, current = answers(br, bh), answers(cr, ch)
    return base, current, compare_steps_ops.diff(base, current, base_ref={"run": br, "host": base["host"]},
                                                 current_ref={"run": cr, "host": current["host"]}, link=_link)


def _ops(answer, kind):
    return {(o.get("module") or "", o["name"]): o for o in answer["ops"] if o["kind"] == kind}


@pytest.mark.parametrize("pair", sorted(PAIRS))
def test_deltas_are_the_difference_of_the_single_answers(answers, pair):
    base, current, d = _diff(answers, pair)
    assert d["tool"] == "steps_ops" and d["comparable"] and d["why"] is None
    for k in ("median", "p90"):
        assert d["step_time"][k]["delta"] == current["summary"][f"{k}_us"] - base["summary"][f"{k}_us"]
    # the split by category is of the mean step time: the single answers' steps, averaged
    for side, answer in (("base", base), ("current", current)):
        mean = sum(s["step_time_us"] for s in answer["steps"]) / len(answer["steps"])
        assert math.isclose(d["totals"][side], mean, rel_tol=1e-9), (side, d["totals"], mean)
    assert abs(d["totals"]["residual"]) < 1e-6
    assert math.isclose(sum(r["delta"] for r in d["groups"]["category"]) + d["totals"]["residual"],
                        d["totals"]["delta"], rel_tol=1e-12, abs_tol=1e-9)
    # each op matched by name: its delta is current's total minus base's, exactly
    named = [r for r in d["rows"] if r["match"] == "name"]
    assert bool(named) == (pair != "mi300_programs")
    for r in named:
        key = (r.get("module") or "", r["label"])
        assert r["delta"] == _ops(current, r["kind"])[key]["total_us"] - _ops(base, r["kind"])[key]["total_us"], r
    # every op of either answer is in the rows once: the totals per kind are the answers'
    for kind, t in d["ops_totals"].items():
        assert math.isclose(t["base"], sum(o["total_us"] for o in _ops(base, kind).values()), abs_tol=1e-6)
        assert math.isclose(t["current"], sum(o["total_us"] for o in _ops(current, kind).values()), abs_tol=1e-6)
    deltas = [abs(r["delta"]) for r in d["rows"]]
    assert deltas == sorted(deltas, reverse=True)


@pytest.mark.parametrize("pair", ["tf_gpu_self", "kineto_self"])
def test_self_compare_is_zero_everywhere(answers, pair):
    _, _, d = _diff(answers, pair)
    assert d["totals"]["delta"] == 0 and d["totals"]["residual"] == 0
    assert all(v["delta"] == 0 for v in d["step_time"].values())
    for rows in (d["rows"], *d["groups"].values()):
        assert rows and all(r["delta"] == 0 and r["in"] == "both" for r in rows)


def test_two_programs_list_the_ops_only_in_one(answers):
    base, current, d = _diff(answers, "kineto_traces")
    only = {r["in"] for r in d["rows"] if r["match"] is None}
    assert only == {"base_only", "current_only"}
    for r in d["rows"]:
        if r["in"] == "base_only":
            assert r["current"] == 0 and r["delta"] == -r["base"] and r["link_current"] is None and r["link_base"]
        if r["in"] == "current_only":
            assert r["base"] == 0 and r["delta"] == r["current"] and r["link_base"] is None and r["link_current"]


def test_a_renamed_op_is_matched_by_its_category(answers):
    """The TF host's answer with one of its kernels renamed (as a fusion renamed between two
    compilations): the only op left on each side of that kind and category is matched by
    it, not listed as one removed and one added."""
    base = answers(TF, TF_HOSTS[0])
    victim = next(o for o in base["ops"] if o["kind"] == "kernel")
    current = {**base, "ops": [{**o, "name": o["name"] + "_renamed"} if o is victim else o for o in base["ops"]]}
    d = compare_steps_ops.diff(base, current, base_ref={"run": TF, "host": TF_HOSTS[0]},
                               current_ref={"run": TF, "host": TF_HOSTS[0]}, link=_link)
    renamed = [r for r in d["rows"] if r["match"] == "category"]
    assert len(renamed) == 1 and renamed[0]["label"] == f"{victim['name']} → {victim['name']}_renamed"
    assert renamed[0]["in"] == "both" and renamed[0]["delta"] == 0
    assert not [r for r in d["rows"] if r["in"] != "both"]


def test_a_run_without_steps_says_so(answers):
    base, current, d = _diff(answers, ((BERT, None), (B200, None)))
    assert not current["steps"]
    assert d["comparable"] and "current run has no steps" in d["why"]
    assert d["totals"]["delta"] is None and d["step_time"]["median"]["delta"] is None
    assert d["rows"]  # the ops are still compared


def _unlinked(value):
    """Rows without their links (the route's link is the dashboard's, the tests' _link is not)."""
    if isinstance(value, dict):
        return {k: _unlinked(v) for k, v in value.items() if k not in ("link_base", "link_current")}
    if isinstance(value, list):
        return [_unlinked(v) for v in value]
    return value


def test_the_data_route_answers_this_diff(client, answers):
    """``tag=steps_ops&base=...`` (app/compare.py) answers this module's diff of the two
    single answers the page reads: the TF GPU hosts through ``base_host``, two traces
    through ``base``."""
    for params, (b, c) in (({"run": TF, "host": TF_HOSTS[1], "base_host": TF_HOSTS[0]}, PAIRS["tf_gpu_hosts"]),
                           ({"run": BERT, "base": RESNET}, PAIRS["kineto_traces"])):
        res = client.get("/data/plugin/profile/data", params={"tag": "steps_ops", **params})
        assert res.status_code == 200, res.text
        routed = res.json()
        _, _, direct = _diff(answers, (b, c))
        for key in ("comparable", "why", "totals", "groups", "rows", "step_time", "ops_totals"):
            assert _unlinked(routed[key]) == _unlinked(direct[key]), key
        # the links are the dashboard's, into each side's own run (app/compare.py side_link)
        assert all(r["link_base"].startswith("?run=") for r in routed["rows"] if r["link_base"])


def test_all_hosts_is_compared_host_by_host(client):
    """host=ALL_HOSTS (every host side by side) against one host: not comparable, and the
    answer says to pick a host, not that the run has nothing to compare."""
    res = client.get("/data/plugin/profile/data", params={"tag": "steps_ops", "run": TF, "host": "ALL_HOSTS",
                                                          "base_host": TF_HOSTS[0]})
    assert res.status_code == 200, res.text
    d = res.json()
    assert d["comparable"] is False and "ALL_HOSTS" in d["why"] and "pick a host" in d["why"]

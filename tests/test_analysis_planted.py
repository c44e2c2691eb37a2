"""The Summary's planted-problems suite (issue 35, "How good it must be"): every rule's
problem planted alone and in pairs, real JAX and PyTorch programs among them
(profscope.testing.planted; benchmarks/analysis_recall.py prints the same numbers):
at least 90 % of the planted problems found at the right priority, no P0 on a healthy
run, whether planted healthy, one of the demo's healthy runs or a real fixture with no
problem (docs/analysis.md, "Planted problems")."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profscope.testing import planted
from profscope.tools import analysis

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "tests" / "data"
DEMO_HEALTHY, REAL_HEALTHY = planted.DEMO_HEALTHY, planted.REAL_HEALTHY


@pytest.fixture(scope="module")
def report(tmp_path_factory) -> dict:
    tmp = tmp_path_factory.mktemp("planted")
    runs = planted.build_logdir(tmp / "logdir", DATA)
    assert set(runs) == {c.name for c in planted.CASES}, "a real program's profile is missing from tests/data"
    return planted.score(planted.evaluate(tmp / "logdir", tmp / "cache", runs))


def test_every_family_and_rule_is_planted():
    """Each rule of the Summary (tools/analysis.py RULES: time, memory, compiler) planted,
    pairs (two rules in one run), healthy runs, real programs."""
    rules = {r for c in planted.CASES for r, _ in c.rules}
    assert set(planted.RULE.values()) == rules
    assert {r.id for r in analysis.RULES} == rules
    alone = {c.rules[0][0] for c in planted.CASES if len(c.rules) == 1}
    paired = {r for c in planted.CASES if len(c.rules) == 2 for r, _ in c.rules}
    assert alone == rules, rules - alone
    assert paired == rules, rules - paired
    assert {c.family for c in planted.CASES if c.healthy} >= {"kineto", "xplane_cpu", "xplane_tpu", "allocator", "snapshot", "jax"}
    assert sum(1 for c in planted.CASES if c.real and c.rules) >= 8


def test_recall_at_the_right_priority(report):
    misses = {c["case"]: c["missed"] + c["wrong"] for c in report["cases"] if c["missed"] or c["wrong"]}
    errors = {c["case"]: c["error"] for c in report["cases"] if c["error"]}
    assert not errors
    assert report["planted"] >= 30
    assert report["recall"] >= 0.90, (report["recall"], misses)


def test_no_p0_on_a_planted_healthy_run(report):
    p0 = {c["case"]: c["p0"] for c in report["cases"] if c["healthy"] and c["p0"]}
    assert report["false_p0"] == 0, p0


@pytest.fixture(scope="module")
def demo_client(demo_logdir, tmp_path_factory):
    return planted.client_for(demo_logdir, tmp_path_factory.mktemp("demo_cache"))


@pytest.fixture(scope="module")
def public_client(shared_fixtures, tmp_path_factory):
    return planted.client_for(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("public_cache"))


def _p0(client, prefixes) -> dict[str, list]:
    runs = [r for r in client.get("/data/plugin/profile/runs").json() if r.startswith(prefixes)]
    assert len(runs) >= len(prefixes)
    out = {}
    for run in runs:
        body = json.loads(planted.summary_bytes(client, run))
        out[run] = [f["id"] for f in body["findings"] if f["priority"] == "P0"]
    return out


def test_no_p0_on_the_demos_healthy_runs(demo_client):
    p0 = _p0(demo_client, DEMO_HEALTHY)
    assert not any(p0.values()), p0


def test_no_p0_on_the_real_fixtures_without_a_problem(public_client):
    p0 = _p0(public_client, REAL_HEALTHY)
    assert not any(p0.values()), p0

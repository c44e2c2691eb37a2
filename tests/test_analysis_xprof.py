"""The Summary's verdict against XProf 2.24.2's ``smart_suggestion`` on the same files
(issue 35: "where XProf's smart_suggestion runs on the same file, compare its verdict with
ours in a test, and explain every disagreement in the docs").

XProf's answers are goldens (tests/golden/smart_suggestion/index.json, recorded by
scripts/record_xprof_smart_suggestion.py): the public xplanes, the demo's xplanes, tf_gpu's
two hosts together and every xplane session of the planted suite. XProf's verdict is
NEEDS_ATTENTION when it makes a suggestion, else OPTIMAL; ours is the summary's
``status``. Every case where they differ must be a row of the table in docs/analysis.md's
"XProf smart_suggestion" section, with both verdicts as they are, and no other case may
be listed there: the docs cannot keep explaining a disagreement that is gone.
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import pytest

from profscope.testing import planted

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = json.loads((ROOT / "tests" / "golden" / "smart_suggestion" / "index.json").read_text())
CASES = sorted(k for k in GOLDEN if not k.startswith("_"))
DOCS = ROOT / "docs" / "analysis.md"
DEMO = ROOT / "src" / "profscope" / "demo" / "logdir"


def xprof_verdict(case: str) -> str:
    return "NEEDS_ATTENTION" if GOLDEN[case]["smart_suggestion"].get("suggestions") else "OPTIMAL"


def documented() -> dict[str, tuple[str, str]]:
    """{case: (ours, XProf's)} from the table rows of the docs' section."""
    text = DOCS.read_text()
    section = text.split("## XProf smart_suggestion", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| `([^`]+)` \| (OPTIMAL|NEEDS_ATTENTION)[^|]*\| (OPTIMAL|NEEDS_ATTENTION)[^|]*\|", section, re.M)
    return {case: (ours, xprof) for case, ours, xprof in rows}


@pytest.fixture(scope="module")
def ours(shared_fixtures, tmp_path_factory) -> dict[str, dict]:
    """Our summary of every golden case, from the same bytes XProf read."""
    tmp = tmp_path_factory.mktemp("xprof_cmp")
    runs = planted.build_logdir(tmp / "planted", ROOT / "tests" / "data")
    clients = {"planted": planted.client_for(tmp / "planted", tmp / "c1"),
               "fixture": planted.client_for(shared_fixtures / "public_profiles", tmp / "c2"),
               "demo": planted.client_for(DEMO, tmp / "c3")}
    out = {}
    for case in CASES:
        g = GOLDEN[case]
        if "planted" in g:
            base, client, run = tmp / "planted", clients["planted"], runs[g["planted"]]
            host = g["host"]
        elif g["fixture"]:
            base, client, run = shared_fixtures, clients["fixture"], f"xplane/{g['run']}"
            host = g["host"]
        else:
            base, client, run, host = ROOT, clients["demo"], g["run"], g["host"]
        digests = [hashlib.sha256((base / h["path"]).read_bytes()).hexdigest() for h in g["hosts"]]
        r = planted.summary_response(client, run, host)
        assert r.status_code == 200, (case, r.text)
        out[case] = {"sha256": digests, "body": r.json()}
    return out


def test_the_goldens_were_recorded_on_these_bytes(ours):
    """The same files (public, demo) and the same builders' output (planted) as XProf read."""
    for case in CASES:
        assert ours[case]["sha256"] == [h["sha256"] for h in GOLDEN[case]["hosts"]], \
            f"{case}: its input changed; record XProf's answer again (scripts/record_xprof_smart_suggestion.py)"


def test_xprof_2_24_2_has_one_rule_and_it_fires_on_the_planted_barrier():
    """The comparison has a case where XProf does speak: its one rule on the planted TPU
    profile whose steps spend 40 % in barrier-cores."""
    assert GOLDEN["_meta"]["xprof"] == "2.24.2" and GOLDEN["_meta"]["rules"] == ["BarrierCoresRule"]
    named = {s["ruleName"] for c in CASES for s in GOLDEN[c]["smart_suggestion"].get("suggestions") or []}
    assert named == {"BarrierCoresRule"}
    text = GOLDEN["planted_tpu_barrier_cores"]["smart_suggestion"]["suggestions"][0]["suggestionText"]
    assert "an average of 40.0% of each step time" in text


def test_every_disagreement_is_explained_in_the_docs(ours):
    differ = {c: (ours[c]["body"]["status"], xprof_verdict(c)) for c in CASES if ours[c]["body"]["status"] != xprof_verdict(c)}
    listed = documented()
    assert differ, "no disagreement at all: check that the comparison reads both verdicts"
    missing = {c: v for c, v in differ.items() if c not in listed}
    stale = {c: v for c, v in listed.items() if c not in differ}
    assert not missing, f"disagreements not explained in docs/analysis.md (case: ours, XProf's): {missing}"
    assert not stale, f"docs/analysis.md explains disagreements that are gone: {stale}"
    assert {c: listed[c] for c in differ} == differ


def _xprof_stragglers(case: str) -> set[str]:
    """The hosts XProf's BarrierCoresRule names as stragglers ("Host <b>H</b> average
    barrier-cores time fraction")."""
    text = " ".join(s["suggestionText"] for s in GOLDEN[case]["smart_suggestion"].get("suggestions") or [])
    return set(re.findall(r"Host <b>([^<]+)</b> average barrier-cores", text))


def test_every_straggler_disagreement_is_explained_in_the_docs(ours):
    """Where XProf names straggler hosts, ours must name the same by ``straggler_host``,
    or the case is listed in the docs' "Straggler hosts" list (and only then)."""
    ours_named = {c: {f["host"] for f in ours[c]["body"]["findings"] if f["id"] == "straggler_host"} for c in CASES}
    differ = {c for c in CASES if _xprof_stragglers(c) and _xprof_stragglers(c) != ours_named[c]}
    assert any(_xprof_stragglers(c) for c in CASES)
    section = DOCS.read_text().split("## XProf smart_suggestion", 1)[1].split("\n## ", 1)[0]
    listed = set(re.findall(r"^\* straggler `([^`]+)`", section, re.M))
    assert differ == listed, (differ, listed)

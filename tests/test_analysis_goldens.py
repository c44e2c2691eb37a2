"""The Summary on every public fixture equals its golden (tests/golden/summary, recorded
by scripts/record_summary_goldens.py and each finding checked by hand once: docs/analysis.md,
"Goldens on the real files"), byte for byte; a second cold workspace gives the same bytes
(issue 35: "the same input gives byte-identical JSON"); the corrupt profile and the
git-LFS pointer are listed as refused with their reason, never a failed summary."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from profscope.testing.planted import client_for, summary_bytes

GOLDEN = Path(__file__).parent / "golden" / "summary"
INDEX = json.loads((GOLDEN / "index.json").read_text())


@pytest.fixture(scope="module")
def public_client(shared_fixtures, tmp_path_factory):
    return client_for(shared_fixtures / "public_profiles", tmp_path_factory.mktemp("summary_cache"))


def test_every_public_run_has_a_golden(public_client):
    runs = set(public_client.get("/data/plugin/profile/runs").json())
    assert runs == {e["run"] for e in INDEX.values()}
    multi = {e["run"] for e in INDEX.values() if e["host"] == "ALL_HOSTS"}
    assert "xplane/tf_gpu/GPU-multi-worker" in multi


@pytest.mark.parametrize("case", sorted(INDEX))
def test_summary_equals_its_golden(public_client, case):
    entry = INDEX[case]
    got = summary_bytes(public_client, entry["run"], entry["host"])
    want = (GOLDEN / f"{case}.json").read_bytes()
    if got != want:
        g, w = json.loads(got), json.loads(want)
        assert [(f["id"], f["priority"], f["host"]) for f in g["findings"]] == \
            [(f["id"], f["priority"], f["host"]) for f in w["findings"]], case
        assert g == w, case
    assert got == want


@pytest.mark.parametrize("case", ["xplane_tf_gpu_GPU-multi-worker.ALL_HOSTS", "traces_kineto_resnet50_v100.pt.trace.json.gz",
                                  "snapshots_niu_fwd_bwd_200_mixed.pickle"])
def test_a_second_cold_workspace_gives_the_same_bytes(shared_fixtures, tmp_path, public_client, case):
    entry = INDEX[case]
    other = client_for(shared_fixtures / "public_profiles", tmp_path / "cache")
    assert summary_bytes(other, entry["run"], entry["host"]) == summary_bytes(public_client, entry["run"], entry["host"])


@pytest.mark.parametrize(("run", "says"), [
    ("xplane/tpu_inference_corrupt/2025_12_15_tpu", "truncated XSpace profile"),
    ("snapshots/kbjiang_memory_256_lfs_pointer.pickle", "git-LFS pointer"),
])
def test_unreadable_files_are_refused_with_their_reason(shared_fixtures, public_client, run, says):
    body = json.loads(summary_bytes(public_client, run))
    assert body["refused"], body
    for r in body["refused"]:
        assert says in r["reason"]
        # named as in the log directory, so that the JSON is the same on every machine
        assert not Path(r["file"]).is_absolute(), r
        assert (shared_fixtures / "public_profiles" / r["file"]).is_file(), r

"""Memory viewer and memory profile on the real GPU, TPU and ROCm profiles of
``shared/fixtures/public_profiles``, through the XProf data API, against XProf 2.24.2's
own answers (recorded by scripts/record_xprof_public_memory_golden.py): every module and
memory space of every profile, and each profile's memory profile, field for field and
double for double (profscope's extra fields aside)."""

from __future__ import annotations

import gzip
import hashlib
import json
from pathlib import Path

import pytest

from tests.test_memory_profile import _canonical
from tests.test_memory_viewer import _exact_equal

GOLDEN = Path(__file__).parent / "golden" / "public_memory"
INDEX = json.loads((GOLDEN / "index.json").read_text())
CASES = INDEX["cases"]


def _id(case: dict) -> str:
    return "/".join(str(case.get(k, "")) for k in ("case", "tool", "module", "space")).rstrip("/")


@pytest.fixture(scope="module")
def client(shared_fixtures, tmp_path_factory):
    from fastapi.testclient import TestClient

    from profscope.cache.store import DiskCache
    from profscope.app.workspace import Workspace
    from profscope.server import create_app
    from profscope.storage import LogDir

    for case in CASES:
        data = (shared_fixtures / case["input"]).read_bytes()
        assert hashlib.sha256(data).hexdigest() == case["input_sha256"], f"{case['input']} is not the file recorded"
    ws = Workspace(LogDir(str(shared_fixtures / "public_profiles"), listing_ttl=0),
                   DiskCache(tmp_path_factory.mktemp("cache")))
    return TestClient(create_app(ws))


def _ask(client, case: dict) -> dict:
    path = Path(case["input"])  # public_profiles/xplane/<name>/plugins/profile/<session>/<host>.xplane.pb
    params = {"run": f"xplane/{path.parts[2]}/{path.parts[5]}", "host": path.name.removesuffix(".xplane.pb"),
              "tag": case.get("tool", "memory_profile")}
    if "module" in case:
        params.update(module_name=case["module"], memory_space=case["space"])
    r = client.get("/data/plugin/profile/data", params=params)
    assert r.status_code == 200, r.text[:500]
    return r.json()


def _golden(case: dict) -> dict:
    return json.loads(gzip.decompress((GOLDEN / case["golden"]).read_bytes()))


def test_golden_covers_every_public_profile(shared_fixtures):
    profiles = sorted(str(p.relative_to(shared_fixtures)) for p in
                      (shared_fixtures / "public_profiles" / "xplane").glob("*/plugins/profile/*/*.xplane.pb")
                      if "corrupt" not in str(p))
    assert sorted({c["input"] for c in CASES}) == profiles
    recorded = [c for c in CASES if "golden" in c]
    assert sum(c["tool"] == "memory_viewer" for c in recorded) >= 30  # every module and memory space
    assert {c["case"] for c in recorded if c["tool"] == "memory_profile"} >= {"tf_gpu", "tpu_inference",
                                                                            "mi300_jax08_gemm"}


@pytest.mark.parametrize("case", [c for c in CASES if c.get("tool") == "memory_viewer" and "golden" in c], ids=_id)
def test_memory_viewer_matches_xprof(client, case):
    ours = {k: v for k, v in _ask(client, case).items() if k != "profscope"}
    _exact_equal(ours, _golden(case))


@pytest.mark.parametrize("case", [c for c in CASES if c.get("tool") == "memory_profile" and "golden" in c], ids=_id)
def test_memory_profile_matches_xprof(client, case):
    ours = {k: v for k, v in _ask(client, case).items() if k != "profscope"}
    _exact_equal(_canonical(ours), _canonical(_golden(case)))


@pytest.mark.parametrize("case", [c for c in CASES if "same_as" in c], ids=_id)
def test_identical_file_of_another_host_gets_the_same_answer(client, case):
    first = next(c for c in CASES if c["input"] == case["same_as"] and c.get("tool") == "memory_profile")
    ours = {k: v for k, v in _ask(client, {**case, "tool": "memory_profile"}).items() if k != "profscope"}
    _exact_equal(_canonical(ours), _canonical(_golden(first)))

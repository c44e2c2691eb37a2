"""The memory viewer through the data API: profiles, dumps, text-only dumps, bad input."""

from __future__ import annotations

import pytest

MIB = 1024 * 1024


def _run(expected, program):
    p = expected["programs"][program]
    return f"{p['run']}/{p['session']}", p


def _data(client, run, **params):
    return client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_viewer", **params})


def test_profile_modules_match_xprof_figures(demo_client, demo_expected):
    for program in ("mlp", "transformer", "convnet"):
        run, p = _run(demo_expected, program)
        assert "memory_viewer" in demo_client.get("/data/plugin/profile/run_tools", params={"run": run}).json()
        res = _data(demo_client, run, host="demo-host", module_name=p["profile_module_name"], memory_space=0)
        assert res.status_code == 200, res.text
        body = res.json()
        xprof = p["xprof_memory_viewer"][p["profile_module_name"]]
        assert body["moduleName"] == p["profile_module_name"].rsplit("(", 1)[0] or body["moduleName"]
        assert round(body["peakHeapMib"] * MIB) == xprof["peakHeapBytes"]
        assert round(body["totalBufferAllocationMib"] * MIB) == xprof["totalBufferAllocationBytes"]
        assert len(body["heapSizes"]) == xprof["heapSizesLength"]


def test_dump_and_profile_give_the_same_result(demo_client, demo_expected):
    run, p = _run(demo_expected, "mlp")
    from_profile = _data(demo_client, run, module_name=p["profile_module_name"]).json()
    from_dump = _data(demo_client, "dumps/mlp", module_name=p["profile_module_name"]).json()
    assert from_dump == from_profile


def test_page_view_and_module_ranking(demo_client, demo_expected):
    run, p = _run(demo_expected, "transformer")
    full = _data(demo_client, run, module_name=p["profile_module_name"]).json()
    page = _data(demo_client, run, module_name=p["profile_module_name"], view="page").json()
    assert page["peakHeapMib"] == full["peakHeapMib"]
    assert max(page["heapSizes"]) == max(full["heapSizes"])
    assert len(page["profscope"]["heapPositions"]) == len(page["heapSizes"])
    peaks = demo_client.get("/api/module_peaks", params={"run": run}).json()
    assert [r["peakHeapMib"] for r in peaks] == sorted((r["peakHeapMib"] for r in peaks), reverse=True)
    assert peaks[0]["moduleName"] == p["profile_module_name"] and peaks[0]["hloModuleName"] == full["moduleName"]
    assert len(peaks) == len(p["metadata_modules"])


def test_text_only_dump(make_client, demo_copy, demo_expected):
    for f in (demo_copy / "dumps" / "mlp").glob("*.hlo.pb"):
        f.unlink()
    client = make_client(demo_copy)
    name = demo_expected["programs"]["mlp"]["profile_module_name"]
    assert client.get("/data/plugin/profile/module_list", params={"run": "dumps/mlp"}).text == name
    body = _data(client, "dumps/mlp", module_name=name).json()
    assert body["textOnly"] is True and ".hlo.pb" in body["note"]
    assert body["totals"]["totalBufferAllocationBytes"] == sum(a["sizeBytes"] for a in body["allocations"])


def _error(res, status):
    assert res.status_code == status, res.text
    body = res.json()
    assert body["ok"] is False and body["error"]
    return body


@pytest.mark.parametrize(
    "params, status, words",
    [
        ({}, 400, "module_name"),
        ({"module_name": "jit_nope(1)"}, 404, "no module"),
        ({"module_name": "jit_train_step(14)", "memory_space": "7"}, 404, "memory space"),
        ({"module_name": "jit_train_step(14)", "memory_space": "abc"}, 400, "integer"),
        ({"module_name": "jit_train_step(14)", "host": "other-host"}, 404, "no host"),
    ],
)
def test_bad_requests(demo_client, demo_expected, params, status, words):
    run, _ = _run(demo_expected, "mlp")
    assert words in _error(_data(demo_client, run, **params), status)["error"]


def test_corrupt_and_incomplete_dumps(make_client, demo_copy, demo_expected):
    name = demo_expected["programs"]["mlp"]["profile_module_name"]
    dump = demo_copy / "dumps" / "mlp"
    after = next(dump.glob("*after_optimizations.hlo.pb"))
    before = next(dump.glob("*before_optimizations.hlo.pb"))
    good = after.read_bytes()

    after.write_bytes(good[: len(good) // 2])
    body = _error(_data(make_client(demo_copy), "dumps/mlp", module_name=name), 422)
    assert after.name in body["error"] and body["file"].endswith(after.name)

    after.write_bytes(before.read_bytes())  # an HloProto without a buffer assignment
    body = _error(_data(make_client(demo_copy), "dumps/mlp", module_name=name), 422)
    assert "buffer assignment" in body["error"] and body["file"].endswith(after.name)

    after.write_bytes(b"\x00garbage\xff" * 10)
    _error(_data(make_client(demo_copy), "dumps/mlp", module_name=name), 422)

    # The profile run beside it is not disturbed.
    run, p = _run(demo_expected, "mlp")
    assert _data(make_client(demo_copy), run, module_name=p["profile_module_name"]).status_code == 200

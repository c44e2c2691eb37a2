"""OOM risk's planner (tools/oom_plan.py, app/oom_planning.py): "what would make it fit",
checked against XLA itself. A real JAX train step (profscope.testing.batch_programs) is
compiled here on CPU at several batch sizes, with and without ``donate_argnums``; XLA's
``compiled.memory_analysis()`` (argument + output + temp - alias) is the truth the
planner's answers are held to."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from profscope.testing import batch_programs
from profscope.tools import oom_plan, oom_risk

ROOT = Path(__file__).resolve().parents[1]
BATCHES = [32, 64, 128, 256]
DATA = "/data/plugin/profile/data"


@pytest.fixture(scope="module")
def four_batches(tmp_path_factory) -> tuple[Path, dict]:
    """One profile holding the train step compiled at 32, 64, 128 and 256."""
    out = tmp_path_factory.mktemp("four_batches")
    return out / "profile", batch_programs.make(out, BATCHES, profile=True)


def _run(client) -> str:
    runs = client.get("/data/plugin/profile/runs").json()
    assert len(runs) == 1, runs
    return runs[0]


def _risk(client, **params) -> dict:
    res = client.get(DATA, params={"run": _run(client), "tag": "oom_risk", **params})
    assert res.status_code == 200, res.text
    return res.json()


def _evidence(client, module: str) -> dict:
    mv = client.get(DATA, params={"run": _run(client), "tag": "memory_viewer", "module_name": module}).json()
    return oom_risk.compiled_evidence(mv, module)


# -- savings priced from the buffers ---------------------------------------------------


def test_donation_saving_is_what_xla_aliases_when_donated(make_client, tmp_path):
    """The undonated step's plan prices donation at exactly the bytes XLA aliases once the
    same step is compiled with donate_argnums (alias_size_in_bytes), arguments and outputs
    unchanged; the peak XLA then really saves lies between the plan's lower bound (the
    temporaries it may need) and that figure."""
    undonated = batch_programs.make(tmp_path / "u", [64], profile=True, donate=False)["batches"]["64"]
    donated = batch_programs.make(tmp_path / "d", [64])["batches"]["64"]
    body = _risk(make_client(tmp_path / "u" / "profile"), capacity_bytes=10_000_000)
    change = next(c for c in body["plan"]["savings"] if c["id"] == "donate")
    assert undonated["alias_size_in_bytes"] == 0
    assert change["savedBytes"] == donated["alias_size_in_bytes"] - undonated["alias_size_in_bytes"]
    assert (undonated["argument_size_in_bytes"], undonated["output_size_in_bytes"]) == \
        (donated["argument_size_in_bytes"], donated["output_size_in_bytes"])
    real = undonated["peak"] - donated["peak"]
    assert change["savedAtLeastBytes"] <= real <= change["savedBytes"], (change, real)
    # The resulting peak and its tier at the requested capacity.
    assert change["peakAfterBytes"] == body["peakBytes"] - change["savedBytes"]
    assert change["riskAfter"] == oom_risk.tier_of(change["peakAfterBytes"], 10_000_000, body["thresholds"])
    assert body["risk"] == "OOM" and change["riskAfter"] == "LOW"  # 11.1 MB does not fit 10 MB; 5.6 MB does


def test_remat_names_the_activations_and_is_conservative_on_a_real_remat(make_client):
    """remat_off (scripts/make_oom_programs.py): the plan names the largest activations
    live at the peak; remat_on, the same program under jax.checkpoint, compiles to a peak
    no higher than the plan's peak after rematerialising."""
    programs = ROOT / "tests" / "data" / "oom_programs"
    meta = json.loads((programs / "programs.json").read_text())
    client = make_client(programs)
    runs = client.get("/data/plugin/profile/runs").json()
    run = next(r for r in runs if r.startswith("remat_off/"))
    body = client.get(DATA, params={"run": run, "tag": "oom_risk"}).json()
    change = next(c for c in body["plan"]["savings"] if c["id"] == "remat")
    acts = next(c for c in body["contributors"] if c["category"] == "activations")
    assert change["activationBytes"] == acts["bytes"]
    assert [b["name"] for b in change["buffers"]] == [i["name"] for i in acts["items"][:oom_plan.TOP]]
    assert change["savedBytes"] == acts["bytes"] - acts["items"][0]["bytes"]
    assert batch_programs.peak_of(meta["remat_on"]["train_memory_analysis"]) <= change["peakAfterBytes"]


def test_shard_and_precision_follow_the_buffers(four_batches, make_client):
    client = make_client(four_batches[0])
    body = _risk(client, capacity_bytes=8_000_000, shards=4)
    by = {c["id"]: c for c in body["plan"]["savings"]}
    state = sum(c["bytes"] for c in body["contributors"] if c["category"] in ("parameters", "optimizer_state"))
    assert by["shard"]["stateBytes"] == state and by["shard"]["shards"] == 4
    assert by["shard"]["bytesPerDevice"] * 4 >= state > (by["shard"]["bytesPerDevice"] - 1) * 4
    f32 = sum(i["bytes"] for c in body["contributors"] for i in c["items"] if i["shape"].startswith("f32["))
    assert by["precision"]["float32Bytes"] == f32 and by["precision"]["savedBytes"] == f32 // 2
    # Another N is another answer (a different cache entry).
    assert _risk(client, capacity_bytes=8_000_000, shards=8)["plan"]["savings"] != body["plan"]["savings"]


# -- batch size that fits --------------------------------------------------------------


def test_any_two_compilations_predict_the_other_two(four_batches, make_client):
    """From any 2 of the 4 compilations the predicted peak of the other 2 is within 5 %
    of XLA's memory_analysis() peak."""
    profile, truth = four_batches
    client = make_client(profile)
    modules = [m["moduleName"] for m in _risk(client)["modules"] if m.get("isTrainingStep")]
    evs = [_evidence(client, m) for m in modules]
    assert len({oom_plan.signature(e) for e in evs}) == 1
    values, info = oom_plan.sizes(evs)
    assert sorted(values) == BATCHES and info["parameter"] == "batch_0_"
    points = {v: {"size": v, "peakBytes": e["peakBytes"], "moduleName": e["moduleName"], "categories": {}}
              for v, e in zip(values, evs, strict=True)}
    answer = {"capacityBytes": None, "thresholds": oom_risk.DEFAULT_THRESHOLDS}
    errors = []
    for pair in itertools.combinations(BATCHES, 2):
        for other in set(BATCHES) - set(pair):
            fit = oom_plan.batch_fit([points[b] for b in pair], answer, info, other)
            real = truth["batches"][str(other)]["peak"]
            errors.append((pair, other, fit["at"]["peakBytes"] / real - 1))
    assert max(abs(e) for *_, e in errors) <= 0.05, errors


def test_largest_batch_that_fits_against_real_compiles(four_batches, make_client, tmp_path):
    """The largest batch the plan says fits 9 MB (and stays below HIGH) compiles to a
    peak that fits; one more does not. The peak predicted at batch=200 (between two
    compilations) and at batch=512 (beyond them) is XLA's within 5 %."""
    profile, _ = four_batches
    cap = 9_000_000
    client = make_client(profile)
    body = _risk(client, capacity_bytes=cap, batch=200)
    fit = body["plan"]["batch"]
    assert fit["trust"]["ok"] and fit["trust"]["checked"], fit["trust"]
    assert [p["size"] for p in fit["points"]] == BATCHES
    fits, high = fit["largest"]["fits"], fit["largest"]["belowHigh"]
    assert not fits["extrapolated"] and not high["extrapolated"]
    fits, high = fits["size"], high["size"]
    real = batch_programs.make(tmp_path / "check", [fits, fits + 1, high, high + 1, 200, 512])["batches"]
    assert real[str(fits)]["peak"] <= cap < real[str(fits + 1)]["peak"]
    assert real[str(high)]["peak"] < cap * 0.9 <= real[str(high + 1)]["peak"]
    assert abs(fit["at"]["peakBytes"] / real["200"]["peak"] - 1) <= 0.05 and fit["at"]["interpolated"]
    assert fit["at"]["risk"] == oom_risk.tier_of(fit["at"]["peakBytes"], cap, body["thresholds"])
    beyond = _risk(client, capacity_bytes=cap, batch=512)["plan"]["batch"]["at"]
    assert abs(beyond["peakBytes"] / real["512"]["peak"] - 1) <= 0.05 and not beyond["interpolated"]


def test_one_compilation_says_the_fit_cannot_be_made(make_client):
    client = make_client(ROOT / "tests" / "data" / "oom_programs")
    run = next(r for r in client.get("/data/plugin/profile/runs").json() if r.startswith("undonated/"))
    body = client.get(DATA, params={"run": run, "tag": "oom_risk", "capacity_bytes": 40_000_000}).json()
    trust = body["plan"]["batch"]["trust"]
    assert not trust["ok"] and "one compilation" in trust["reason"]
    assert [p["size"] for p in body["plan"]["batch"]["points"]] == [None]  # no size to read from one compilation
    assert "largest" not in body["plan"]["batch"]


# -- profscope report ------------------------------------------------------------------


def test_report_carries_the_plan_in_every_format(four_batches, tmp_path):
    """``profscope report --batch --shards``: the JSON holds the page's plan; Markdown and
    HTML print the priced changes, the largest batch that fits and the peak at --batch."""
    import subprocess
    import sys

    profile, _ = four_batches

    def report(fmt):
        res = subprocess.run([sys.executable, "-m", "profscope", "report", str(profile), "--device-memory", "9000000",
                              "--batch", "200", "--shards", "4", "--format", fmt, "--cache-dir", str(tmp_path / "cache")],
                             capture_output=True, text=True, timeout=180, check=False)
        assert res.returncode == 0, res.stderr
        return res.stdout

    doc = json.loads(report("json"))
    (r,) = doc["reports"]
    plan = r["plan"]
    assert {c["id"] for c in plan["savings"]} >= {"shard", "precision", "remat"}
    assert next(c for c in plan["savings"] if c["id"] == "shard")["shards"] == 4
    fits, at = plan["batch"]["largest"]["fits"], plan["batch"]["at"]
    assert at["size"] == 200
    md = report("markdown")
    assert "### What would make it fit" in md
    assert f"largest that fits 8.58 MiB: **{fits['size']:,}**" in md
    assert "at 200: **" in md and f"({at['peakBytes']:,} bytes)" in md
    html = report("html")
    assert "What would make it fit" in html and 'data-change="shard"' in html
    assert f"<b>{fits['size']:,}</b>" in html and f"{at['peakBytes']:,} bytes" in html
    # The summary names the least change that gets below HIGH, and the batch that does.
    assert r["risk"] == "OOM"
    enough = min((c for c in plan["savings"] if c["riskAfter"] in ("LOW", "MEDIUM")), key=lambda c: c["savedBytes"])
    below = plan["batch"]["largest"]["belowHigh"]["size"]
    assert plan["headline"].startswith(enough["title"]) and f"batch <= {below:,} stays below HIGH" in plan["headline"]
    assert f"| {plan['headline']} |" in md and f'<td class="muted plan-headline">{plan["headline"]}</td>' in html.replace("&lt;", "<")


# -- capacity that is honest: JAX on GPU -----------------------------------------------


def test_jax_on_gpu_capacity_is_the_preallocated_share(four_batches, make_client, tmp_path):
    """Told the run was JAX on a GPU, the requested device memory becomes what JAX
    preallocates of it (XLA_PYTHON_CLIENT_MEM_FRACTION: 0.75 by default, or as given),
    and the verdict and the plan are made against that capacity."""
    client = make_client(four_batches[0])
    plain = _risk(client, device_memory="12MB")
    jax = _risk(client, device_memory="12MB", jax_gpu="1")
    frac = _risk(client, device_memory="12MB", jax_mem_fraction="0.9")
    assert plain["capacityBytes"] == 12_000_000 and plain["risk"] == "MEDIUM"  # 9.32 MB: 77.7 %
    assert jax["capacityBytes"] == 9_000_000 and jax["deviceBytes"] == 12_000_000 and jax["risk"] == "OOM"
    assert "XLA_PYTHON_CLIENT_MEM_FRACTION=0.75" in jax["capacityDetail"]
    assert frac["capacityBytes"] == 10_800_000 and "XLA_PYTHON_CLIENT_MEM_FRACTION=0.9" in frac["capacityDetail"]
    assert jax["plan"]["batch"]["capacityBytes"] == 9_000_000
    assert jax["plan"]["batch"]["largest"]["fits"]["size"] < plain["plan"]["batch"]["largest"]["fits"]["size"]
    res = client.get(DATA, params={"run": _run(client), "tag": "oom_risk", "jax_mem_fraction": "1.5"})
    assert res.status_code == 400 and "jax_mem_fraction" in res.text
    # The CLI says the same with --jax-gpu / --jax-mem-fraction.
    import subprocess
    import sys

    def report(*args):
        return subprocess.run([sys.executable, "-m", "profscope", "report", str(four_batches[0]), "--device-memory", "12MB",
                               "--format", "json", "--cache-dir", str(tmp_path / "cache"), *args],
                              capture_output=True, text=True, timeout=180, check=False)

    (r,) = json.loads(report("--jax-gpu").stdout)["reports"]
    assert r["capacityBytes"] == 9_000_000 and r["risk"] == "OOM"
    (r,) = json.loads(report("--jax-mem-fraction", "0.9").stdout)["reports"]
    assert r["capacityBytes"] == 10_800_000
    bad = report("--jax-mem-fraction", "2")
    assert bad.returncode == 2 and "--jax-mem-fraction" in bad.stderr


def test_an_xla_dump_of_two_sizes_is_fitted_too(make_client, tmp_path):
    """Two compilations in one XLA dump (the optimized HLO protos of batch 64 and 256):
    matched, sized and fitted as in a profile; the peak at 128 is XLA's within 5 %."""
    truth = batch_programs.make(tmp_path, [64, 256], dump=True)
    real = batch_programs.make(tmp_path / "check", [128])["batches"]["128"]["peak"]
    assert len(list((tmp_path / "dump").iterdir())) == 2
    body = _risk(make_client(tmp_path / "dump"), capacity_bytes=9_000_000, batch=128)
    fit = body["plan"]["batch"]
    assert [p["size"] for p in fit["points"]] == [64, 256]
    # The memory viewer's peak is XLA's (within a few bytes: the output tuple's pointers).
    assert all(abs(p["peakBytes"] - truth["batches"][str(p["size"])]["peak"]) <= 64 for p in fit["points"])
    assert fit["dimension"]["parameter"] == "batch_0_" and "cannot be checked" in fit["trust"]["reason"]
    assert fit["trust"]["ok"] and not fit["trust"]["checked"]  # usable, but two points cannot show a jump
    assert abs(fit["at"]["peakBytes"] / real - 1) <= 0.05 and fit["at"]["interpolated"]


def test_a_real_gemm_profile_at_many_shapes_is_no_batch_fit(make_client, shared_fixtures):
    """The public MI300 JAX profile compiles one matmul (``jit_dot``) at five M x K shapes:
    the compilations match, but two dimensions change at once, so the plan says no one
    batch size explains the peaks and predicts nothing, rather than a line through them."""
    client = make_client(shared_fixtures / "public_profiles" / "xplane" / "mi300_jax08_gemm")
    body = _risk(client, batch=32768)
    fit = body["plan"]["batch"]
    assert len(fit["points"]) == 5 and {p["moduleName"].split("(")[0] for p in fit["points"]} == {"jit_dot"}
    assert not fit["trust"]["ok"] and "more than one size changes" in fit["trust"]["reason"]
    assert "at" not in fit and "largest" not in fit
    assert all(c["peakAfterBytes"] >= 0 for c in body["plan"]["savings"])


def test_two_profiles_of_two_sizes_are_fitted_together(make_client, tmp_path):
    """Two profiles (runs) of the same step, at batch 64 and 256: ``fit_with=`` names the
    other run; its compilation matches and the peak at 128 is XLA's within 5 %. An
    unknown run is a 404 naming it; the CLI's --fit-with says the same."""
    import subprocess
    import sys

    batch_programs.make(tmp_path / "logs" / "b64", [64], profile=True)
    batch_programs.make(tmp_path / "logs" / "b256", [256], profile=True)
    real = batch_programs.make(tmp_path / "check", [128])["batches"]["128"]["peak"]
    client = make_client(tmp_path / "logs")
    runs = client.get("/data/plugin/profile/runs").json()
    small, big = (next(r for r in runs if r.startswith(p)) for p in ("b64/", "b256/"))
    alone = client.get(DATA, params={"run": big, "tag": "oom_risk", "capacity_bytes": 9_000_000}).json()
    assert not alone["plan"]["batch"]["trust"]["ok"]  # one compilation in the run itself
    body = client.get(DATA, params={"run": big, "tag": "oom_risk", "capacity_bytes": 9_000_000, "batch": 128, "fit_with": small}).json()
    fit = body["plan"]["batch"]
    assert [p["size"] for p in fit["points"]] == [64, 256] and fit["points"][0]["moduleName"].startswith(small + ": ")
    assert abs(fit["at"]["peakBytes"] / real - 1) <= 0.05
    res = client.get(DATA, params={"run": big, "tag": "oom_risk", "fit_with": "no_such_run"})
    assert res.status_code == 404 and "no_such_run" in res.json()["error"]
    out = subprocess.run([sys.executable, "-m", "profscope", "report", str(tmp_path / "logs"), "--run", big, "--fit-with", small,
                          "--batch", "128", "--device-memory", "9000000", "--format", "json", "--cache-dir", str(tmp_path / "cache")],
                         capture_output=True, text=True, timeout=180, check=True).stdout
    (r,) = json.loads(out)["reports"]
    assert r["plan"]["batch"]["at"]["peakBytes"] == fit["at"]["peakBytes"]

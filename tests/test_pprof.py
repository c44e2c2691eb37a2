"""JAX device-memory profiles (pprof): the reader, the run listing and the memory profile
tool's payload, on files JAX made here (tests/data/jax_memory_profiles, by
scripts/make_jax_memory_profiles.py) and on GPU/TPU-shaped files from
profscope.testing.pprof_profiles. Totals and the top sites are checked against an
independent decode of profile.proto written here from the wire format (not our reader);
the leak of the successive profiles is named at the line JAX's stacks give for it."""

from __future__ import annotations

import gzip
import json
import shutil
from collections import defaultdict
from pathlib import Path

import pytest

from profscope.errors import BadInput
from profscope.formats import pprof
from profscope.formats.protowire import decode_varint, encode_varint
from profscope.testing.pprof_profiles import multi_device_buffers, profile_bytes
from profscope.tools import memory_profile_pprof as mpp

DATA = Path(__file__).parent / "data" / "jax_memory_profiles"
EXPECTED = json.loads((DATA / "expected.json").read_text())
LEAK = sorted((DATA / "leak").glob("*.prof"))


# -- an independent decode of profile.proto (field numbers from google/pprof) ------------

def _fields(buf: bytes):
    """(field number, wire type, value) of one message: ints for varints, bytes for LEN."""
    pos = 0
    while pos < len(buf):
        tag, pos = decode_varint(buf, pos)
        number, wire = tag >> 3, tag & 7
        if wire == 0:
            v, pos = decode_varint(buf, pos)
        elif wire == 2:
            n, pos = decode_varint(buf, pos)
            v, pos = buf[pos:pos + n], pos + n
        else:
            raise AssertionError(f"wire type {wire} in field {number}")
        yield number, wire, v


def _ints(wire: int, v) -> list[int]:
    """A repeated int64/uint64: one varint, or packed (LEN holding varints)."""
    if wire == 0:
        return [v]
    out, pos = [], 0
    while pos < len(v):
        x, pos = decode_varint(v, pos)
        out.append(x)
    return out


def independent_decode(path: Path) -> dict:
    """strings, samples (values, location ids leaf first, labels), locations -> [(function
    id, line)], functions -> (name, file)."""
    raw = gzip.decompress(path.read_bytes())
    strings, samples, locations, functions = [], [], {}, {}
    for number, wire, v in _fields(raw):
        if number == 6:
            strings.append(v.decode())
        elif number == 2:
            sm = {"values": [], "locs": [], "labels": {}}
            for n2, w2, v2 in _fields(v):
                if n2 == 1:
                    sm["locs"] += _ints(w2, v2)
                elif n2 == 2:
                    sm["values"] += _ints(w2, v2)
                elif n2 == 3:
                    lab = {n3: v3 for n3, _, v3 in _fields(v2)}
                    sm["labels"][lab.get(1, 0)] = lab.get(2, 0)
            samples.append(sm)
        elif number == 4:
            loc_id, lines = 0, []
            for n2, _, v2 in _fields(v):
                if n2 == 1:
                    loc_id = v2
                elif n2 == 4:
                    ln = {n3: v3 for n3, _, v3 in _fields(v2)}
                    lines.append((ln.get(1, 0), ln.get(2, 0)))
            locations[loc_id] = lines
        elif number == 5:
            fn = {n2: v2 for n2, _, v2 in _fields(v)}
            functions[fn.get(1, 0)] = (fn.get(2, 0), fn.get(4, 0))
    return {"strings": strings, "samples": samples, "locations": locations, "functions": functions}


def independent_top(path: Path, n: int) -> list[tuple[str, str, int, int]]:
    """(function, file, line, bytes) by allocation site: the innermost frame whose file is
    outside site-packages and jax/_src (docs/jax_memory_profiles.md), the bytes value the
    sample_type in unit "bytes" (JAX's second)."""
    d = independent_decode(path)
    s = d["strings"]
    by = defaultdict(int)
    for sm in d["samples"]:
        frames = [(s[d["functions"][f][0]], s[d["functions"][f][1]], line)
                  for lid in sm["locs"] for f, line in d["locations"][lid]]  # leaf first
        site = next((f for f in frames if "/site-packages/" not in f[1] and "/jax/_src/" not in f[1]), frames[0])
        by[site] += sm["values"][1]
    rows = sorted(by.items(), key=lambda kv: -kv[1])
    return [(*k, v) for k, v in rows if v > 0][:n]


# -- the reader and the payload -------------------------------------------------------------

@pytest.mark.parametrize("path", [DATA / "mlp" / "memory.prof", *LEAK], ids=lambda p: p.parent.name + "/" + p.name)
def test_totals_and_top_sites_equal_an_independent_decode(path):
    p = pprof.read_profile(path.read_bytes(), path.name)
    ind = independent_decode(path)
    assert p.sample_types == [("allocations", "count"), ("space", "bytes")]
    assert len(p.samples) == len(ind["samples"]) > 0
    total = mpp.totals(p)
    assert total["bytes"] == sum(sm["values"][1] for sm in ind["samples"]) > 0
    assert total["count"] == sum(sm["values"][0] for sm in ind["samples"])
    by_device = defaultdict(int)
    s = ind["strings"]
    for sm in ind["samples"]:
        labels = {s[k]: s[v] for k, v in sm["labels"].items()}
        by_device[(labels.get("device", ""), labels["kind"])] += sm["values"][1]
    assert {(r["device"], r["kind"]): r["bytes"] for r in total["byDeviceKind"]} == dict(by_device)
    assert ("cpu:0", "buffer") in by_device and ("", "executable") in by_device
    top = [(r["function"], r["file"], r["line"], r["bytes"]) for r in mpp.top_sites(p) if r["bytes"] > 0]
    assert top[:5] == independent_top(path, 5)
    icicle = mpp.icicle(p)
    assert icicle["values"][0] == total["bytes"] == icicle["totalBytes"]


def test_the_leak_is_named_at_its_line():
    """Successive profiles of a loop that keeps its arrays: the stacks that grew from one
    profile to the next are led by the leaking function's line, as the script that made
    the files found it in its own source."""
    profiles = [pprof.read_profile(p.read_bytes(), p.name) for p in LEAK]
    line = (EXPECTED["leak_function"], EXPECTED["leak_file"], EXPECTED["leak_line"])
    for base, current in zip(profiles, profiles[1:]):
        d = mpp.diff(base, current)
        site = d["grew"][0]["site"]
        assert (site["function"], site["file"].rsplit("/", 1)[-1], site["line"]) == line
        assert d["deltaBytes"] == mpp.totals(current)["bytes"] - mpp.totals(base)["bytes"] > 0
        assert sum(r["deltaBytes"] for r in d["grew"]) + sum(r["deltaBytes"] for r in d["shrank"]) == d["deltaBytes"]
    live = [mpp.totals(p)["bytes"] for p in profiles]
    assert live == sorted(live) and live[0] < live[-1]


@pytest.mark.parametrize("platform,label", [("gpu", "cuda:{}"), ("tpu", "TPU_{}")])
def test_builder_devices(platform, label):
    buffers = multi_device_buffers(platform, devices=4)
    p = pprof.read_profile(profile_bytes(buffers), "built.prof")
    assert mpp.devices(p) == [label.format(i) for i in range(4)] + [""]
    for i in range(4):
        dev = label.format(i)
        want = sum(b.bytes for b in buffers if b.device == dev)
        assert mpp.totals(p, dev)["bytes"] == want
        assert mpp.icicle(p, dev)["totalBytes"] == want
        assert sum(r["bytes"] for r in mpp.buffers(p, dev)["rows"]) == want
    assert mpp.top_sites(p)[0]["function"] == "init_params"  # device_put is a library frame


# -- bad input ----------------------------------------------------------------------------

def _value_as_fixed64() -> bytes:
    """A Profile whose first sample writes its value with wire type 1 (fixed64), not a
    varint: field 2 of Sample is ``repeated int64``."""
    raw = profile_bytes(multi_device_buffers("gpu", 1)[:1], compress=False)
    sample = encode_varint(1 << 3 | 0) + b"\x01" + encode_varint(2 << 3 | 1) + (7).to_bytes(8, "little")
    return gzip.compress(raw + encode_varint(2 << 3 | 2) + encode_varint(len(sample)) + sample)


def test_bad_input_names_the_file():
    good = (DATA / "mlp" / "memory.prof").read_bytes()
    cases = {
        "truncated.prof": gzip.compress(gzip.decompress(good)[:-7]),
        "value.prof": _value_as_fixed64(),
        "notprofile.prof": gzip.compress(b"\x0a\x05hello\x12\x03abc" * 10),
        "cut_gzip.prof": good[: len(good) // 2],
    }
    for name, data in cases.items():
        with pytest.raises(BadInput) as e:
            pprof.read_profile(data, name)
        assert e.value.file == name and name in e.value.message, (name, e.value.message)
    with pytest.raises(BadInput, match="not an integer"):
        pprof.read_profile(cases["value.prof"], "value.prof")
    # sniffing: the real head is a Profile, the others not
    assert pprof.is_pprof_head(good[:16 << 10])
    assert pprof.is_pprof_head(_value_as_fixed64())
    assert not pprof.is_pprof_head(gzip.compress(b'{"traceEvents": []}'))
    assert not pprof.is_pprof_head(b"\xfb\x00\x00\x00")  # cProfile's marshal
    assert not pprof.is_pprof_head(gzip.compress(b"\x0a\x05hello\x7a\x01x"))  # field 15 as LEN


# -- the run listing and the HTTP answers ---------------------------------------------------

@pytest.fixture
def pprof_logdir(tmp_path):
    logs = tmp_path / "logs"
    shutil.copytree(DATA, logs / "jax")
    (logs / "tpu").mkdir()
    (logs / "tpu" / "memory").write_bytes(profile_bytes(multi_device_buffers("tpu", 2)))  # pprof's no-extension name
    (logs / "gpu.pb.gz").write_bytes(profile_bytes(multi_device_buffers("gpu", 2)))
    (logs / "py").mkdir()
    (logs / "py" / "cpu.prof").write_bytes(b"\xfb\x00\x00\x00" * 8)  # cProfile: no run
    return logs


def test_runs_and_memory_profile(make_client, pprof_logdir):
    client = make_client(pprof_logdir)
    runs = {r["name"]: r for r in client.get("/api/runs").json()["runs"]}
    pprof_runs = sorted(n for n, r in runs.items() if r["kind"] == "pprof")
    assert pprof_runs == ["gpu.pb.gz", "jax/leak", "jax/mlp/memory.prof", "tpu/memory"]
    assert "py/cpu.prof" not in runs
    hosts = client.get("/data/plugin/profile/hosts", params={"run": "tpu/memory", "tag": "memory_profile"}).json()
    # ALL_HOSTS first: the page sums every device unless one is picked (the Host picker's default)
    assert [h["hostname"] for h in hosts] == ["ALL_HOSTS", "TPU_0", "TPU_1"]
    assert client.get("/api/run", params={"run": "tpu/memory"}).json()["hosts"] == ["ALL_HOSTS", "TPU_0", "TPU_1"]
    assert client.get("/api/run", params={"run": "jax/mlp/memory.prof"}).json()["hosts"] == ["cpu:0"]  # one device: no "all"
    every = client.get("/data/plugin/profile/data", params={"run": "tpu/memory", "tag": "memory_profile"}).json()
    picked = client.get("/data/plugin/profile/data", params={"run": "tpu/memory", "tag": "memory_profile", "host": "ALL_HOSTS"})
    assert picked.status_code == 200 and picked.json()["overview"] == every["overview"]
    oom = client.get("/data/plugin/profile/data", params={"run": "tpu/memory", "tag": "oom_risk", "host": "ALL_HOSTS"})
    assert oom.status_code == 200, oom.text
    assert oom.json()["peakBytes"] == client.get("/data/plugin/profile/data", params={"run": "tpu/memory", "tag": "oom_risk"}).json()["peakBytes"]
    r = client.get("/data/plugin/profile/data", params={"run": "jax/leak", "tag": "memory_profile"})
    assert r.status_code == 200, r.text
    d = r.json()
    assert d["profiles"] == [p.name for p in LEAK] and d["profile"] == LEAK[-1].name
    assert [pt["bytes"] for pt in d["timeline"]["profiles"]] == [
        mpp.totals(pprof.read_profile(p.read_bytes(), p.name))["bytes"] for p in LEAK]
    r = client.get("/data/plugin/profile/data", params={"run": "jax/leak", "tag": "memory_profile",
                                                         "profile": LEAK[1].name, "base_profile": LEAK[0].name})
    site = r.json()["diff"]["grew"][0]["site"]
    assert (site["function"], site["line"]) == (EXPECTED["leak_function"], EXPECTED["leak_line"])


def test_bad_files_answer_4xx_naming_the_file(make_client, tmp_path):
    good = (DATA / "mlp" / "memory.prof").read_bytes()
    logs = tmp_path / "bad"
    for folder in ("a", "b"):
        (logs / folder).mkdir(parents=True)
    (logs / "a" / "truncated.prof").write_bytes(gzip.compress(gzip.decompress(good)[:-7]))
    (logs / "b" / "value.prof").write_bytes(_value_as_fixed64())
    client = make_client(logs)
    for name in ("a/truncated.prof", "b/value.prof"):
        r = client.get("/data/plugin/profile/data", params={"run": name, "tag": "memory_profile"})
        assert 400 <= r.status_code < 500, (name, r.status_code, r.text)
        body = r.json()
        assert body["ok"] is False and name in body["file"] and name in body["error"]


def test_oom_risk_of_live_bytes_vs_capacity(make_client, pprof_logdir):
    """OOM risk reads the profiles: the peak is the most live bytes of the worst device
    over the successive profiles; the capacity is the one given (device_memory=)."""
    client = make_client(pprof_logdir)
    live = [mpp.totals(pprof.read_profile(p.read_bytes(), p.name), "cpu:0")["bytes"] for p in LEAK]
    d = client.get("/data/plugin/profile/data", params={"run": "jax/leak", "tag": "oom_risk", "device_memory": "4MiB"}).json()
    assert d["peakBytes"] == max(live) and d["capacityBytes"] == 4 << 20
    assert d["risk"] == ("HIGH" if max(live) >= 0.9 * (4 << 20) else "MEDIUM")
    assert d["contributors"][0]["items"][0]["name"].startswith(f"{EXPECTED['leak_function']} ({EXPECTED['leak_file']}:{EXPECTED['leak_line']})")
    buffers = multi_device_buffers("gpu", 2)
    worst = max(sum(b.bytes for b in buffers if b.device == f"cuda:{i}") for i in range(2))
    d = client.get("/data/plugin/profile/data", params={"run": "gpu.pb.gz", "tag": "oom_risk", "device_memory": "1GiB"}).json()
    assert d["peakBytes"] == worst and d["risk"] == "LOW"
    d = client.get("/data/plugin/profile/data", params={"run": "gpu.pb.gz", "tag": "oom_risk", "host": "cuda:0"}).json()
    assert d["peakBytes"] == sum(b.bytes for b in buffers if b.device == "cuda:0") and d["capacityBytes"] is None


def test_compare_two_runs_by_stack(make_client, tmp_path):
    """base= (the compare of every tool, docs/compare.md) between two pprof runs: the rows
    are stacks, what grew first, the leak's line leading; rows add up to the total's change."""
    logs = tmp_path / "cmp"
    for i in (0, 3):
        (logs / f"s{i}").mkdir(parents=True)
        shutil.copy(LEAK[i], logs / f"s{i}" / LEAK[i].name)
    client = make_client(logs)
    cur, base = f"s3/{LEAK[3].name}", f"s0/{LEAK[0].name}"
    d = client.get("/data/plugin/profile/data", params={"run": cur, "tag": "memory_profile", "base": base}).json()
    assert d["comparable"] and d["base"]["run"] == base and d["current"]["run"] == cur
    live = [mpp.totals(pprof.read_profile(LEAK[i].read_bytes(), "x"))["bytes"] for i in (0, 3)]
    assert (d["totals"]["base"], d["totals"]["current"]) == tuple(live) and d["totals"]["residual"] == 0
    top = d["rows"][0]
    assert top["delta"] > 0 and (top["site"]["function"], top["site"]["line"]) == (EXPECTED["leak_function"], EXPECTED["leak_line"])
    # the same pair diffed inside one run (base_profile=) says the same
    within = mpp.diff(*(pprof.read_profile(LEAK[i].read_bytes(), "x") for i in (0, 3)))
    assert top["delta"] == within["grew"][0]["deltaBytes"]


def test_hostile_parameters_on_a_pprof_run_never_answer_a_500(make_client, pprof_logdir):
    """The fuzz of tests/test_server_security.py (its hostile values) on a pprof run's
    memory profile and OOM risk, whose parameters (profile=, base_profile=, host=, base=)
    the demo log directory it runs on has no run for."""
    from tests.test_server_security import HOSTILE, _encode

    client = make_client(pprof_logdir)
    problems = []
    for tag, keys in (("memory_profile", ["host", "profile", "base_profile", "base", "base_host"]),
                      ("oom_risk", ["host", "device_memory", "capacity_bytes"])):
        for key in keys:
            for value in HOSTILE:
                r = client.get(f"/data/plugin/profile/data?{_encode({'run': 'jax/leak', 'tag': tag})}&{key}={value}")
                if r.status_code >= 500:
                    problems.append(f"{tag} {key}={value[:40]}: {r.status_code} {r.text[:200]}")
                elif r.status_code >= 400 and set(r.json()) != {"ok", "status", "error", "file"}:
                    problems.append(f"{tag} {key}={value[:40]}: not the error shape: {r.text[:200]}")
    assert not problems, "\n".join(problems)


def test_listing_pprof_runs_imports_no_reader(pprof_logdir, tmp_path):
    """Discovery tells a pprof file by its head without protobuf (formats/pprof_head.py):
    the run lists over pprof files import neither protobuf nor numpy, as
    tests/test_architecture.py asks of the demo's."""
    import subprocess
    import sys

    code = f"""
import sys
from fastapi.testclient import TestClient
from profscope.app.workspace import Workspace
from profscope.cache.store import DiskCache
from profscope.server import create_app
from profscope.storage import LogDir
ws = Workspace(LogDir({str(pprof_logdir)!r}), DiskCache({str(tmp_path / "cache")!r}))
client = TestClient(create_app(ws))
for path in ("/", "/api/runs", "/data/plugin/profile/runs"):
    assert client.get(path).status_code == 200, path
assert any(r["kind"] == "pprof" for r in client.get("/api/runs").json()["runs"])
print(sorted(m for m in ("numpy", "google.protobuf") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


@pytest.mark.parametrize("run", ["jax/leak", "jax/mlp/memory.prof", "tpu/memory", "gpu.pb.gz"])
def test_oom_risk_categories_are_the_sample_kinds(make_client, pprof_logdir, run):
    """A JAX profile records what each sample is (label kind=buffer/executable) and where
    it was made (its stack), nothing of forward/backward/optimizer: OOM risk's contributors
    are the device's live arrays by the line that made them ("live_buffers"), never
    PyTorch's frame rules (which put every JAX site under "temporaries"). On the real leak
    folder the leak's line leads; the category's bytes are the device's buffer bytes."""
    client = make_client(pprof_logdir)
    d = client.get("/data/plugin/profile/data", params={"run": run, "tag": "oom_risk", "device_memory": "80GiB"}).json()
    cats = {c["category"]: c for c in d["contributors"]}
    assert set(cats) == {"live_buffers"}, sorted(cats)
    assert "temporaries" not in json.dumps(d["contributors"])
    files = sorted((pprof_logdir / run).glob("*.prof")) if (pprof_logdir / run).is_dir() else [pprof_logdir / run]
    device = next(u["link"]["host"] for u in d["usage"] if u["link"].get("tool") == "memory_profile")
    buffer_bytes = [sum(r["bytes"] for r in mpp.totals(pprof.read_profile(f.read_bytes(), f.name), device)["byDeviceKind"]
                        if r["kind"] == "buffer") for f in files]
    assert cats["live_buffers"]["bytes"] == max(buffer_bytes) == d["peakBytes"]
    assert cats["live_buffers"]["rules"] == ["kind=buffer: live device arrays, by the innermost frame outside installed "
                                             "libraries (the line that made them)"]
    top = cats["live_buffers"]["items"][0]["name"]
    if run == "jax/leak":
        assert top.startswith(f"{EXPECTED['leak_function']} ({EXPECTED['leak_file']}:{EXPECTED['leak_line']})")
    elif run in ("tpu/memory", "gpu.pb.gz"):
        assert top.startswith("init_params (model.py:12)")  # the builder's 80 MiB of parameters per device

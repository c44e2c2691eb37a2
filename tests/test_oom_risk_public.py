"""OOM risk on the real accelerator profiles users bring (shared fixtures
``public_profiles/``: PyTorch CUDA/ROCm traces with ``deviceProperties``, TF GPU, TPU and
ROCm xplanes, CUDA snapshots): where the capacity comes from, the tier, XProf's
"unused preallocated device memory" row, and the contributors and "what to cut" finding
that every HIGH/OOM answer carries."""

from __future__ import annotations

import gzip
import json
from fractions import Fraction

import pytest

from profscope.tools import oom_risk


@pytest.fixture(scope="module")
def public(shared_fixtures):
    return shared_fixtures / "public_profiles"


@pytest.fixture
def client(make_client, public):
    return make_client(public)


def _risk(client, run, **params):
    res = client.get("/data/plugin/profile/data", params={"run": run, "tag": "oom_risk", **params})
    return res


def _device_properties(path):
    with gzip.open(path) as f:
        return json.load(f)["deviceProperties"]


# Per trace: (the device the [memory] peak is on -> its totalGlobalMem, tier). The three
# traces without [memory] events have nothing to rate (404), whatever their device says.
TRACES = {
    "traces/tracelens_h100_bert_small.trace.json.gz": (85_018_279_936, "NVIDIA H100 80GB HBM3", "LOW"),
    "traces/kineto_resnet50_v100.pt.trace.json.gz": (34_084_028_416, "Tesla V100-DGXS-32GB", "LOW"),
    "traces/tracelens_b200_eager.trace.json.gz": None,
    "traces/hta_mi250_rocm62.trace.json.gz": None,
    "traces/hta_alexnet.trace.json.gz": None,
}


@pytest.mark.parametrize("run", sorted(TRACES))
def test_trace_capacity_from_device_properties(client, public, run):
    res = _risk(client, run)
    expected = TRACES[run]
    if expected is None:
        assert res.status_code == 404 and "[memory]" in res.json()["error"]
        return
    assert res.status_code == 200, res.text
    body = res.json()
    capacity, name, tier = expected
    props = _device_properties(public / run)
    assert props[0]["totalGlobalMem"] == capacity  # the file's own number
    assert body["capacitySource"] == "trace_device" and body["capacityBytes"] == capacity
    assert name in body["capacityDetail"] and "totalGlobalMem" in body["capacityDetail"]
    assert body["risk"] == tier and body["utilization"] == pytest.approx(body["peakBytes"] / capacity)


def test_rocm_device_properties_rate_a_94_percent_reservation_high(public):
    """No public trace here has [memory] events on a ROCm device; the MI250 trace states its
    device (hipDeviceProp_t totalGlobalMem 68,702,699,520 bytes per GCD). A reservation of
    94 % of it, as vLLM makes (gpu_memory_utilization), is HIGH with a cut to make."""
    props = _device_properties(public / "traces/hta_mi250_rocm62.trace.json.gz")
    total = props[0]["totalGlobalMem"]
    assert total == 68_702_699_520
    reserved = total * 94 // 100
    ev = {"kind": "torch_trace", "device": "CUDA:0", "link": {"tool": "memory_profile", "memory_id": "CUDA:0"},
          "peakBytes": reserved, "allocatedPeakBytes": reserved // 2, "reservedPeakBytes": reserved,
          "categoryPeakBytes": None, "items": [], "leakHints": []}
    body = oom_risk.assess(torch_trace=ev, trace_devices=props)
    assert body["capacitySource"] == "trace_device" and body["capacityBytes"] == total
    assert body["risk"] == "HIGH" and body["utilization"] == pytest.approx(0.94, abs=1e-9)
    assert body["contributors"] and body["contributors"][0]["bytes"] == reserved
    cut = next(f for f in body["findings"] if f["id"] == "what_to_cut")
    assert cut["evidence"]["bytesToCutBelowHigh"] == reserved - int(total * 0.9) + 1


def test_unused_preallocated_memory_is_in_use_on_tf_gpu(client):
    """XProf's 'unused preallocated device memory' row (memory_profile.cc
    InsertSpecialAllocations: heap in use at the peak that no allocation of the window
    explains) is 64.6 % of the TF GPU peak: memory in use, allocated before the profile."""
    body = _risk(client, "xplane/tf_gpu/GPU-multi-worker").json()
    cats = {c["category"]: c for c in body["contributors"]}
    assert "allocator_reserve" not in cats
    pre = cats["allocated_before"]
    assert pre["bytes"] == 4_013_337_088 and body["peakBytes"] == 6_210_111_488
    assert round(100 * pre["share"], 1) == 64.6
    assert pre["label"].startswith("In use") and "unused preallocated device memory" in pre["label"]
    # Rated HIGH, the cut names it as memory in use (start the profile earlier), not slack.
    high = _risk(client, "xplane/tf_gpu/GPU-multi-worker", capacity_bytes=body["peakBytes"]).json()
    cut = next(f for f in high["findings"] if f["id"] == "what_to_cut")
    assert cut["evidence"]["category"] == "allocated_before" and "memory in use" in cut["message"]


HIGH_RUNS = [
    "xplane/tf_gpu/GPU-multi-worker",
    "xplane/tpu_inference/2025_12_10_tpu",
    "xplane/mi300_jax08_gemm/jax08_gemm",
    "xplane/mi300_jax_conv_xprof_touched/jax_conv_minimal",
    "traces/tracelens_h100_bert_small.trace.json.gz",
    "traces/kineto_resnet50_v100.pt.trace.json.gz",
    "snapshots/niu_fwd_bwd_200_mixed.pickle",
    "snapshots/bolong_xl_fwd_cl2048_fp32_expandable.pickle",
]


@pytest.mark.parametrize("run", HIGH_RUNS)
def test_every_high_or_oom_answer_says_what_to_cut(client, run):
    """With the capacity set to the peak (HIGH) and to one byte less (OOM), every real run
    names its top contributors and a 'what to cut' finding with its numbers."""
    peak = _risk(client, run).json()["peakBytes"]
    for capacity, tier in ((peak, "HIGH"), (peak - 1, "OOM")):
        body = _risk(client, run, capacity_bytes=capacity).json()
        assert body["risk"] == tier
        assert body["contributors"] and sum(c["bytes"] for c in body["contributors"]) > 0
        cut = next(f for f in body["findings"] if f["id"] == "what_to_cut")
        e = cut["evidence"]
        assert e["peakBytes"] == peak and e["capacityBytes"] == capacity
        assert e["bytesToCutBelowHigh"] == peak - int(capacity * Fraction(9, 10)) + 1
        assert e["bytesToCutToFit"] == (1 if tier == "OOM" else 0)
        assert e["categoryBytes"] == body["contributors"][0]["bytes"] and cut["links"]


# -- text-only XLA dumps ---------------------------------------------------------------

BA = __import__("pathlib").Path(__file__).parent / "data" / "buffer_assignment"


def test_text_only_dump_is_rated_on_what_the_text_says(make_client, tmp_path):
    """A dump with only ``*-buffer-assignment.txt`` (no .hlo.pb, so no heap-simulator
    trace) was rated "LOW, peak 0 bytes". Now: the live ranges' peak when the text has
    XLA's HloLiveRange (jax 0.4.30 wrote it into the same file), else the sum of the
    allocation sizes; either way labelled for what it is."""
    import re
    import shutil

    (conv,) = (BA / "jax-0.10.2").glob("*jit_conv_step*-buffer-assignment.txt")
    (upd,) = (BA / "jax-0.4.30").glob("*jit_update*-buffer-assignment.txt")
    for name, src in (("conv", conv), ("update", upd)):
        (tmp_path / "logs" / name).mkdir(parents=True)
        shutil.copy(src, tmp_path / "logs" / name / src.name)
    client = make_client(tmp_path / "logs")
    text = conv.read_text()
    sizes = sum(int(m) for m in re.findall(r"^allocation \d+: size (\d+)", text, re.M))
    body = _risk(client, "conv").json()
    assert body["peakBytes"] == sizes == 337_982 and body["risk"] == "UNKNOWN"  # no capacity
    assert "allocation sizes" in body["usage"][0]["detail"] and "not a simulated peak" in body["usage"][0]["detail"]
    assert _risk(client, "conv", capacity_bytes=10 * sizes).json()["risk"] == "LOW"
    over = _risk(client, "conv", capacity_bytes=300_000).json()
    assert over["risk"] == "OOM" and any(f["id"] == "what_to_cut" for f in over["findings"])
    assert sum(c["bytes"] for c in over["contributors"]) == sizes
    # HloLiveRange: the most logical buffers live at once over the schedule. XLA's own
    # "Live ranges at 8 (peak)" block sums 3,208 bytes; at time 5 the values whose range
    # holds it (Arg_0.1, Arg_2.3, Arg_4.5, Arg_3.4, fusion, constant.8 4-5, dot.15 5-7)
    # sum to 4,228: XLA picks its moment counting a time's new values before dropping
    # those that ended just before (issue 33: the memory viewer shows that heap).
    text = upd.read_text()
    block = text.split("(peak):", 1)[1]
    assert sum(int(b) for b in re.findall(r"^\s+\S+: (\d+) bytes", block, re.M)) == 3208
    sizes = {n: int(b) for n, b in re.findall(r"^ value: <\d+ (\S+) @0> \(size=(\d+),", text, re.M)}
    at5 = [n for n, s, e in re.findall(r"^    (\S+)\{\}:(\d+)-(\d+)$", text, re.M) if int(s) <= 5 <= int(e)]
    body = _risk(client, "update").json()
    assert body["peakBytes"] == sum(sizes[n] for n in at5) == 4228
    assert "HloLiveRange" in body["usage"][0]["detail"] and "before buffer reuse" in body["usage"][0]["detail"]


# -- the default module ---------------------------------------------------------------

INIT_AND_STEP = '''
import sys, jax, jax.numpy as jnp

@jax.jit
def init(key):
    # A one-off initialiser whose peak (a 16 MiB draw) is far above the step's.
    big = jax.random.normal(key, (2048, 2048))
    return big[:64, :64] * jnp.mean(big)

@jax.jit
def train_step(w, x):
    g = jax.grad(lambda w: jnp.sum(jnp.tanh(x @ w) ** 2))(w)
    return w - 0.1 * g

w = init(jax.random.key(0))
x = jnp.ones((32, 64))
train_step(w, x).block_until_ready()
with jax.profiler.trace(sys.argv[1]):  # init ran before: compiled, listed, not run here
    for _ in range(20):
        w = train_step(w, x)
    w.block_until_ready()
'''


def test_default_module_is_the_step_not_the_initialiser(make_client, tmp_path):
    """A fresh JAX CPU profile whose initialiser has the larger compiled peak: the default
    module is the train step (the only step module; it ran 20 times, its HLO op events
    carry hlo_module and program_id), not the largest peak; module_name still picks any
    module."""
    import subprocess
    import sys

    script = tmp_path / "init_and_step.py"
    script.write_text(INIT_AND_STEP)
    subprocess.run([sys.executable, str(script), str(tmp_path / "logs")], check=True, timeout=180, capture_output=True,
                   env={**__import__("os").environ, "JAX_PLATFORMS": "cpu"})
    client = make_client(tmp_path / "logs")
    (run,) = client.get("/data/plugin/profile/runs").json()
    body = _risk(client, run).json()
    peaks = {m["moduleName"]: m["peakBytes"] for m in body["modules"]}
    init = next(n for n in peaks if n.startswith("jit_init("))
    step = next(n for n in peaks if n.startswith("jit_train_step("))
    assert peaks[init] > 10 * peaks[step]  # the largest peak is the initialiser's
    assert body["module"] == step and body["peakBytes"] == peaks[step]
    choice = body["moduleChoice"]
    assert choice["rule"] == "worst step module" and choice["steps"] == [step]
    assert choice["source"] == "HLO op events" and choice["ps"] > 0
    # The initialiser's peak is still reported (other_module_peak) and can be asked for.
    assert "other_module_peak" in {f["id"] for f in body["findings"]}
    asked = _risk(client, run, module_name=init).json()
    assert asked["module"] == init and asked["peakBytes"] == peaks[init]
    assert asked["moduleChoice"] == {"rule": "requested"}


def test_live_range_file_of_a_fresh_jax_text_dump(make_client, tmp_path):
    """jax 0.10.2 with --xla_dump_hlo_as_text (no proto) writes ``*-live-range.txt``
    (HloLiveRange, ``Live ranges at N (peak):``) beside the buffer assignment: its peak is
    the module's usage, labelled as the logical buffers live at once before reuse."""
    import os
    import re
    import subprocess
    import sys

    dump = tmp_path / "dump"
    program = "import jax, jax.numpy as jnp\nprint(jax.jit(lambda x: jnp.tanh(x @ x.T).sum())(jnp.ones((64, 64))))\n"
    subprocess.run([sys.executable, "-c", program], check=True, timeout=120, capture_output=True,
                   env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": f"--xla_dump_to={dump} --xla_dump_hlo_as_text"})
    (live_file,) = dump.glob("*jit__lambda*-live-range.txt")
    assert not list(dump.glob("*.hlo.pb*"))  # text only
    text = live_file.read_text()
    block = text.split("(peak):", 1)[1].split("Stack trace", 1)[0]
    expected = sum(int(b) for b in re.findall(r": (\d+) bytes \(cumulative", block))
    assert expected == 64 * 64 * 4 + 4  # x (f32[64,64]) and the f32[] result
    client = make_client(dump)
    (run,) = client.get("/data/plugin/profile/runs").json()
    module = next(m for m in client.get("/data/plugin/profile/module_list", params={"run": run}).text.split(",")
                  if m.startswith("jit__lambda"))
    body = _risk(client, run, module_name=module).json()
    assert body["peakBytes"] == expected and body["risk"] == "UNKNOWN"
    assert "HloLiveRange" in body["usage"][0]["detail"] and "before buffer reuse" in body["usage"][0]["detail"]
    cats = {c["category"]: c["bytes"] for c in body["contributors"]}
    assert cats == {"inputs": 64 * 64 * 4, "outputs": 4}  # x is the argument, the sum the output
    assert _risk(client, run, module_name=module, capacity_bytes=expected).json()["risk"] == "HIGH"


def test_live_range_parser_rejects_other_text():
    from profscope.errors import BadInput
    from profscope.formats.live_range_text import parse_live_range

    with pytest.raises(BadInput, match="HloLiveRange"):
        parse_live_range("BufferAssignment:\nallocation 0: size 4\n", "x-live-range.txt")
    empty = parse_live_range("HloLiveRange (max 0):\n  InstructionSequence:\n  BufferLiveRange:\n", "y")
    assert empty == {"maxTime": 0, "instructionSequence": [], "ranges": [], "peakTime": None, "peakValues": [],
                     "peakBytes": 0}


def test_contributors_are_never_silently_empty(client):
    """Every public run that can be assessed names what holds its peak, or says why it
    cannot (issue 33): the others are refused or not assessed with a 4xx naming why."""
    assessed = 0
    for run in client.get("/data/plugin/profile/runs").json():
        res = _risk(client, run)
        if res.status_code != 200:
            assert 400 <= res.status_code < 500 and res.json()["error"], (run, res.text)
            continue
        body = res.json()
        assessed += 1
        named = [c for c in body["contributors"] if c["category"] != "unknown"]
        assert named or body["contributorsNote"], run
        assert sum(c["bytes"] for c in body["contributors"]) <= max(body["peakBytes"], body["contributorsPeakBytes"] or 0)
    assert assessed >= 7


@pytest.mark.parametrize("run", ["xplane/tpu_inference/2025_12_10_tpu", "xplane/mi300_jax08_gemm/jax08_gemm"])
def test_xla_runtime_contributors_are_the_memory_viewers_buffers(client, run):
    """A TPU's allocator events hold one ``stack`` region, a ROCm BFC allocator's chunks no
    op: the contributors are the memory viewer's buffers at the compiler's peak instead,
    by category, each with its framework op, summing to the memory viewer's peak."""
    body = _risk(client, run).json()
    assert body["peakSource"].startswith(("peak allocated", "lifetime peak allocated"))  # rated on the allocator
    assert body["contributorsSource"] == f"compiler heap peak of {body['module']}"
    assert "no breakdown" in body["contributorsNote"]
    mv = client.get("/data/plugin/profile/data", params={"run": run, "tag": "memory_viewer",
                                                         "module_name": body["module"]}).json()
    at_peak = sum(round(r["logicalBufferSizeMib"] * (1 << 20)) for r in mv["maxHeap"])
    assert sum(c["bytes"] for c in body["contributors"]) == at_peak == body["contributorsPeakBytes"]
    assert {c["category"] for c in body["contributors"]} - {"unknown", "small"}
    ops = {i["opName"] for c in body["contributors"] for i in c["items"]}
    assert {r.get("tfOpName") for r in mv["maxHeap"] if r.get("tfOpName")} <= ops


def test_a_trace_without_addresses_says_why_it_has_no_contributors(client):
    body = _risk(client, "traces/kineto_resnet50_v100.pt.trace.json.gz").json()
    assert body["contributors"] == []
    assert "no addresses" in body["contributorsNote"]

"""What the memory viewer's heap hover and its "buffers live at peak" counts rest on,
checked against the HloProto itself (the demo's real JAX modules: the XLA dump and the
profiles' /host:metadata), and XProf's ``tag=`` links on the page URL.

* ``profscope.heapEventKinds`` / ``heapEventBuffers`` are the replayed heap-simulator
  trace's own events, point for point; the page copy's ``heapPoints`` name each event's
  buffer with its size from the proto's logical buffers, and their heap changes add up
  to ``heapSizes``, also once the page copy has decimated the points.
* ``smallBuffersAtPeak`` is the number of buffers under 16 KiB that a plain replay of
  the trace finds live at the peak, plus the small largest buffers of the
  whole-program allocations, and their bytes are the "small" entry's size.
* ``/?tag=memory_viewer`` redirects to the page of that tool; an unknown tag is left
  for the page to explain.
"""

from __future__ import annotations

from urllib.parse import parse_qsl, urlsplit

import pytest

from profscope.formats import hlo_proto, xplane
from profscope.app.tool_table import page_tool
from profscope.tools import memory_viewer as mv

SMALL = 16 * 1024
KIND = {0: "A", 1: "F", 2: "S"}


def _modules(demo_logdir, demo_expected):
    dump = next((demo_logdir / "dumps" / "mlp").glob("*after_optimizations.hlo.pb"))
    yield "dump", hlo_proto.parse(dump.read_bytes(), str(dump))
    for program in ("mlp", "transformer"):
        info = demo_expected["programs"][program]
        path = demo_logdir.parent / info["xplane"]  # relative to the demo folder
        with open(path, "rb") as f:
            data = xplane.hlo_proto_bytes(f, str(path), info["profile_module_name"])
        yield program, hlo_proto.parse(data, str(path))


@pytest.fixture(scope="module")
def modules(demo_logdir, demo_expected):
    return list(_modules(demo_logdir, demo_expected))


def test_heap_events_are_the_traces_events(modules):
    for label, hlo in modules:
        result = mv.from_hlo(hlo)
        extras = result["profscope"]
        trace = hlo.buffer_assignment.heap_simulator_traces[extras["heapSimulatorTrace"]]
        kinds, buffers = extras["heapEventKinds"], extras["heapEventBuffers"]
        n = len(trace.events)
        assert len(kinds) == len(buffers) == len(result["heapSizes"]) == n + 1, label
        assert kinds[:n] == "".join(KIND[ev.kind] for ev in trace.events), label
        assert buffers[:n] == [ev.buffer_id for ev in trace.events], label
        assert (kinds[n], buffers[n]) == ("-", -1)  # the point after the last event


@pytest.mark.parametrize("max_points", [4000, 12])
def test_page_heap_points_name_the_buffer_and_add_up(modules, max_points):
    for label, hlo in modules:
        result = mv.from_hlo(hlo)
        sizes = {lb.id: lb.size for lb in hlo.buffer_assignment.logical_buffers}
        instr = {lb.id: lb.defined_at.instruction_id for lb in hlo.buffer_assignment.logical_buffers}
        names = {i.id: i.name for c in hlo.hlo_module.computations for i in c.instructions}
        page = mv.page_view(result, max_points=max_points)
        extras = page["profscope"]
        assert "heapEventKinds" not in extras and "heapEventBuffers" not in extras  # the page copy is small
        points, positions = extras["heapPoints"], extras["heapPositions"]
        assert len(points["kind"]) == len(page["heapSizes"]) == len(positions)
        if max_points < len(result["heapSizes"]):
            assert len(positions) <= max_points  # really decimated
        full = result["heapSizes"]
        words = {"A": "alloc", "F": "free", "S": "share", "-": ""}
        for j, i in enumerate(positions):
            assert points["kind"][j] == words[result["profscope"]["heapEventKinds"][i]], (label, i)
            buffer = points["buffer"][j]
            assert buffer == result["profscope"]["heapEventBuffers"][i]
            if buffer < 0:
                continue
            assert points["bytes"][j] == sizes[buffer], (label, i)
            # The buffer's name is its defining instruction (plus a tuple index).
            assert points["name"][j].split("{")[0] == names[instr[buffer]], (label, i)
            change = points["heapChangeBytes"][j]
            assert change == round((full[i + 1] - full[i]) * 2**20)
            if points["kind"][j] == "alloc":
                assert change == sizes[buffer]  # an ALLOC adds the buffer, always
            elif points["kind"][j] == "free":
                assert change <= 0  # 0: the memory is still shared with another buffer
            else:
                assert change >= 0  # a SHARE_WITH brings back freed memory or costs nothing
        if max_points >= len(full):
            # Undecimated: the changes replay the heap from its first point to its last.
            total = full[0] * 2**20 + sum(points["heapChangeBytes"])
            assert round(total) == round(full[-1] * 2**20), label


def test_small_buffers_at_peak_are_counted(modules):
    for label, hlo in modules:
        result = mv.from_hlo(hlo)
        ba = hlo.buffer_assignment
        sizes = {lb.id: lb.size for lb in ba.logical_buffers}
        trace = ba.heap_simulator_traces[result["profscope"]["heapSimulatorTrace"]]
        # A plain replay up to the event that made the peak: what is allocated and not freed.
        live = set()
        for ev in trace.events[: result.get("peakHeapSizePosition", 0) + 1]:
            (live.discard if ev.kind == 1 else live.add)(ev.buffer_id)
        small = [sizes[b] for b in live if sizes[b] < SMALL]
        # Memory space 0 also lists each whole-program allocation's largest buffer.
        for a in ba.buffer_allocations:
            if a.color == 0 and (a.is_entry_computation_parameter or a.is_constant or a.maybe_live_out) and a.assigned:
                largest = max(sizes[x.logical_buffer_id] for x in a.assigned)
                if largest < SMALL:
                    small.append(largest)
        merged = [o for o in result["maxHeap"] if o.get("logicalBufferId", 0) < 0]
        assert result["profscope"]["smallBuffersAtPeak"] == len(small), label
        if small:
            assert round(merged[0]["logicalBufferSizeMib"] * 2**20) == sum(small), label
        else:
            assert not merged


@pytest.mark.parametrize(("tag", "tool"), [
    ("memory_viewer", "memory_viewer"), ("memory_profile", "memory_profile"), ("trace_viewer", "trace_viewer@"),
    ("trace_viewer@", "trace_viewer@"), ("overview_page", ""), ("oom_risk", "oom_risk"),
    ("input_pipeline_analyzer", None), ("op_profile", "op_profile"), ("kernel_stats", None), ("", None),
])
def test_xprof_tags_name_our_pages(tag, tool):
    assert page_tool(tag) == tool


def test_tag_links_redirect_to_the_tool(demo_client, demo_expected):
    run = f"mlp/{demo_expected['programs']['mlp']['session']}"
    res = demo_client.get("/", params={"run": run, "tag": "memory_viewer", "host": "demo-host"}, follow_redirects=False)
    assert res.status_code == 302
    url = urlsplit(res.headers["location"])
    assert url.path == "/" and parse_qsl(url.query) == [("run", run), ("tool", "memory_viewer"), ("host", "demo-host")]
    # The overview has no tool; a tool= already there wins over the tag.
    res = demo_client.get("/", params={"run": run, "tag": "overview_page"}, follow_redirects=False)
    assert parse_qsl(urlsplit(res.headers["location"]).query) == [("run", run)]
    res = demo_client.get("/", params={"run": run, "tool": "oom_risk", "tag": "memory_viewer"}, follow_redirects=False)
    assert parse_qsl(urlsplit(res.headers["location"]).query) == [("run", run), ("tool", "oom_risk")]
    # A tag we have no page for: the page itself, which says so (tested in the browser).
    res = demo_client.get("/", params={"run": run, "tag": "input_pipeline_analyzer"}, follow_redirects=False)
    assert res.status_code == 200 and "app.js" in res.text

"""Hostile Chrome/PyTorch traces (issue 13): each reproducer of the fuzzing campaign as a
tiny trace built here, driven through the reader and through the server on every endpoint
that reads it. Nothing may answer 500, break off a streamed 200, or take seconds; a refusal
is a 4xx in the one error shape, naming the file (and, for a budget, the limit).

Where a lenient reading is what a trace viewer does (an event without a usable time, a lone
surrogate, a list as pid), the trace is read and the rest of it kept: those cases assert
what the reader made of it, too.
"""

from __future__ import annotations

import gzip
import json
import os
import zlib

import httpx
import pytest

from profscope.errors import BadInput, TooLarge
from profscope.formats import chrome_trace
from profscope.testing import nestings
from profscope.testing.local_server import profscope_process
from tests.fixtures.cpu import cpu_seconds

pytestmark = pytest.mark.slow  # the issue-13 reproducers, each through the readers and a server: 22 s on 2 cores

LIMIT_S = 10.0  # CPU seconds (tests/fixtures/cpu.py)

OP = {"ph": "X", "cat": "cpu_op", "name": "op", "pid": 1, "tid": 1, "ts": 1.0, "dur": 2.0}
MEM = {"ph": "i", "s": "t", "name": "[memory]", "pid": 1, "tid": 1, "ts": 1.5,
       "args": {"Total Reserved": 0, "Total Allocated": 16, "Bytes": 16, "Device Id": 0, "Device Type": 1, "Addr": 1}}


def trace(*events: str, top: str = "") -> str:
    """A trace whose events are JSON texts (so they can hold what json.dumps never writes:
    NaN, 400-digit numbers, lone surrogate escapes), after one op and one memory event."""
    return '{"traceEvents": [' + ",".join([json.dumps(OP), json.dumps(MEM), *events]) + "]" + top + "}"


class R(str):
    """JSON text pasted in as is (NaN, a 400-digit number, a lone surrogate escape)."""


def _fields(d: dict) -> str:
    return ",".join(f'"{k}":{v if isinstance(v, R) else json.dumps(v)}' for k, v in d.items())


def x(**fields) -> str:
    """An X event (a slice named "b") as JSON text."""
    return "{" + _fields({"ph": "X", "name": "b", "pid": 1, "tid": 1, "ts": 2, "dur": 1, **fields}) + "}"


def mem(**args) -> str:
    """A [memory] event as JSON text."""
    return '{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":2,"args":{' + _fields(
        {"Bytes": 1, "Addr": 1, "Total Allocated": 1, **args}) + "}}"


def nested(depth: int, inner: str = "1") -> str:
    return '{"a":' * depth + inner + "}" * depth


BIG = R("9" * 30)  # beyond 64 bits
HUGE = R("1" + "0" * 400)  # beyond a double

TRACE_ENDPOINTS = [
    ("/data/plugin/profile/data", {"tag": "trace_viewer@"}),
    ("/api/trace/window", {}),
    ("/api/trace/search", {"q": "b"}),
    ("/api/trace/event", {"id": 0}),
    ("/api/trace/export", {}),
]
MEMORY_ENDPOINTS = [
    ("/data/plugin/profile/data", {"tag": "memory_profile"}),
    ("/data/plugin/profile/data", {"tag": "oom_risk"}),
    ("/api/memory_profile", {}),
]
LISTING_ENDPOINTS = [("/api/run", {}), ("/data/plugin/profile/run_tools", {})]

# name -> (trace text, status of the trace-viewer endpoints, status of the memory endpoints)
CASES = {
    # integers beyond 64 bits in args: kept, as their decimal text (orjson cannot write them)
    "bigint_args": (trace(x(args=R('{"n":' + BIG + "}"))), 200, 200),
    # ... in a [memory] event's numbers: no allocator total, the memory profile refuses
    "bigint_memory_args": (trace(mem(Bytes=BIG)), 200, 422),
    # an integer longer than Python's int-string limit (4300 digits)
    "int_of_5000_digits": (trace(x(args=R('{"n":' + "9" * 5000 + "}"))), 413, 413),
    # times: far beyond any trace (refused, as ts 1e300 always was), or no time at all
    "ts_1e308": (trace(x(ts=1e308)), 422, 422),
    "ts_10e400": (trace(x(ts=HUGE)), 422, 422),
    "ts_nan": (trace(x(ts=R("NaN"))), 200, 200),
    "ts_infinity": (trace(x(ts=R("1e400"))), 200, 200),
    "memory_ts_nan": (trace(mem().replace('"ts":2', '"ts":NaN')), 200, 200),
    "memory_ts_1e308": (trace(mem().replace('"ts":2', '"ts":1e308')), 422, 422),
    # durations: capped at 2^60 ps, NaN as none
    "dur_1e308": (trace(x(dur=1e308)), 200, 200),
    "dur_10e400": (trace(x(dur=HUGE)), 200, 200),
    "dur_minus_10e400": (trace(x(dur=R("-" + HUGE))), 200, 200),
    "dur_nan": (trace(x(dur=R("NaN"))), 200, 200),
    "args_nan": (trace(x(args=R('{"x":NaN,"y":Infinity}'))), 200, 200),
    # lone surrogates: replaced by U+FFFD
    "surrogate_in_name": (trace(x(name=R('"a\\ud800b"'))), 200, 200),
    "surrogate_in_args": (trace(x(args=R('{"k\\udc00":"v\\ud800"}'))), 200, 200),
    "surrogate_in_ids": (trace(x(pid=R('"p\\ud800"'), tid=R('"t\\udfff"'))), 200, 200),
    "surrogate_in_flow": (trace('{"ph":"s","name":"f","cat":"c\\ud800","id":"i\\ud800","pid":1,"tid":1,"ts":2}',
                                '{"ph":"f","name":"f","cat":"c\\ud800","id":"i\\ud800","pid":1,"tid":1,"ts":3,"bp":"e"}'),
                          200, 200),
    "surrogate_in_metadata": (trace('{"ph":"M","name":"process_name","pid":1,"args":{"name":"p\\ud800"}}',
                                    '{"ph":"M","name":"thread_name","pid":1,"tid":1,"args":{"name":"t\\ud800"}}'),
                              200, 200),
    "surrogate_top_level": (trace(top=', "displayTimeUnit": "n\\ud800s", '
                                      '"deviceProperties": [{"name": "\\udfff", "totalGlobalMem": 1000}]'), 200, 200),
    # list- and object-typed fields: an event with such a pid/tid is skipped
    "list_pid": (trace(x(pid=[1, 2])), 200, 200),
    "list_tid": (trace(x(tid=[1])), 200, 200),
    "object_pid": (trace(x(pid={"a": 1})), 200, 200),
    "list_pid_every_phase": (trace('{"ph":"M","name":"process_name","pid":[1],"args":{"name":"x"}}',
                                   '{"ph":"B","pid":[1],"tid":1,"ts":2}', '{"ph":"E","pid":[1],"tid":1,"ts":3}',
                                   '{"ph":"C","name":"c","pid":[1],"ts":2,"args":{"v":1}}',
                                   mem().replace('"pid":1', '"pid":[1]'),
                                   '{"ph":"s","id":1,"pid":[1],"tid":1,"ts":2}',
                                   x(cat="python_function", pid=[1], name="nn.Module: A")), 200, 200),
    "list_name": (trace(x(name=["a"])), 200, 200),
    "list_args": (trace(x(args=[1, 2])), 200, 200),
    "list_args_metadata": (trace('{"ph":"M","name":"process_name","pid":1,"args":[1]}'), 200, 200),
    "list_args_begin_end": (trace('{"ph":"B","name":"b","pid":1,"tid":1,"ts":2,"args":[1]}',
                                  '{"ph":"E","pid":1,"tid":1,"ts":3,"args":{"a":1}}'), 200, 200),
    "list_flow_id": (trace('{"ph":"s","name":"f","cat":"c","id":[1],"pid":1,"tid":1,"ts":2}'), 200, 200),
    # nesting: the trace viewer stores and serves args, within MAX_DEPTH levels
    "args_nested_300": (trace(x(args=R(nested(300)))), 413, 200),
    "args_nested_2000": (trace(x(args=R(nested(2000)))), 413, 413),
    "args_lists_nested_2000": (trace(x(args=R('{"a":' + "[" * 2000 + "]" * 2000 + "}"))), 413, 413),
    "top_level_nested_300": (trace(top=', "deviceProperties": ' + "[" * 300 + "]" * 300), 200, 413),
    "args_wide_not_deep": (trace(x(args={"dims": [[1, 2]] * 200})), 200, 200),
    # ids past int64 (a tid >= 2^63 broke the streamed answers off mid-way): hashed as names
    "tid_2_63": (trace(x(tid=2**63)), 200, 200),
    "pid_2_64": (trace(x(pid=2**64)), 200, 200),
    "tid_below_minus_2_63": (trace(x(tid=-2**63 - 1)), 200, 200),
    "pid_10e30": (trace(x(pid=10**30)), 200, 200),
    "tid_1e300": (trace(x(tid=1e300)), 200, 200),
    "tid_infinity": (trace(x(tid=R("Infinity"))), 200, 200),
    "pid_nan": (trace(x(pid=R("NaN"))), 200, 200),
    "sort_index_huge": (trace('{"ph":"M","name":"process_sort_index","pid":1,"args":{"sort_index":' + HUGE + "}}",
                              '{"ph":"M","name":"thread_sort_index","pid":1,"tid":1,"args":{"sort_index":1e300}}'),
                        200, 200),
    "sort_index_nan": (trace('{"ph":"M","name":"process_sort_index","pid":1,"args":{"sort_index":NaN}}',
                             '{"ph":"M","name":"thread_sort_index","pid":1,"tid":1,"args":{"sort_index":Infinity}}'),
                       200, 200),
    # counters: samples no chart can draw are skipped
    "counter_10e400": (trace('{"ph":"C","name":"c","pid":1,"ts":2,"args":{"v":' + HUGE + "}}"), 200, 200),
    "counter_nan": (trace('{"ph":"C","name":"c","pid":1,"ts":2,"args":{"v":NaN}}'), 200, 200),
    # memory events' numbers
    "memory_total_10e30": (trace(mem(**{"Total Allocated": 10**30})), 200, 422),
    "memory_total_nan": (trace(mem(**{"Total Allocated": R("NaN")})), 200, 422),
    "memory_total_1e308": (trace(mem(**{"Total Allocated": 1e308})), 200, 422),
    "memory_device_id_100000": (trace(mem(**{"Device Id": 100000})), 200, 422),
    "memory_int64_extremes": (trace(mem(Bytes=2**63 - 1, **{"Total Allocated": 2**63 - 1, "Total Reserved": 2**63 - 1,
                                                            "Addr": 2**64 - 1}),
                                    mem(Bytes=-2**63, Addr=-1, **{"Total Allocated": -2**63, "Device Id": -32768,
                                                                  "Device Type": 32767})), 200, 200),
    "memory_running_sum_extremes": (trace('{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":2,"args":'
                                          '{"Bytes":-9223372036854775808,"Device Type":1,"Device Id":0}}'), 200, 200),
    "memory_list_args": (trace('{"ph":"i","name":"[memory]","pid":1,"tid":1,"ts":2,"args":[1]}'), 200, 422),
    "step_number_10e30": (trace(x(name="ProfilerStep#" + "9" * 30)), 200, 200),
    # top-level values read as numbers
    "base_time_10e400": (trace(top=', "baseTimeNanoseconds": ' + HUGE), 200, 200),
    "base_time_1e300": (trace(top=', "baseTimeNanoseconds": 1e300'), 200, 200),
    "base_time_nan": (trace(top=', "baseTimeNanoseconds": NaN'), 200, 200),
    "device_properties_odd": (trace(top=', "deviceProperties": [[1], {"a": ' + BIG + ', "totalGlobalMem": ' + BIG
                                        + '}, {"id": 0, "totalGlobalMem": NaN}, {"id": 1, "totalGlobalMem": 1e400}]'),
                              200, 200),
    # the budget on entries: threads and counter series of one trace
    "threads_60000": (trace(*(x(tid=i, ts=2 + i) for i in range(60_000))), 413, 200),
    "counter_series_20000": (trace('{"ph":"C","name":"c","pid":1,"ts":2,"args":{'
                                   + ",".join(f'"k{i}":1' for i in range(20_000)) + "}}"), 413, 200),
}


def _check(client, path, params, run, file_name, want):
    t0 = cpu_seconds()
    r = client.get(path, params={"run": run, **params})
    took = cpu_seconds() - t0
    where = (path, params, r.status_code, r.text[:300])
    assert r.status_code < 500, where
    assert took < LIMIT_S, (where, took)
    body = json.loads(r.content)  # a streamed 200 must be whole
    if want is not None:
        assert r.status_code == want, where
    if r.status_code >= 400:
        assert body["ok"] is False and body["status"] == r.status_code and body["error"], where
        assert body["file"] and body["file"].endswith(file_name), where
        assert file_name in body["error"], where
        # the reader's own message, not the conversion worker's backstop for an escaped exception
        assert "could not be read (" not in body["error"], where
        if r.status_code == 413:
            assert "limit" in body["error"] or "deeper" in body["error"], where
    return r


def _serve(make_client, tmp_path, name: str, data: bytes):
    logdir = tmp_path / "logs"
    logdir.mkdir()
    (logdir / name).write_bytes(data)
    return make_client(logdir)


def _all_endpoints(client, run, file_name, want_trace, want_memory):
    out = {}
    for path, params in LISTING_ENDPOINTS:
        assert _check(client, path, params, run, file_name, 200)
    for path, params in TRACE_ENDPOINTS:
        out[(path, params.get("tag"))] = _check(client, path, params, run, file_name, want_trace)
    for path, params in MEMORY_ENDPOINTS:
        out[(path, params.get("tag"))] = _check(client, path, params, run, file_name, want_memory)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_trace_through_the_server(make_client, tmp_path, case):
    text, want_trace, want_memory = CASES[case]
    name = f"{case}.pt.trace.json"
    client = _serve(make_client, tmp_path, name, text.encode("utf-8"))
    _all_endpoints(client, name, name, want_trace, want_memory)
    # a refusal is the same the second time (and as cheap)
    _check(client, "/api/trace/window", {}, name, name, want_trace)


@pytest.mark.parametrize("case", list(CASES))
def test_hostile_trace_through_the_reader(case):
    text, want_trace, want_memory = CASES[case]
    data = text.encode("utf-8")
    for read, want in ((lambda: chrome_trace.trace_columns(data, "t.json"), want_trace),
                       (lambda: chrome_trace.memory_events(data, "t.json"), want_memory)):
        t0 = cpu_seconds()
        if want == 200:
            read()
        else:
            with pytest.raises(BadInput) as info:
                read()
            assert info.value.status == want and info.value.file == "t.json" and "t.json" in info.value.message
        assert cpu_seconds() - t0 < LIMIT_S


# -- what the lenient readings keep -------------------------------------------------------------


def test_lone_surrogates_become_replacement_characters(make_client, tmp_path):
    client = _serve(make_client, tmp_path, "s.trace.json", trace(x(name=R('"a\\ud800b"'), args=R('{"k\\udc00":"v\\ud800"}')),
                                                                  x(name=R('"pair \\ud83d\\ude00"'))).encode())
    found = client.get("/api/trace/search", params={"run": "s.trace.json", "q": "a\ufffdb"}).json()
    assert found["total"] == 1
    ev = client.get("/api/trace/event", params={"run": "s.trace.json", "id": found["matches"][0]["id"]}).json()
    assert ev["name"] == "a\ufffdb" and ev["args"] == {"k\ufffd": "v\ufffd"}
    # a valid surrogate pair is one character, untouched
    assert client.get("/api/trace/search", params={"run": "s.trace.json", "q": "pair \U0001f600"}).json()["total"] == 1
    mem = chrome_trace.memory_events(trace(top=', "displayTimeUnit": "n\\ud800s"').encode(), "t.json")
    assert mem.metadata["displayTimeUnit"] == "n\ufffds"


def test_events_with_list_ids_are_skipped_and_the_rest_kept():
    data = trace(x(pid=[1, 2]), x(tid={"a": 1}), x(name="kept"), mem().replace('"pid":1', '"pid":[1]')).encode()
    ev = chrome_trace.trace_columns(data, "t.json")
    assert sorted(ev.names[i] for i in ev.name) == ["kept", "op"]  # the two "b" with list ids are dropped
    m = chrome_trace.memory_events(data, "t.json")
    assert len(m) == 1 and m.num_ops == 2


def test_big_integers_in_args_are_kept_as_text(make_client, tmp_path):
    client = _serve(make_client, tmp_path, "b.trace.json", trace(x(args=R('{"n":' + BIG + ',"m":5}'))).encode())
    found = client.get("/api/trace/search", params={"run": "b.trace.json", "q": "b"}).json()
    ev = client.get("/api/trace/event", params={"run": "b.trace.json", "id": found["matches"][0]["id"]}).json()
    assert ev["args"] == {"n": BIG, "m": 5}


def test_ids_past_int64_are_hashed_like_names(make_client, tmp_path):
    ev = chrome_trace.trace_columns(trace(x(tid=2**63), x(pid=10**30)).encode(), "t.json")
    for t in ev.tracks:
        assert -(2**53) <= t.pid <= 2**53 and -(2**53) <= t.tid <= 2**53
    assert any(t.name == f"thread {2**63}" for t in ev.tracks)  # the name shows the number as written
    client = _serve(make_client, tmp_path, "t.trace.json", trace(x(tid=2**63)).encode())
    for path, params in (("/data/plugin/profile/data", {"tag": "trace_viewer@"}), ("/api/trace/export", {})):
        doc = json.loads(client.get(path, params={"run": "t.trace.json", **params}).content)
        assert {e["name"] for e in doc["traceEvents"] if e["ph"] == "X"} == {"op", "b"}


def test_times_without_a_number_are_skipped_durations_capped():
    ev = chrome_trace.trace_columns(trace(x(ts=R("NaN")), x(ts=R("1e400")), x(name="long", dur=HUGE)).encode(), "t.json")
    names = [ev.names[i] for i in ev.name]
    assert sorted(names) == ["long", "op"]
    assert int(ev.dur_ps[names.index("long")]) == 1 << 60


def test_depth_limit_is_exact():
    ok = trace(x(args=R("[" * (chrome_trace.MAX_DEPTH - 1) + "]" * (chrome_trace.MAX_DEPTH - 1)))).encode()
    chrome_trace.trace_columns(ok, "t.json")
    deep = trace(x(args=R("[" * chrome_trace.MAX_DEPTH + "]" * chrome_trace.MAX_DEPTH))).encode()
    with pytest.raises(TooLarge, match="deeper than 64 levels"):
        chrome_trace.trace_columns(deep, "t.json")


def test_an_event_past_its_size_limit_is_refused(monkeypatch):
    monkeypatch.setattr(chrome_trace, "MAX_EVENT", 1 << 20)
    with pytest.raises(TooLarge, match="traceEvents\\[2\\] is larger than 1 MiB"):
        for _ in chrome_trace.iter_events(trace(x(args={"s": "x" * (3 << 20)})).encode(), "t.json"):
            pass


# -- gzip --------------------------------------------------------------------------------------


def _gzip_cases():
    good = gzip.compress(trace().encode())
    corrupt = good[:12] + b"\xff" * 15 + good[27:]
    co = zlib.compressobj(9, zlib.DEFLATED, 31)  # a bomb: 300 MiB of whitespace in ~300 KB
    parts = [co.compress(b'{"traceEvents": [' + json.dumps(OP).encode() + b",")]
    chunk = b" " * (1 << 20)
    parts += [co.compress(chunk) for _ in range(300)]
    parts += [co.compress(b"]}"), co.flush()]
    return {"corrupt": (corrupt, 422), "truncated": (good[:-10], 422), "not_gzip_inside": (b"\x1f\x8b" + b"\x00" * 30, 422),
            "bomb": (b"".join(parts), 413)}


@pytest.mark.parametrize("case", ["corrupt", "truncated", "not_gzip_inside", "bomb"])
def test_bad_gzip_is_a_4xx_naming_the_file(make_client, tmp_path, case):
    data, want = _gzip_cases()[case]
    name = f"{case}.pt.trace.json.gz"
    client = _serve(make_client, tmp_path, name, data)
    _all_endpoints(client, name, name, want, want)
    with pytest.raises(BadInput) as info:
        chrome_trace.trace_columns(data, name)
    assert info.value.status == want and info.value.file == name


# -- export_memory_timeline JSON ---------------------------------------------------------------

ROW = [0] * 9
TIMELINES = {
    "bigint": json.dumps([[1, 2], [[0] + [10**30] * 8, ROW]]).encode(),
    "int_5000_digits": ("[[1, " + "9" * 5000 + "], [" + json.dumps(ROW) + "," + json.dumps(ROW) + "]]").encode(),
    "beyond_a_double": json.dumps([[1, 2], [[0] + [10**400] * 8, ROW]]).encode(),
    "1e300": json.dumps([[1e300, 2], [ROW, ROW]]).encode(),
    "nan": b"[[1, NaN], [[0,0,0,0,0,0,0,0,0],[0,0,0,0,0,0,0,0,0]]]",
    "rows_not_lists": json.dumps([[1, 2], [5, 6]]).encode(),
    "first_row_an_object": json.dumps([[1], [{"a": 1}]]).encode(),
    "strings": json.dumps([["a"], [["x"] * 9]]).encode(),
    "nested_5000": b"[" * 5000 + b"]" * 5000,
    "gzip_corrupt": b"\x1f\x8b\x08\x00" + b"\xff" * 30,
    "gzip_truncated": gzip.compress(json.dumps([[1], [ROW]]).encode())[:-12],
    "gzip_bomb": gzip.compress(b" " * (chrome_trace.MAX_TIMELINE_BYTES + 1)),
}


@pytest.mark.parametrize("case", list(TIMELINES))
def test_hostile_memory_timeline(make_client, tmp_path, case):
    data = TIMELINES[case]
    run_dir = tmp_path / "logs" / "tl"
    run_dir.mkdir(parents=True)
    (run_dir / "run.pt.trace.json").write_text(trace())
    name = "run.memory_timeline.json" + (".gz" if data[:2] == b"\x1f\x8b" else "")
    (run_dir / name).write_bytes(data)
    want = 413 if case in ("nested_5000", "gzip_bomb") else 422
    client = make_client(tmp_path / "logs")
    run = "tl/run.pt.trace.json"
    for path, params in LISTING_ENDPOINTS + TRACE_ENDPOINTS:  # the trace itself is fine
        _check(client, path, params, run, name, 200)
    for path, params in MEMORY_ENDPOINTS:
        _check(client, path, params, run, name, want)
    t0 = cpu_seconds()
    with pytest.raises(BadInput) as info:
        chrome_trace.parse_memory_timeline(data, name)
    assert info.value.status == want and info.value.file == name
    assert cpu_seconds() - t0 < LIMIT_S


def test_a_good_memory_timeline_still_reads():
    tl = chrome_trace.parse_memory_timeline(gzip.compress(json.dumps([[5, 7], [[0, *range(8)], [0] * 9]]).encode()), "t")
    assert tl.times_us.tolist() == [5, 7] and tl.sizes[0].tolist() == list(range(8))


def test_the_index_refuses_an_id_no_answer_could_write(tmp_path):
    """The index's own backstop (tools/trace_index.py), for any reader that lets one by:
    an id past int64 or a lone surrogate is a BadInput at build time, not a stream that
    breaks off later."""
    from profscope.tools import trace_index

    for mutate in (lambda ev: setattr(ev.tracks[0], "tid", 2**63), lambda ev: ev.names.append("\ud800")):
        ev = chrome_trace.trace_columns(trace().encode(), "t.json")
        mutate(ev)
        out = tmp_path / str(len(list(tmp_path.iterdir())))
        out.mkdir()
        with pytest.raises(BadInput) as info:
            trace_index.build_index(ev, out)
        assert info.value.file == "t.json"


# -- degenerate nestings (issue 32): XProf's visibility filter past its threshold -----------------

NEST_WORKER_CPU_S = 300  # the workers' CPU limit for these servers (PROFSCOPE_WORKER_CPU_SECONDS)
NEST_SERVER_CPU_S = 10.0  # CPU seconds the server process itself may spend per million events
NEST_HANG_S = 300  # backstop: no byte of the answer for this long is a hang


def _proc_cpu(pid: int) -> tuple[float, float]:
    """(the process's own CPU seconds, its reaped children's): proc(5) stat fields 14-17."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return (int(fields[11]) + int(fields[12])) / tick, (int(fields[13]) + int(fields[14])) / tick


@pytest.mark.parametrize("n", nestings.SIZES, ids=lambda n: f"{n // 1_000_000}M")
@pytest.mark.parametrize("shape", nestings.SHAPES)
def test_degenerate_nestings_answer_within_the_worker_limits(tmp_path, monkeypatch, shape, n):
    """A trace past XProf's filtering threshold whose events nest as deep as it is long
    (or wide, or in zero-length piles): ``trace_viewer@`` answers, the passes over the
    whole trace (read, index, XProf's zoom levels) in conversion workers under a CPU limit,
    the server process itself spending CPU in proportion to the trace, never quadratic in
    its nesting (a 97 KB trace of 633,000 identical nested events held a server for
    minutes). A real server process, so that its own CPU is told from its workers'."""
    logdir = tmp_path / "logs"
    logdir.mkdir()
    # gzipped as the file was, up to 1 M events; past that a repeated event
    # compresses beyond the reader's bomb ratio, so the 5 M traces are plain
    name = f"{shape}.pt.trace.json" + (".gz" if n <= 1_000_000 else "")
    nestings.write(logdir / name, shape, n)
    monkeypatch.setenv("PROFSCOPE_WORKER_CPU_SECONDS", str(NEST_WORKER_CPU_S))
    with profscope_process("serve", str(logdir), "--port", "0", "--cache-dir", str(tmp_path / "cache")) as (url, _, proc):
        own0, workers0 = _proc_cpu(proc.pid)
        r = httpx.get(f"{url.rstrip('/')}/data/plugin/profile/data", params={"run": name, "tag": "trace_viewer@"},
                      timeout=NEST_HANG_S)
        own, workers = (a - b for a, b in zip(_proc_cpu(proc.pid), (own0, workers0)))
    assert r.status_code == 200, r.text[:500]
    body = r.content
    assert body.startswith(b'{"displayTimeUnit"') and body.endswith(b"}"), body[-200:]  # whole, not broken off
    assert b'"filteredByVisibility":true' in body
    kept = body.count(b'"ph":"X"')
    assert own < NEST_SERVER_CPU_S * n / 1e6, (own, workers)
    assert workers < NEST_WORKER_CPU_S
    # past XPROF_LEVELS_MAX too: XProf's levels are made as deep as the window needs
    if shape in ("identical", "chain"):  # each is the first kept at its depth
        assert kept == n
    elif shape == "zero":  # per pile the first; the rest start 0 after it and last 0
        assert kept == nestings.PILES
    else:  # siblings end to start: thinned to about one per pixel
        assert 1 < kept < n / 100

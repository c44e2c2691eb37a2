"""Memory profile, run vs run (issue 36, docs/compare.md "Memory profile" and
"Snapshots"): the diff of two single answers in the diff JSON every comparable tool
answers.

:func:`diff` reads two answers of the ``memory_profile`` tool in XProf's schema, which
profscope gives for every run kind (an xplane's allocator events, a PyTorch trace's
``[memory]`` events, a snapshot: tools/memory_profile_xprof.py), one allocator of each:

- ``totals``: the peak bytes in use (``profileSummary.peakStats.peakBytesInUse``).
- ``rows``: what was live at the peak, XProf's ``activeAllocations`` (each a snapshot
  of ``memoryProfileSnapshots`` or a ``specialAllocations`` entry, times its
  ``numOccurrences``), matched across the runs by framework op, shape and dtype
  (``match: "name+shape"``); ``groups``: the same by framework op and by region type
  (XProf's ``regionType``: output, temp, persist...). XProf's live set at the peak adds
  up to the peak on every profile read here, so ``residual`` (the peak's delta less the
  rows') is what the runs' answers do not itemise: all of it for a trace whose
  ``[memory]`` events have no addresses (no live set, only a running sum).
- ``peak``, ``fragmentation``, ``allocations``, ``capacity``: the allocator's figures
  side by side; ``allocations`` from profscope's own summary in the answer
  (``profscope.allocators[id].summary``: an xplane's MemoryAllocation events, a trace's
  ``[memory]`` events with positive bytes, a snapshot's ``alloc`` entries), null where
  the answer has none.
- ``timeline``: both sampled timelines (``sampledTimelineSnapshots``) on one axis: by
  step when both runs have two or more steps (``stepId``; x = the step's ordinal plus
  the fraction of that step's time span), else by time from each run's first sample.

:func:`diff_snapshots` maps the snapshot compare (tools/memory_profile_snapshot.compare,
live blocks by allocation site) to the same shape.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

VERSION = 1


def _ref(ref: dict, answer_run=None) -> dict:
    out = {"run": ref.get("run", answer_run), "host": ref.get("host")}
    out["label"] = ref.get("label") or (f"{out['run']} · {out['host']}" if out["host"] else str(out["run"]))
    return out


def _row(key, label, b, c, match, link_base, link_current, **extra) -> dict:
    where = "both" if b is not None and c is not None else ("base_only" if c is None else "current_only")
    bv, cv = (b if b is not None else 0), (c if c is not None else 0)
    return {"key": key, "label": label, "in": where, "base": bv, "current": cv, "delta": cv - bv,
            "match": match, "link_base": link_base if b is not None else None,
            "link_current": link_current if c is not None else None, **extra}


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (-abs(r["delta"]), str(r["key"])))


def _ids_by_peak(answer: dict) -> list[str]:
    """The answer's allocators, highest peak first (ties in XProf's ``memoryIds`` order):
    the one a user asks about (TF's GPU_1_bfc comes first in ``memoryIds`` with a fifth of
    GPU_6_bfc's peak)."""
    per = answer.get("memoryProfilePerAllocator") or {}
    ids = [i for i in (answer.get("memoryIds") or per.keys()) if i in per]

    def peak(i):
        return int(((per[i].get("profileSummary") or {}).get("peakStats") or {}).get("peakBytesInUse") or 0)
    return sorted(ids, key=lambda i: -peak(i))


def _pair(base: dict, current: dict, b_want, c_want) -> tuple[str | None, str | None]:
    """The allocators compared: the ones the refs name, else the current run's highest
    peak that the base has too, else each run's highest peak."""
    b_ids, c_ids = _ids_by_peak(base), _ids_by_peak(current)
    if c_want is not None or b_want is not None:
        b_want, c_want = b_want or c_want, c_want or b_want  # one named: the same on both sides
        return (b_want if b_want in b_ids else None), (c_want if c_want in c_ids else None)
    common = [i for i in c_ids if i in b_ids]
    if common:
        return common[0], common[0]
    return (b_ids[0] if b_ids else None), (c_ids[0] if c_ids else None)


def _live_at_peak(alloc: dict) -> dict[tuple, dict]:
    """XProf's live set at the peak, by (framework op, shape, dtype, region type): bytes
    (``allocationBytes`` x ``numOccurrences``) and the number of buffers."""
    snaps, special = alloc.get("memoryProfileSnapshots") or [], alloc.get("specialAllocations") or []
    out: dict[tuple, dict] = {}
    for a in alloc.get("activeAllocations") or []:
        i, j, n = int(a["snapshotIndex"]), int(a["specialIndex"]), int(a["numOccurrences"])
        md = snaps[i]["activityMetadata"] if i >= 0 else special[j]
        key = (md.get("tfOpName") or "", md.get("tensorShape") or "", md.get("dataType") or "",
               md.get("regionType") or "")
        e = out.setdefault(key, {"bytes": 0, "buffers": 0})
        e["bytes"] += int(md["allocationBytes"]) * n
        e["buffers"] += n
    return out


def _peak_rows(b_live: dict, c_live: dict, link_b: str, link_c: str) -> list[dict]:
    rows = []
    for key in b_live.keys() | c_live.keys():
        b, c = b_live.get(key), c_live.get(key)
        op, shape, dtype, region = key
        label = f"{op or '(no op)'} {shape}".strip() + (f" {dtype}" if dtype and dtype != "INVALID" else "")
        rows.append(_row("|".join(key), label, b and b["bytes"], c and c["bytes"], "name+shape" if b and c else None,
                         link_b, link_c, framework_op=op, shape=shape, dtype=dtype, category=region,
                         buffers_base=b["buffers"] if b else 0, buffers_current=c["buffers"] if c else 0))
    return _sorted(rows)


def _group(rows: list[dict], field: str, match: str, link_b: str, link_c: str) -> list[dict]:
    sums: dict[str, list] = defaultdict(lambda: [None, None])
    for r in rows:
        s = sums[r[field]]
        if r["in"] != "current_only":
            s[0] = (s[0] or 0) + r["base"]
        if r["in"] != "base_only":
            s[1] = (s[1] or 0) + r["current"]
    return _sorted([_row(k or "", k or "(none)", b, c, match if b is not None and c is not None else None, link_b, link_c)
                    for k, (b, c) in sums.items()])


def _steps_axis(samples: list[dict]) -> dict[str, tuple[int, float, float]] | None:
    """Each step's ordinal and time span among the samples, or None when under two steps
    (a timeline by step would be one column)."""
    spans: dict[str, list] = {}
    for s in samples:
        t = int(s["timeOffsetPs"])
        span = spans.setdefault(s["activityMetadata"].get("stepId", "0"), [t, t])
        span[0], span[1] = min(span[0], t), max(span[1], t)
    if len(spans) < 2:
        return None
    order = sorted(spans, key=lambda k: (spans[k][0], k))
    return {k: (n, spans[k][0], spans[k][1]) for n, k in enumerate(order)}


def _timeline(alloc: dict, steps: dict | None) -> dict:
    samples = sorted(alloc.get("sampledTimelineSnapshots") or [], key=lambda s: int(s["timeOffsetPs"]))
    t0 = int(samples[0]["timeOffsetPs"]) if samples else 0
    xs, used, frag = [], [], []
    for s in samples:
        t, st = int(s["timeOffsetPs"]), s["aggregationStats"]
        if steps is None:
            xs.append((t - t0) / 1e6)  # ps -> µs from the first sample
        else:
            n, lo, hi = steps[s["activityMetadata"].get("stepId", "0")]
            xs.append(n + ((t - lo) / (hi - lo) if hi > lo else 0.0))
        used.append(int(st["heapAllocatedBytes"]) + int(st["stackReservedBytes"]))
        frag.append(st.get("fragmentation"))
    # Step ids can interleave in time (TF GPU:4: samples of step 1 before step 0's last),
    # so the step axis is sorted for a line drawn left to right.
    points = sorted(zip(xs, used, frag), key=lambda p: p[0])
    return {"x": [p[0] for p in points], "bytes": [p[1] for p in points], "fragmentation": [p[2] for p in points]}


def _figure(b, c) -> dict:
    return {"base": b, "current": c, "delta": (c - b) if b is not None and c is not None else None}


def _allocations(answer: dict, alloc_id: str | None):
    summ = (((answer.get("profscope") or {}).get("allocators") or {}).get(alloc_id) or {}).get("summary")
    return summ.get("allocations") if summ else None


def _why(b_id, c_id, b_live, c_live) -> str | None:
    if b_id is None or c_id is None:
        side = " and the ".join(s for s, i in (("base", b_id), ("current", c_id)) if i is None)
        return f"the {side} run has no such allocator: nothing recorded to compare"
    if b_id != c_id:
        return f"the runs have no allocator in common: {b_id!r} (base) is compared with {c_id!r} (current)"
    if not b_live or not c_live:
        return "the live set at the peak is not recorded for both runs (no addresses): the peak is compared, not itemised"
    return None


def diff_pprof(base: dict, current: dict, *, base_ref: dict, current_ref: dict, link: Callable) -> dict:
    """Two JAX device-memory profile answers (tools/memory_profile_pprof.py), the profile
    each shows: pprof's ``-diff_base`` in the diff JSON. A row per identical Python stack
    (``match: "stack"``), labelled by its allocation site; live bytes as the totals, so
    the rows add up to the total's change (no residual)."""
    b_ref, c_ref = _ref(base_ref), _ref(current_ref)
    b_ref["profile"], c_ref["profile"] = base.get("profile"), current.get("profile")
    link_b = link("memory_profile", run=b_ref["run"], host=b_ref["host"], profile=b_ref["profile"])
    link_c = link("memory_profile", run=c_ref["run"], host=c_ref["host"], profile=c_ref["profile"])

    def by_stack(answer):
        return {tuple((f["function"], f["file"], f["line"]) for f in s["stack"]): s for s in answer["overview"]["stacks"]}
    b, c = by_stack(base), by_stack(current)
    rows = []
    for key in set(b) | set(c):
        bs, cs = b.get(key), c.get(key)
        site = (cs or bs)["site"]
        label = f"{site['function']} ({site['file'].rsplit('/', 1)[-1]}:{site['line']})" if site else "<no stack>"
        rows.append(_row(" > ".join(f"{fn} ({file.rsplit('/', 1)[-1]}:{line})" for fn, file, line in key), label,
                         bs["bytes"] if bs else None, cs["bytes"] if cs else None, "stack", link_b, link_c,
                         site=site, stack=[dict(zip(("function", "file", "line"), f)) for f in key]))
    rows = [r for r in _sorted(rows) if r["delta"] or r["in"] != "both"]
    bt, ct = base["overview"]["totals"]["bytes"], current["overview"]["totals"]["bytes"]
    return {"version": VERSION, "tool": "memory_profile", "base": b_ref, "current": c_ref, "comparable": True, "why": None,
            "totals": {"base": bt, "current": ct, "delta": ct - bt, "unit": "bytes",
                       "residual": ct - bt - sum(r["delta"] for r in rows)},
            "groups": {}, "rows": rows}


def diff(base: dict, current: dict, *, base_ref: dict, current_ref: dict, link: Callable) -> dict:
    """The diff JSON (docs/compare.md) of two ``memory_profile`` answers (XProf's schema;
    JAX device-memory profiles: :func:`diff_pprof`)."""
    if current.get("kind") == "pprof" and base.get("kind") == "pprof":
        return diff_pprof(base, current, base_ref=base_ref, current_ref=current_ref, link=link)
    b_ref, c_ref = _ref(base_ref), _ref(current_ref)
    b_id, c_id = _pair(base, current, base_ref.get("allocator"), current_ref.get("allocator"))
    b_ref["allocator"], c_ref["allocator"] = b_id, c_id
    b_alloc = (base.get("memoryProfilePerAllocator") or {}).get(b_id) or {}
    c_alloc = (current.get("memoryProfilePerAllocator") or {}).get(c_id) or {}
    link_b = link("memory_profile", run=b_ref["run"], host=b_ref["host"])
    link_c = link("memory_profile", run=c_ref["run"], host=c_ref["host"])
    b_live, c_live = _live_at_peak(b_alloc), _live_at_peak(c_alloc)
    rows = _peak_rows(b_live, c_live, link_b, link_c)
    b_sum, current_sum = b_alloc.get("profileSummary") or {}, c_alloc.get("profileSummary") or {}
    b_peak, c_peak = (b_sum.get("peakStats") or {}), (current_sum.get("peakStats") or {})
    bp = int(b_peak["peakBytesInUse"]) if "peakBytesInUse" in b_peak else None
    cp = int(c_peak["peakBytesInUse"]) if "peakBytesInUse" in c_peak else None
    delta = cp - bp if bp is not None and cp is not None else None
    b_steps = _steps_axis(b_alloc.get("sampledTimelineSnapshots") or [])
    c_steps = _steps_axis(c_alloc.get("sampledTimelineSnapshots") or [])
    by_step = b_steps is not None and c_steps is not None
    return {
        "version": VERSION, "tool": "memory_profile", "base": b_ref, "current": c_ref,
        "comparable": b_id is not None and c_id is not None, "why": _why(b_id, c_id, b_live, c_live),
        "totals": {"base": bp, "current": cp, "delta": delta, "unit": "bytes",
                   "residual": delta - sum(r["delta"] for r in rows) if delta is not None else None},
        "groups": {"framework_op": _group(rows, "framework_op", "name", link_b, link_c),
                   "category": _group(rows, "category", "category", link_b, link_c)},
        "rows": rows,
        "peak": {**_figure(bp, cp), "time_ps": {"base": b_sum.get("peakStatsTimePs"), "current": current_sum.get("peakStatsTimePs")}},
        "fragmentation": _figure(b_peak.get("fragmentation"), c_peak.get("fragmentation")),
        "allocations": _figure(_allocations(base, b_id), _allocations(current, c_id)),
        "capacity": _figure(*(int(s["memoryCapacity"]) if s.get("memoryCapacity") else None for s in (b_sum, current_sum))),
        "allocators": {"base": list(base.get("memoryIds") or []), "current": list(current.get("memoryIds") or [])},
        "timeline": {"align": "step" if by_step else "time", "x_unit": "step" if by_step else "us",
                     "base": _timeline(b_alloc, b_steps if by_step else None),
                     "current": _timeline(c_alloc, c_steps if by_step else None)},
    }


def _site_label(site: dict | None) -> str:
    if not site:
        return "(no stack recorded)"
    return f"{site.get('short') or site.get('name')} ({site.get('filename')}:{site.get('line')})"


def diff_snapshots(cmp: dict, *, base_ref: dict, current_ref: dict, link: Callable, base_is: str = "a") -> dict:
    """The snapshot compare (tools/memory_profile_snapshot.compare(a, b)) in the diff JSON:
    the live bytes at the end of each snapshot by allocation site (the frames of its
    stack: ``match: "stack"``). ``base_is``: which of the compare's snapshots is the base
    (the snapshot page compares its own run, ``a``, with the base, ``b``). Sites whose
    bytes and blocks did not change are left out by the compare (delta 0) and past
    ``max_sites`` rows are cut: ``residual`` is what the cut rows hold."""
    b_ref, c_ref = _ref(base_ref), _ref(current_ref)
    link_b = link("memory_profile", run=b_ref["run"])
    link_c = link("memory_profile", run=c_ref["run"])
    B, C = ("A", "B") if base_is == "a" else ("B", "A")
    where = {f"only{B}": "base_only", f"only{C}": "current_only", "both": "both"}
    rows = []
    for s in cmp["sites"]:
        key = f"{B}{s[f'stackId{B}']}/{C}{s[f'stackId{C}']}"
        rows.append({"key": key, "label": _site_label(s["site"]), "in": where[s["in"]],
                     "base": s[f"bytes{B}"], "current": s[f"bytes{C}"], "delta": s[f"bytes{C}"] - s[f"bytes{B}"],
                     "match": "stack" if s["in"] == "both" else None,
                     "link_base": link_b if where[s["in"]] != "current_only" else None,
                     "link_current": link_c if where[s["in"]] != "base_only" else None,
                     "blocks_base": s[f"count{B}"], "blocks_current": s[f"count{C}"], "op": (s["site"] or {}).get("op")})
    rows = _sorted(rows)
    base, cur = (cmp["a"], cmp["b"]) if base_is == "a" else (cmp["b"], cmp["a"])
    delta = cur["liveBytes"] - base["liveBytes"]
    seg = cmp["segments"]
    return {
        "version": VERSION, "tool": "memory_profile", "base": b_ref, "current": c_ref,
        "comparable": True, "why": None,
        "totals": {"base": base["liveBytes"], "current": cur["liveBytes"], "delta": delta, "unit": "bytes",
                   "residual": delta - sum(r["delta"] for r in rows)},
        "groups": {"op": _group(rows, "op", "name", link_b, link_c)},
        "rows": rows,
        "blocks": _figure(base["liveBlocks"], cur["liveBlocks"]),
        "segments": {"base_only": seg[f"only{B}Count"], "current_only": seg[f"only{C}Count"],
                     "base_only_bytes": seg[f"only{B}Bytes"], "current_only_bytes": seg[f"only{C}Bytes"],
                     "common": seg["common"]},
        "sites_omitted": cmp["sitesOmitted"],
    }

"""Memory viewer, module vs module: the change of compiled peak, attributed buffer by buffer.

:func:`diff` takes two single memory-viewer payloads (tools/memory_viewer.py
``from_hlo``, full or page view) and answers issue 36's diff JSON (docs/compare.md,
"The diff JSON" and "Memory viewer"). What counts: the buffers of
``profscope.peakBuffers``, i.e. every buffer summed into ``totals.peakBytes`` (the
indefinite allocations at their allocation's size, then the heap-simulated buffers live at
the first maximum of the replayed heap, at the size the replay added). Each side's list sums
to its peak, so the rows' deltas sum to the peak delta and ``residual`` is 0 B; a residual
that is not 0 would say that a payload's list and its peak disagree (it is reported, never
spread over the rows).

Matching, one buffer to at most one, in this order (``match`` of the row):

1. ``name+shape``: the same buffer name (instruction and shape index) and shape string;
2. ``framework_op+source``: the same framework op (``tfOpName``, XLA's ``op_name``
   metadata) and source line, both known; within such a group pairs of the same name come
   first, then the rest in program order;
3. ``name``: the same buffer name with another shape (an entry parameter has no framework op:
   the batch input ``Arg_1.2`` is f32[256,128] in one module and f32[1024,128] in the other).

Anything left is ``base_only`` (removed) or ``current_only`` (added). Two modules whose pairs
by rule 1 or 2 that carry a framework op or a source line hold under 1 % of the smaller peak
look like different programs (the demo's MLP and transformer train steps share only Adam's
two f32[] bias-correction scalars and the step count): the answer is then
``comparable: false`` with a ``why``, and every buffer is a row of its own (the totals
still exact).
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any, Callable

__all__ = ["VERSION", "diff", "framework_op"]

VERSION = 1
TOOL = "memory_viewer"
# At most this many points per heap curve (a max filter: the peak point survives) and this
# many buffers per side in peak_buffers; rows and groups are never cut.
MAX_POINTS = 1500
MAX_PEAK_BUFFERS = 500
_MIB = float(1 << 20)
RELATED_SHARE = 0.01  # of the smaller peak, paired by rule 1 or 2: less and the modules are unrelated


def _buffers(payload: dict) -> list[dict] | None:
    extras = payload.get("profscope")
    if not isinstance(extras, dict):
        return None
    got = extras.get("peakBuffers")
    return got if isinstance(got, list) else None


def _peak(payload: dict) -> int | None:
    totals = (payload.get("profscope") or {}).get("totals") or {}
    peak = totals.get("peakBytes")
    return int(peak) if isinstance(peak, (int, float)) else None


def _related(b: dict) -> bool:
    return bool(b.get("tfOpName") or b.get("source"))


_JIT_SCOPES = re.compile(r"^(?:jit\([^/]*\)/)+")


def framework_op(op_name: str) -> str:
    """XLA's ``op_name`` metadata without its leading ``jit(...)/`` scopes: JAX writes the
    jitted functions the op was traced in first (``jit(train_step_big)/jit(train_step)/
    jvp()/dot_general``), and those name the compilation, not the op: the same line of
    ``train_step`` compiled on its own reads ``jit(train_step)/jvp()/dot_general``."""
    return _JIT_SCOPES.sub("", op_name or "")


def _match(base: list[dict], current: list[dict]) -> list[tuple[int | None, int | None, str | None]]:
    """Pairs of indices (base, current, rule); None on the side a buffer is missing from."""
    free_b = set(range(len(base)))
    free_c = set(range(len(current)))
    pairs: list[tuple[int | None, int | None, str | None]] = []

    def pair(key_of, rule: str, within=None) -> None:
        by_key: dict[Any, list[int]] = defaultdict(list)
        for i in sorted(free_b):
            k = key_of(base[i])
            if k is not None:
                by_key[k].append(i)
        for j in sorted(free_c):
            k = key_of(current[j])
            cands = by_key.get(k) if k is not None else None
            if not cands:
                continue
            pick = 0
            if within is not None:
                pick = next((n for n, i in enumerate(cands) if within(base[i], current[j])), 0)
            i = cands.pop(pick)
            free_b.discard(i)
            free_c.discard(j)
            pairs.append((i, j, rule))

    pair(lambda b: (b.get("name"), b.get("shape")), "name+shape")
    pair(lambda b: (framework_op(b.get("tfOpName")), b.get("source")) if b.get("tfOpName") and b.get("source")
         else None,
         "framework_op+source", within=lambda x, y: x.get("name") == y.get("name"))
    pair(lambda b: b.get("name") or None, "name")
    pairs += [(i, None, None) for i in sorted(free_b)]
    pairs += [(None, j, None) for j in sorted(free_c)]
    return pairs


def _row(b: dict | None, c: dict | None, rule: str | None, links: tuple[Callable, Callable]) -> dict:
    either = c or b
    assert either is not None
    bb = int(b["bytes"]) if b else 0
    cb = int(c["bytes"]) if c else 0
    nb, nc = (b or {}).get("name"), (c or {}).get("name")
    label = nb if nb == nc or c is None else nc if b is None else f"{nb} → {nc}"
    return {
        "key": label,
        "label": label,
        "in": "both" if b and c else "base_only" if b else "current_only",
        "base": bb,
        "current": cb,
        "delta": cb - bb,
        "match": rule,
        # The single view of each side opened on the buffer (memory_viewer.js URL key
        # ``buffer``: a logical buffer id).
        "link_base": links[0](b["id"]) if b else None,
        "link_current": links[1](c["id"]) if c else None,
        "category": either.get("category") or "",
        "framework_op": framework_op(either.get("tfOpName") or ""),
        "source": either.get("source") or "",
        "opcode": either.get("opCode") or "",
        "shape_base": (b or {}).get("shape"),
        "shape_current": (c or {}).get("shape"),
        "id_base": (b or {}).get("id"),
        "id_current": (c or {}).get("id"),
    }


def _unique_keys(rows: list[dict]) -> None:
    seen: dict[str, int] = {}
    for r in rows:
        n = seen.get(r["key"], 0)
        seen[r["key"]] = n + 1
        if n:
            r["key"] = f"{r['key']}#{n + 1}"


def _group(rows: list[dict], field: str, empty: str) -> list[dict]:
    acc: dict[str, dict] = {}
    for r in rows:
        k = r[field] or empty
        g = acc.get(k)
        if g is None:
            g = acc[k] = {"key": k, "label": k, "in": "both", "base": 0, "current": 0, "delta": 0,
                          "match": None, "link_base": None, "link_current": None, "count": 0,
                          "_sides": set()}
        g["base"] += r["base"]
        g["current"] += r["current"]
        g["delta"] += r["delta"]
        g["count"] += 1
        g["_sides"].add(r["in"])
    out = []
    for g in acc.values():
        sides = g.pop("_sides")
        g["in"] = "both" if "both" in sides or len(sides) > 1 else sides.pop()
        out.append(g)
    return _sorted(out)


def _sorted(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (-abs(r["delta"]), r["key"]))


def _curve(payload: dict) -> dict:
    """The heap over program order (MiB, as the memory viewer draws it), at most MAX_POINTS
    points: each bin's maximum, so the peak point and its value stay."""
    ys = payload.get("heapSizes") or []
    xs = (payload.get("profscope") or {}).get("heapPositions") or list(range(len(ys)))
    if len(xs) != len(ys):
        xs = list(range(len(ys)))
    n = len(ys)
    if n > MAX_POINTS:
        keep = []
        step = n / MAX_POINTS
        for k in range(MAX_POINTS):
            lo, hi = int(k * step), max(int((k + 1) * step), int(k * step) + 1)
            keep.append(max(range(lo, min(hi, n)), key=ys.__getitem__))
        xs, ys = [xs[i] for i in keep], [ys[i] for i in keep]
    peak_at = payload.get("peakHeapSizePosition") or 0
    return {"x": list(xs), "mib": list(ys), "peak_position": peak_at,
            "peak_mib": payload.get("peakHeapMib") or 0.0, "events": n}


def _side(buffers: list[dict], rows_of: dict[int, str]) -> dict:
    ranked = sorted(range(len(buffers)), key=lambda i: (-int(buffers[i]["bytes"]), i))
    shown = ranked[:MAX_PEAK_BUFFERS]
    return {
        "buffers": [{"row": rows_of.get(i), "name": buffers[i].get("name"), "shape": buffers[i].get("shape"),
                     "bytes": int(buffers[i]["bytes"]), "category": buffers[i].get("category"),
                     "framework_op": framework_op(buffers[i].get("tfOpName") or "")} for i in shown],
        "count": len(buffers),
        "omitted": len(buffers) - len(shown),
    }


def _unrelated(pairs, bl: list[dict], cl: list[dict], smaller_peak: int, base_ref: dict,
               current_ref: dict) -> str | None:
    """Why the two modules look like different programs, or None. Related: the pairs of rule
    1 or 2 whose buffer carries a framework op or a source line (a bare ``tuple.4`` or
    ``constant.1`` of one shape pairs by chance) hold at least RELATED_SHARE of the smaller
    peak (two programs sharing only an optimizer's step-count scalars are not related)."""
    shared = sum(min(int(bl[i]["bytes"]), int(cl[j]["bytes"])) for i, j, rule in pairs
                 if rule in ("name+shape", "framework_op+source") and _related(cl[j]))
    if not bl or not cl or not smaller_peak:
        return None  # a side with no buffer, or a peak of 0 B: nothing to judge the pairs against
    if shared >= RELATED_SHARE * smaller_peak:
        return None
    what = "share no buffer" if not shared else f"share only {shared:,} B (under {RELATED_SHARE:.0%} of the smaller peak)"
    return (f"{base_ref.get('label')} and {current_ref.get('label')} {what} by framework op and source line or "
            "by instruction name and shape: they look like different programs, so no buffer is paired; every "
            "row is a buffer of one side only (the totals are still exact).")


def _refuse(base: dict, current: dict, base_ref: dict, current_ref: dict, why: str) -> dict:
    pb, pc = _peak(base), _peak(current)
    totals = {"base": pb or 0, "current": pc or 0, "delta": (pc or 0) - (pb or 0), "unit": "bytes",
              "residual": None}
    return {"version": VERSION, "tool": TOOL, "base": base_ref, "current": current_ref, "comparable": False,
            "why": why, "totals": totals, "groups": {}, "rows": []}


def diff(base: dict, current: dict, *, base_ref: dict, current_ref: dict,
         link: Callable[..., str]) -> dict:
    """The diff JSON of two memory-viewer payloads (module docstring; docs/compare.md)."""
    bl, cl = _buffers(base), _buffers(current)
    missing = [ref.get("label") or ref.get("module") or "?" for ref, got in ((base_ref, bl), (current_ref, cl))
               if got is None]
    if missing:
        return _refuse(base, current, base_ref, current_ref,
                       f"{' and '.join(missing)} {'have' if len(missing) > 1 else 'has'} no heap-simulator replay (a text-only XLA dump, or a "
                       "module without buffer assignment): its peak is not a set of buffers, so the peak "
                       "cannot be attributed; open each module on its own.")
    assert bl is not None and cl is not None
    space = (current.get("profscope") or {}).get("memorySpace") or None

    def side(ref: dict) -> Callable:
        return lambda buffer_id: link(TOOL, run=ref.get("run"), host=ref.get("host"), module_name=ref.get("module"),
                                      memory_space=space, buffer=buffer_id)
    links = (side(base_ref), side(current_ref))
    pairs = _match(bl, cl)
    pb = _peak(base) if _peak(base) is not None else sum(int(b["bytes"]) for b in bl)
    pc = _peak(current) if _peak(current) is not None else sum(int(b["bytes"]) for b in cl)
    why = _unrelated(pairs, bl, cl, min(pb, pc), base_ref, current_ref)
    if why is not None:
        pairs = [(i, None, None) for i in range(len(bl))] + [(None, j, None) for j in range(len(cl))]
    rows = [_row(bl[i] if i is not None else None, cl[j] if j is not None else None, rule, links)
            for i, j, rule in pairs]
    _unique_keys(rows)
    rows_of_base = {i: r["key"] for (i, _, _), r in zip(pairs, rows) if i is not None}
    rows_of_current = {j: r["key"] for (_, j, _), r in zip(pairs, rows) if j is not None}
    attributed = sum(r["delta"] for r in rows)
    rows = _sorted(rows)
    counts = {k: sum(1 for r in rows if r["in"] == k) for k in ("both", "base_only", "current_only")}
    return {
        "version": VERSION,
        "tool": TOOL,
        "base": base_ref,
        "current": current_ref,
        "comparable": why is None,
        "why": why,
        "totals": {"base": pb, "current": pc, "delta": pc - pb, "unit": "bytes", "residual": (pc - pb) - attributed},
        "groups": {"category": _group(rows, "category", "(none)"),
                   "framework_op": _group(rows, "framework_op", "(no framework op)")},
        "rows": rows,
        "counts": {**counts, "changed": sum(1 for r in rows if r["delta"] != 0)},
        "memory_space": (base.get("profscope") or {}).get("memorySpace", 0),
        "heap": {"base": _curve(base), "current": _curve(current)},
        "peak_buffers": {"base": _side(bl, rows_of_base), "current": _side(cl, rows_of_current)},
    }

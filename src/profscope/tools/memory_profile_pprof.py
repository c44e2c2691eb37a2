"""The memory profile of JAX device-memory profiles (pprof, formats/pprof.py): plain data
the page pages/memory_profile_pprof.js only displays.

One profile (``overview``): live bytes by device and kind, an icicle of bytes by Python
stack (the outermost caller at the top, as the snapshot page's icicle), the top
allocation sites (pprof's ``-top``: bytes by the leaf frame, "flat") and the buffers.
Several profiles of one folder (``timeline``): live bytes of each, by device. Two
profiles (``diff``): what grew, by stack: pprof's ``-diff_base`` (current minus base,
per identical stack).

Bytes are the sample value whose unit is ``bytes`` (JAX: ``space/bytes``), counts the
one whose unit is ``count`` (``allocations/count``); a sample without a ``device`` label
(JAX's loaded executables) is counted under device "" ("no device").
"""

from __future__ import annotations

from collections import defaultdict

from profscope.model.pprof_profile import Frame, Profile

TOP_SITES = 50
MAX_BUFFERS = 2000
MAX_ICICLE_NODES = 3000
# Stacks kept in the payload for a compare against another run (largest first): a
# profile has one sample per live buffer, most sharing a few stacks; beyond this the
# rest is the compare's residual.
MAX_STACKS = 5000
NO_DEVICE = ""


# Frames of installed libraries (jax's own dispatch, numpy): a buffer's leaf frame is
# jax's (``pxla.py __call__``) for every buffer, so the allocation site shown is the
# innermost frame outside them, the user's line that made the buffer.
LIBRARY_PATH_PARTS = ("/site-packages/", "/dist-packages/", "/jax/_src/", "/jaxlib/")


def is_library(f: Frame) -> bool:
    return any(part in f.file for part in LIBRARY_PATH_PARTS) or not f.file or f.file.startswith("<")


def site_of(p: Profile, stack: tuple[int, ...]) -> int | None:
    """The allocation site of a stack (outermost first): its innermost frame outside the
    libraries, else its leaf."""
    for fid in reversed(stack):
        if not is_library(p.frames[fid]):
            return fid
    return stack[-1] if stack else None


def _frame_label(f: Frame) -> str:
    return f"{f.function} ({f.file.rsplit('/', 1)[-1]}:{f.line})" if f.file else f.function


def frame_json(f: Frame) -> dict:
    return {"function": f.function, "file": f.file, "line": f.line}


def _values(p: Profile, sample) -> tuple[int, int]:
    bi, ci = p.value_index("bytes"), p.value_index("count")
    return (sample.values[bi] if bi is not None else 0), (sample.values[ci] if ci is not None else 1)


def _device(sample) -> str:
    d = sample.labels.get("device")
    return NO_DEVICE if d is None else str(d)


def totals(p: Profile, device: str | None = None) -> dict:
    """Live bytes and buffers (sample counts' sum), overall and by (device, kind)."""
    by: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    for s in p.samples:
        if device is not None and _device(s) != device:
            continue
        b, c = _values(p, s)
        row = by[(_device(s), str(s.labels.get("kind", "")))]
        row[0] += b
        row[1] += c
    rows = [{"device": d, "kind": k, "bytes": v[0], "count": v[1]} for (d, k), v in by.items()]
    rows.sort(key=lambda r: (-r["bytes"], r["device"], r["kind"]))
    return {"bytes": sum(r["bytes"] for r in rows), "count": sum(r["count"] for r in rows), "byDeviceKind": rows}


def devices(p: Profile) -> list[str]:
    """The device labels of the profile's samples, sorted ("" last: no device)."""
    return sorted({_device(s) for s in p.samples}, key=lambda d: (d == NO_DEVICE, d))


def kinds(p: Profile, device: str | None = None) -> list[str]:
    """The ``kind`` labels of the samples (of one device), sorted; "" for a sample without."""
    return sorted({str(s.labels.get("kind", "")) for s in _selected(p, device)})


def _selected(p: Profile, device: str | None):
    return [s for s in p.samples if device is None or _device(s) == device]


def top_sites(p: Profile, device: str | None = None, n: int = TOP_SITES, kind: str | None = None) -> list[dict]:
    """Bytes by allocation site (:func:`site_of`: the innermost frame outside the
    libraries), as pprof's ``-top`` flat column with ``-focus`` on user code; ``cumBytes``
    is the bytes of every sample whose stack holds the frame (pprof's cum). ``kind``: only
    the samples of that ``kind`` label (``buffer``, ``executable``; "" for none)."""
    flat: dict[int, list[int]] = defaultdict(lambda: [0, 0])
    cum: dict[int, int] = defaultdict(int)
    for s in _selected(p, device):
        if not s.stack or (kind is not None and str(s.labels.get("kind", "")) != kind):
            continue
        b, c = _values(p, s)
        site = site_of(p, s.stack)
        flat[site][0] += b
        flat[site][1] += c
        for fid in set(s.stack):
            cum[fid] += b
    rows = [{**frame_json(p.frames[fid]), "bytes": v[0], "count": v[1], "cumBytes": cum[fid]} for fid, v in flat.items()]
    rows.sort(key=lambda r: (-r["bytes"], -r["count"], r["function"], r["file"], r["line"]))
    return rows[:n]


def buffers(p: Profile, device: str | None = None, n: int = MAX_BUFFERS) -> dict:
    """The samples (one per live buffer or executable for JAX), largest first."""
    rows = []
    for i, s in enumerate(_selected(p, device)):
        b, c = _values(p, s)
        leaf = p.frames[site_of(p, s.stack)] if s.stack else None
        rows.append({"sample": i, "bytes": b, "count": c, "device": _device(s), "kind": str(s.labels.get("kind", "")),
                     "site": frame_json(leaf) if leaf else None,
                     "labels": {k: v for k, v in s.labels.items() if k not in ("device", "kind")}})
    rows.sort(key=lambda r: (-r["bytes"], r["sample"]))
    return {"rows": rows[:n], "total": len(rows), "omitted": max(0, len(rows) - n)}


def icicle(p: Profile, device: str | None = None, max_nodes: int = MAX_ICICLE_NODES) -> dict:
    """Bytes by stack as Plotly icicle arrays (ids/labels/parents/values/hover, values the
    total under each node), outermost frame at the top; the smallest nodes beyond
    ``max_nodes`` are folded into their parent's "other"."""
    tree: dict[tuple[int, ...], int] = defaultdict(int)
    total = 0
    for s in _selected(p, device):
        b, _ = _values(p, s)
        if b <= 0:
            continue
        total += b
        for depth in range(1, len(s.stack) + 1):
            tree[s.stack[:depth]] += b
    kept = sorted(tree, key=lambda k: (-tree[k], len(k)))[:max_nodes]
    keep = set(kept)
    kept = [k for k in kept if all(k[:d] in keep for d in range(1, len(k)))]
    ids, labels, parents, values, hover = ["root"], ["all"], [""], [total], ["all live bytes"]
    for k in sorted(kept, key=len):
        ids.append("/".join(map(str, k)))
        f = p.frames[k[-1]]
        labels.append(f.function)
        parents.append("/".join(map(str, k[:-1])) if len(k) > 1 else "root")
        values.append(tree[k])
        hover.append(_frame_label(f))
    return {"ids": ids, "labels": labels, "parents": parents, "values": values, "hover": hover,
            "totalBytes": total, "nodesOmitted": len(tree) - len(kept)}


def stacks(p: Profile, device: str | None = None) -> list[dict]:
    """Bytes and counts by identical stack (frames outermost first, and the site): what
    a diff against another run's answer is made of (compare_memory_profile.diff_pprof)."""
    rows = [{"stack": [frame_json(f) for f in k], "site": frame_json(_site_frame(k)) if k else None,
             "bytes": v[0], "count": v[1]} for k, v in _by_stack(p, device).items()]
    rows.sort(key=lambda r: (-r["bytes"], -r["count"], [tuple(f.values()) for f in r["stack"]]))
    return rows[:MAX_STACKS]


def overview(p: Profile, name: str, device: str | None = None) -> dict:
    return {"file": name, "timeNanos": p.time_nanos, "sampleTypes": [{"type": t, "unit": u} for t, u in p.sample_types],
            "devices": devices(p), "device": device, "totals": totals(p, device), "icicle": icicle(p, device),
            "topSites": top_sites(p, device), "buffers": buffers(p, device), "stacks": stacks(p, device)}


def timeline(profiles: list[tuple[str, Profile]]) -> dict:
    """Live bytes of successive profiles (in the run's order), overall and by device."""
    points = []
    for name, p in profiles:
        t = totals(p)
        by_dev: dict[str, int] = defaultdict(int)
        for r in t["byDeviceKind"]:
            by_dev[r["device"]] += r["bytes"]
        points.append({"profile": name, "timeNanos": p.time_nanos, "bytes": t["bytes"], "count": t["count"],
                       "byDevice": dict(sorted(by_dev.items()))})
    return {"profiles": points, "devices": sorted({d for pt in points for d in pt["byDevice"]})}


def _site_frame(stack: tuple[Frame, ...]) -> Frame | None:
    return next((f for f in reversed(stack) if not is_library(f)), stack[-1] if stack else None)


def _by_stack(p: Profile, device: str | None) -> dict[tuple[Frame, ...], list[int]]:
    by: dict[tuple[Frame, ...], list[int]] = defaultdict(lambda: [0, 0])
    for s in _selected(p, device):
        b, c = _values(p, s)
        row = by[tuple(p.frames[i] for i in s.stack)]
        row[0] += b
        row[1] += c
    return by


def diff(base: Profile, current: Profile, device: str | None = None, n: int = TOP_SITES) -> dict:
    """What grew from ``base`` to ``current``, by identical stack (pprof -diff_base):
    the stacks sorted by bytes grown, each with its frames (outermost first) and its leaf."""
    a, b = _by_stack(base, device), _by_stack(current, device)
    rows = []
    for stack in set(a) | set(b):
        (ab, ac), (bb, bc) = a.get(stack, (0, 0)), b.get(stack, (0, 0))
        if ab == bb and ac == bc:
            continue
        rows.append({"deltaBytes": bb - ab, "deltaCount": bc - ac, "baseBytes": ab, "bytes": bb,
                     "site": frame_json(_site_frame(stack)) if stack else None,
                     "stack": [frame_json(f) for f in stack]})
    rows.sort(key=lambda r: (-r["deltaBytes"], -r["deltaCount"], [tuple(f.values()) for f in r["stack"]]))
    tb, tc = totals(base, device), totals(current, device)
    return {"baseBytes": tb["bytes"], "bytes": tc["bytes"], "deltaBytes": tc["bytes"] - tb["bytes"],
            "deltaCount": tc["count"] - tb["count"], "grew": [r for r in rows if r["deltaBytes"] > 0][:n],
            "shrank": sorted((r for r in rows if r["deltaBytes"] < 0), key=lambda r: r["deltaBytes"])[:n],
            "stacksChanged": len(rows)}

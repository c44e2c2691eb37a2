"""What would make it fit: the OOM risk's planner. Plain data in, plain data out.

Inputs are the compiled evidence of XLA modules (:func:`profscope.tools.oom_risk.
compiled_evidence`: the memory viewer's buffers live at a module's peak, classified into
categories, and its indefinite allocations with their attributes) and the OOM-risk answer
(peak, capacity, thresholds). ``docs/oom_risk.md`` ("What would make it fit") is the long
form of every rule here.

:func:`savings` prices four changes from the buffers at the peak, each with the peak it
leaves and that peak's tier:

``donate``
    the entry parameters that are not live-out while an output of the same shape and size
    exists (``oom_risk.undonated_arguments``): with ``donate_argnums`` XLA aliases each
    with that output, so ``alias_size_in_bytes`` grows by exactly their bytes. XLA may
    then need temporaries for values it had computed into the output's memory while the
    argument was still read (a gradient written into the new optimizer state's buffer):
    each such output allocation's largest other value bounds that, so the saving is at
    least ``bytes - tempBoundBytes``.
``remat``
    the activations live at the peak (category ``activations``), largest first: with
    rematerialisation (``jax.checkpoint``) they are recomputed in the backward pass
    instead of kept; the largest one is live again while it is recomputed, so the
    estimate is the rest. On remat_off/remat_on (scripts/make_oom_programs.py) the real
    saving of checkpointing every block is larger (73.9 MB vs 64.5 MB estimated).
``shard``
    parameters and optimizer state live at the peak split over N devices (FSDP / ZeRO):
    each device keeps ``ceil(bytes / N)``.
``precision``
    the float32 buffers live at the peak (shape ``f32[...]``) kept in bfloat16: half
    their bytes.

:func:`batch_fit` fits a module's peak against the batch (or sequence) size from two or
more compilations of the same program (:func:`signature` matches them: the same entry
parameters by name, type and rank; :func:`sizes` reads the size from the one parameter
dimension that differs). Between two compilations the peak is the straight line through
them; outside, the line through the two nearest. Growth is called linear when every
inner compilation is within 5 % of the line through its neighbours (leave-one-out);
with two compilations the line cannot be checked, with one there is no fit.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

from profscope.model.units import fmt_bytes
from profscope.tools import oom_risk

__all__ = ["DEFAULT_SHARDS", "batch_fit", "headline", "savings", "signature", "sizes"]

DEFAULT_SHARDS = 8
TOP = 5  # buffers named per change
LINEAR_TOLERANCE = 0.05  # leave-one-out error / peak above which growth is "not linear"

_SHAPE = re.compile(r"^\s*([a-z]+[0-9]*)\[([0-9,]*)\]")


def _shape(text: str | None) -> tuple[str, tuple[int, ...]] | None:
    """``f32[32,256]{1,0}`` -> ("f32", (32, 256)); a tuple or token shape -> None."""
    m = _SHAPE.match(text or "")
    if not m:
        return None
    return m.group(1), tuple(int(d) for d in m.group(2).split(",") if d)


def _tier(peak: int, answer: dict) -> str:
    return oom_risk.tier_of(peak, answer.get("capacityBytes"), answer["thresholds"])


def _change(cid: str, title: str, saved: int, answer: dict, detail: str, buffers: list[dict], **extra) -> dict:
    after = max(0, answer["peakBytes"] - saved)
    return {"id": cid, "title": title, "savedBytes": saved, "peakAfterBytes": after, "riskAfter": _tier(after, answer),
            "utilizationAfter": after / answer["capacityBytes"] if answer.get("capacityBytes") else None,
            "detail": detail, "buffers": buffers, **extra}


def _named(items: list[dict]) -> list[dict]:
    return [{"name": i.get("name") or "", "bytes": i["bytes"], "shape": i.get("shape") or "", "opName": i.get("opName") or "",
             "category": i["category"], **({"link": i["link"]} if i.get("link") else {})} for i in items[:TOP]]


def _donation(ev: dict, answer: dict) -> dict | None:
    hits = oom_risk.undonated_arguments(ev)
    if not hits:
        return None
    saved = sum(h["bytes"] for h in hits)
    # What XLA had placed in each matched output's allocation besides the output itself
    # (indefiniteLifetimes list every logical buffer of an allocation): values of one
    # allocation are never live together, so the largest other one bounds the temporary
    # the output needs once it shares the argument's memory.
    outputs = {int(a.get("id") or 0): a for a in ev.get("lifetimes") or []}
    bound = 0
    for h in hits:
        bufs = sorted((outputs.get(h["outputAllocation"]) or {}).get("logicalBuffers") or [], key=lambda b: int(b.get("id") or 0))
        # The output is the last value of its shape defined in the allocation (logical
        # buffer ids grow in the order XLA defines values).
        final = next((b for b in reversed(bufs) if oom_risk._dims(b.get("shape")) == h["shape"]), None)
        bound += max((round(float(b.get("sizeMib") or 0) * (1 << 20)) for b in bufs if b is not final), default=0)
    rows = [{"name": h["argument"], "bytes": h["bytes"], "shape": h["shape"], "opName": "", "category": "arguments",
             "output": h["output"]} for h in hits]
    return _change(
        "donate", "Donate the arguments the outputs replace", saved, answer,
        f"{len(hits)} argument(s) are not donated though an output of the same shape exists: "
        f"jax.jit(..., donate_argnums=...) lets XLA write each output into its argument's memory "
        f"(alias_size_in_bytes grows by {saved:,} bytes). XLA may need up to {fmt_bytes(bound)} of temporaries "
        f"for values it had computed into those outputs' memory, so the saving is between "
        f"{fmt_bytes(max(0, saved - bound))} and {fmt_bytes(saved)}.",
        rows, tempBoundBytes=bound, savedAtLeastBytes=max(0, saved - bound), count=len(hits))


def _remat(ev: dict, answer: dict) -> dict | None:
    acts = sorted((i for i in ev["items"] if i["category"] == "activations"), key=lambda i: -i["bytes"])
    if len(acts) < 2:
        return None
    total = sum(i["bytes"] for i in acts)
    saved = total - acts[0]["bytes"]
    return _change(
        "remat", "Rematerialise the activations live at the peak", saved, answer,
        f"{len(acts)} activations ({fmt_bytes(total)}) are live at the peak, kept for the backward pass: "
        f"jax.checkpoint (torch.utils.checkpoint) on the blocks that make them recomputes them instead. "
        f"Recomputing all but the largest ({fmt_bytes(acts[0]['bytes'])}, live again while it is recomputed) "
        f"saves about {fmt_bytes(saved)}; checkpointing whole blocks can save more (their gradients' "
        "temporaries go too), so compile with jax.checkpoint to know.",
        _named(acts), activationBytes=total, count=len(acts))


def _shard(ev: dict, answer: dict, shards: int) -> dict | None:
    state = sorted((i for i in ev["items"] if i["category"] in ("parameters", "optimizer_state")), key=lambda i: -i["bytes"])
    total = sum(i["bytes"] for i in state)
    if not total or shards < 2:
        return None
    per = math.ceil(total / shards)
    return _change(
        "shard", f"Shard parameters and optimizer state over {shards} devices", total - per, answer,
        f"{fmt_bytes(total)} of parameters and optimizer state are live at the peak; split over {shards} devices "
        f"(FSDP, ZeRO, jax.sharding) each device keeps {fmt_bytes(per)}. Gathering a layer's weights for its "
        "matmul needs that layer's full size again for a while.",
        _named(state), shards=shards, stateBytes=total, bytesPerDevice=per)


def _precision(ev: dict, answer: dict) -> dict | None:
    f32 = sorted((i for i in ev["items"] if (_shape(i.get("shape")) or ("",))[0] == "f32"), key=lambda i: -i["bytes"])
    total = sum(i["bytes"] for i in f32)
    if not total:
        return None
    return _change(
        "precision", "Keep the float32 buffers in bfloat16", total // 2, answer,
        f"{len(f32)} float32 buffers ({fmt_bytes(total)}) are live at the peak; in bfloat16 they take half. "
        "Parameters usually keep a float32 master copy (mixed precision): then only activations and "
        "gradients shrink.", _named(f32), float32Bytes=total, count=len(f32))


def savings(ev: dict | None, answer: dict, shards: int = DEFAULT_SHARDS) -> list[dict]:
    """The priced changes for one module's compiled evidence, largest saving first."""
    if not ev or ev.get("textOnly") or not ev.get("items"):
        return []
    found = [c for c in (_donation(ev, answer), _remat(ev, answer), _shard(ev, answer, shards), _precision(ev, answer)) if c]
    return sorted(found, key=lambda c: -c["savedBytes"])


# ---------------------------------------------------------------------------
# Batch (or sequence) size
# ---------------------------------------------------------------------------


def _params(ev: dict) -> dict[str, str]:
    """Entry parameters of a module, ``{name: shape}``: XLA names them after the
    argument paths (``batch_0_.1``, ``state__params____dense_0____w__.1``; the ``.N``
    suffix is a uniquifier that may differ between compilations)."""
    out = {}
    for a in ev.get("lifetimes") or []:
        bufs = a.get("logicalBuffers") or []
        if "entry computation parameter" in (a.get("attributes") or []) and bufs:
            # A donated argument's allocation also holds the values XLA writes into it
            # (temporaries of any shape, and the outputs that alias it, which have the
            # argument's shape): the parameter is a buffer of the allocation's full size
            # whose shape most such buffers share, the first defined (lowest id) of them.
            size = max(float(b.get("sizeMib") or 0) for b in bufs)
            full = [b for b in bufs if float(b.get("sizeMib") or 0) == size]
            shape = max((b.get("shape") for b in full), key=lambda sh: sum(x.get("shape") == sh for x in full))
            b = min((b for b in full if b.get("shape") == shape), key=lambda b: int(b.get("id") or 0))
            out[re.sub(r"\.\d+$", "", b.get("hloName") or "")] = b.get("shape") or ""
    return out


def signature(ev: dict) -> tuple | None:
    """The program's shape: its entry parameters by name, element type and rank (dims
    left out). Two compilations of one jitted function at two batch sizes share it."""
    params = _params(ev)
    if not params:
        return None
    sig = []
    for name, shape in sorted(params.items()):
        s = _shape(shape)
        sig.append((name, s[0], len(s[1])) if s else (name, shape, -1))
    return tuple(sig)


def sizes(evs: list[dict]) -> tuple[list[int], dict] | None:
    """The size each compilation was made at: the first parameter (by name) with a
    dimension that differs between them, that dimension's value. None when no dimension
    differs (the same program at the same size). ``info["unexplained"]`` names the other
    dimensions that differ but do not scale with that size (a matmul compiled at several
    M x K shapes): then no one size explains the peaks."""
    params = [_params(e) for e in evs]
    varying = []  # (parameter, dimension, values) of every dimension that differs
    for name in sorted(params[0]):
        shapes = [_shape(p.get(name)) for p in params]
        if any(s is None for s in shapes) or len({len(s[1]) for s in shapes}) > 1:
            continue
        for d in range(len(shapes[0][1])):
            vals = [s[1][d] for s in shapes]
            if len(set(vals)) > 1:
                varying.append((name, d, vals))
    if not varying:
        return None
    name, d, vals = varying[0]
    # Another dimension that grows with the size keeps a fixed ratio to it (batch 32 -> 64
    # and labels 32 -> 64, or tokens = batch x sequence); one that does not is a second size.
    odd = [f"{n} dimension {k}" for n, k, v in varying[1:] if any(v[i] * vals[0] != vals[i] * v[0] for i in range(len(v)))]
    info = {"parameter": name, "dimension": d, "shapes": [p[name] for p in params]}
    if odd:
        info["unexplained"] = odd
    return vals, info


def _line(a: tuple[int, int], b: tuple[int, int]) -> tuple[Fraction, Fraction]:
    slope = Fraction(b[1] - a[1], b[0] - a[0])
    return slope, a[1] - slope * a[0]


def _predict(points: list[tuple[int, int]], size: int) -> int:
    """Piecewise-linear through the points; outside, the line through the nearest two."""
    i = 1
    while i < len(points) - 1 and points[i][0] < size:
        i += 1
    slope, icpt = _line(points[i - 1], points[i])
    return max(0, round(slope * size + icpt))


def _largest_below(points: list[tuple[int, int]], limit: Fraction, strict: bool) -> int | None:
    """The largest size whose predicted peak is < limit (strict) or <= limit, using the
    last segment (growth beyond the largest compilation); None when the peak does not
    grow with the size (any size fits) or even the smallest size does not fit."""
    slope, icpt = _line(points[-2], points[-1])
    if slope <= 0:
        return None
    s = (limit - icpt) / slope
    n = math.floor(s)
    if strict and n == s:
        n -= 1
    # Below the last segment's reach, walk the earlier segments (piecewise-linear).
    while n >= 1 and n < points[-2][0] and (_predict(points, n) >= limit if strict else _predict(points, n) > limit):
        n -= 1
    return n if n >= 1 else 0


def batch_fit(points: list[dict], answer: dict, size_info: dict, batch: int | None = None) -> dict:
    """``points``: one per compilation, ``{size, peakBytes, moduleName, categories}``
    (bytes per contributor category at that module's peak). Returns the fit: per-category
    bytes per unit of size, the predicted peak at ``batch``, the largest size that fits
    the capacity and the ones that stay below the HIGH and MEDIUM thresholds, and
    ``trust`` with the reason when the fit cannot be trusted."""
    pts = sorted({p["size"]: p for p in points}.values(), key=lambda p: p["size"])
    out: dict = {"dimension": size_info, "points": [{k: p[k] for k in ("size", "peakBytes", "moduleName")} for p in pts]}
    if len(pts) < 2:
        out["trust"] = {"ok": False, "reason": "one compilation only: profile (or dump) the same program at a second "
                                               "batch size to fit the peak against it"}
        return out
    xy = [(p["size"], p["peakBytes"]) for p in pts]
    slope, icpt = _line(xy[-2], xy[-1])
    cats = sorted({c for p in pts for c in p["categories"]})
    out["perUnit"] = {c: float(Fraction(pts[-1]["categories"].get(c, 0) - pts[-2]["categories"].get(c, 0),
                                        pts[-1]["size"] - pts[-2]["size"])) for c in cats}
    out["bytesPerUnit"] = float(slope)
    out["fixedBytes"] = int(icpt)
    worst = []
    for i in range(1, len(xy) - 1):
        guess = _line(xy[i - 1], xy[i + 1])
        err = abs(float(guess[0] * xy[i][0] + guess[1]) - xy[i][1]) / xy[i][1]
        worst.append({"size": xy[i][0], "error": err})
    if len(xy) == 2:
        # Usable, but unchecked: XLA may change its plan between the two sizes (the
        # two_batch program of scripts/make_oom_programs.py jumps by 0.5 MB between batch
        # 384 and 385, which its compilations at 256 and 1024 cannot show).
        out["trust"] = {"ok": True, "checked": False,
                        "reason": "two compilations: the line through them cannot be checked; a third size would show "
                                  "whether growth is linear, and XLA can change its plan between sizes: compile at the "
                                  "answer to confirm"}
    elif max(w["error"] for w in worst) > LINEAR_TOLERANCE:
        w = max(worst, key=lambda w: w["error"])
        out["trust"] = {"ok": False, "reason": f"growth is not linear: the peak at {w['size']} is "
                                               f"{100 * w['error']:.1f} % off the line through its neighbours"}
    else:
        out["trust"] = {"ok": True, "checked": True, "reason": f"{len(xy)} compilations, each inner one within "
                                              f"{100 * max(w['error'] for w in worst):.2f} % of the line through its neighbours"}
    out["leaveOneOut"] = worst
    if slope <= 0:
        out["trust"] = {"ok": False, "reason": "the peak does not grow with this dimension: it is not what limits the size"}
    if size_info.get("unexplained"):
        out["trust"] = {"ok": False, "reason": f"more than one size changes between the compilations "
                                               f"({size_info['parameter']} dimension {size_info['dimension']}, "
                                               f"{', '.join(size_info['unexplained'][:3])}): no one batch size explains the peaks"}
        return out
    cap = answer.get("capacityBytes")
    if cap and slope > 0:
        th = answer["thresholds"]
        out["capacityBytes"] = cap
        limits = {"fits": (Fraction(cap), False), "belowHigh": (Fraction(cap) * Fraction(str(th["high"])), True),
                  "belowMedium": (Fraction(cap) * Fraction(str(th["medium"])), True)}
        out["largest"] = {}
        for key, (limit, strict) in limits.items():
            n = _largest_below(xy, limit, strict)
            out["largest"][key] = None if n is None else {
                "size": n, "limitBytes": int(limit), "peakBytes": _predict(xy, n) if n else None,
                # Outside the compiled sizes the line is extended, not measured.
                "extrapolated": not xy[0][0] <= n <= xy[-1][0]}
    if batch is not None:
        peak = _predict(xy, batch)
        out["at"] = {"size": batch, "peakBytes": peak, "risk": _tier(peak, answer),
                     "utilization": peak / cap if cap else None,
                     "interpolated": xy[0][0] <= batch <= xy[-1][0]}
    return out


def headline(plan: dict, answer: dict) -> str | None:
    """The plan in one line, for the report's summary table: for a HIGH or OOM answer, the
    priced change with the smallest saving that still brings the peak below HIGH (the least
    to change; else the largest saving), and the largest batch below HIGH where a fit
    stands. None for the other tiers."""
    if answer["risk"] not in ("HIGH", "OOM"):
        return None
    parts = []
    enough = [c for c in plan["savings"] if c["riskAfter"] in ("LOW", "MEDIUM")]
    change = min(enough, key=lambda c: c["savedBytes"]) if enough else (plan["savings"] or [None])[0]
    if change:
        parts.append(f"{change['title']}: peak {fmt_bytes(change['peakAfterBytes'])}, {change['riskAfter']}")
    fit = plan.get("batch") or {}
    below = (fit.get("largest") or {}).get("belowHigh")
    if below and below.get("size") and fit["trust"]["ok"]:
        parts.append(f"batch <= {below['size']:,} stays below HIGH" + ("" if fit["trust"].get("checked") else " (unchecked fit)"))
    return "; ".join(parts) or None

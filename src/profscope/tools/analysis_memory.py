"""Memory rules of the Summary (issue 35): findings from an OOM-risk payload and leak hints.

Inputs are other tools' payloads, never files: ``oom`` is the ``oom_risk`` tool's answer
(:func:`profscope.tools.oom_risk.assess` plus the app's ``plan``; for a multi-host run the
worst host's payload, its findings each naming their ``host``), ``memory_profile`` the
``memory_profile`` tool's payload of the host (XProf's schema; an xplane's carries
profscope's per-allocator ``leakHints`` under ``profscope.allocators``, see
tools/memory_profile_allocator.py). Either may be None.

OOM risk already rates the run (its tier: the worst module that runs as a step decides,
docs/oom_risk.md "The rated module") and finds what wastes memory; this module maps that
onto the Summary's priorities (docs/analysis.md "Memory rules"), with the bytes at stake
computed from the payload's own numbers and the fix from its ``what_to_cut`` finding and
its ``plan``:

- P0: an out-of-memory event was recorded (``oom_event``), or the peak or any module's
  peak exceeds the capacity (tier ``OOM``, ``overCapacity``);
- P1: the ``HIGH`` tier (utilization >= the high threshold, 0.90 by default); memory that
  grows step over step (a leak: OOM risk's ``heap_growth``, a memory profile's steady heap
  growth);
- P2: undonated arguments, fragmentation, padding, activations dominating the peak, a few
  buffers dominating the peak (where memory is tight: the MEDIUM tier or worse), a module other than the training step peaking higher, ops
  whose live bytes keep rising. One of these becomes P1 when its bytes alone are at least
  what the run must cut to leave the HIGH/OOM tier (fixing it alone gets the run out).

Each finding is the Summary's ``Finding`` dict (tools/analysis_rules.py).
"""

from __future__ import annotations

import re
from typing import Callable

from profscope.model.units import fmt_bytes
from profscope.tools.analysis_rules import Rule, evidence, finding, impact

__all__ = ["RULES", "memory_findings"]

_OOM_DOC = "OOM risk, docs/oom_risk.md"

# A few buffers dominate the peak: the largest DOMINANT_COUNT buffers hold at least
# DOMINANT_SHARE of it, each at least DOMINANT_EACH (a buffer worth rematerialising or
# sharding on its own; below that the peak is spread and no one buffer is the cut).
DOMINANT_COUNT, DOMINANT_SHARE, DOMINANT_EACH = 3, 0.50, 0.10

RULES: tuple[Rule, ...] = (
    Rule("memory_oom", "memory", "P0", "an out-of-memory event is recorded (a PyTorch snapshot's oom trace entry)",
         _OOM_DOC + " (tier OOM)", "Out of memory"),
    Rule("memory_over_capacity", "memory", "P0",
         "the rated peak, or any module's compiled peak, is above the device capacity",
         _OOM_DOC + " (tier OOM, overCapacity)", "Peak memory above the device's capacity"),
    Rule("memory_high", "memory", "P1", "peak / capacity >= the high threshold (0.90 by default)",
         _OOM_DOC + " (tier HIGH)", "Peak memory close to the device's capacity"),
    Rule("memory_leak", "memory", "P1",
         "live memory at each step's end grows: a steady heap growth (>= 3 steps, slope > 0, r² >= 0.9) or "
         "growth in >= 3/4 of the step-to-step comparisons",
         _OOM_DOC + " (heap_growth); docs/memory_profile.md (leak hints)", "Memory grows step over step"),
    Rule("undonated_arguments", "memory", "P2",
         "undonated arguments with a same-shaped output >= 5 % of the peak; P1 when their bytes are at least "
         "what the run must cut to leave the HIGH/OOM tier",
         _OOM_DOC + " (undonated_arguments)", "Arguments not donated"),
    Rule("buffers_dominate", "memory", "P2",
         f"the {DOMINANT_COUNT} largest buffers at the peak hold >= {DOMINANT_SHARE:.0%} of it, each >= "
         f"{DOMINANT_EACH:.0%}, in the MEDIUM tier or worse (peak >= 0.70 of capacity); P1 when their bytes are at least what the run must cut to leave the HIGH/OOM tier",
         _OOM_DOC + " (contributors)", "A few buffers dominate the peak"),
    Rule("activations_dominate", "memory", "P2",
         "activations >= 50 % of a training step's compiled peak; P1 as above",
         _OOM_DOC + " (activations_dominate)", "Activations dominate the peak"),
    Rule("memory_fragmentation", "memory", "P2", "fragmentation > 20 % (compiler heap, allocator or snapshot)",
         _OOM_DOC + " (fragmentation_*)", "Memory fragmentation"),
    Rule("memory_padding", "memory", "P2", "layout padding > 10 % of the compiled peak",
         _OOM_DOC + " (padding)", "Padding overhead"),
    Rule("other_module_peak", "memory", "P2", "a module that is not the training step peaks > 1.10x the training step",
         _OOM_DOC + " (other_module_peak)", "Another module has the highest peak"),
    Rule("memory_rising_ops", "memory", "P2",
         "an op's live bytes at each step's end never go down and rise in >= half of the steps (>= 3 steps)",
         "docs/memory_profile.md (leak hints: rising ops)", "Ops whose live memory keeps rising"),
)
_RULE = {r.id: r for r in RULES}

# OOM risk's finding ids -> ours (the rest are handled on their own or not findings here).
_FROM_OOM = {"undonated_arguments": "undonated_arguments", "activations_dominate": "activations_dominate",
             "padding": "memory_padding", "fragmentation_compiler": "memory_fragmentation",
             "fragmentation_allocator": "memory_fragmentation", "other_module_peak": "other_module_peak"}

Link = Callable[..., str]


def _link(link: Link, d: dict | None) -> str | None:
    """An OOM-risk link (``{"tool", <the page's URL keys>..., "label"}``) as the dashboard's URL."""
    if not d or not d.get("tool"):
        return None
    return link(d["tool"], **{k: str(v) for k, v in sorted(d.items()) if k not in ("tool", "label")})


def _b(n: int | float | None) -> str:
    return "—" if n is None else f"{fmt_bytes(n)} ({int(n):,} bytes)"


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f} %"


def _r(x: float | None) -> float | None:
    return None if x is None else round(float(x), 6)


def _rows(e: dict) -> list[dict]:
    """An OOM-risk finding's evidence dict (camelCase keys, raw numbers) as evidence rows:
    bytes in bytes, shares as percentages, series shortened; ``examples`` and ``rule``
    (said in the finding's text) left out."""
    rows = []
    words = {k: re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", k).lower() for k in e}
    for k, v in e.items():
        if k in ("examples", "rule") or v is None or isinstance(v, dict):
            continue
        label = "r²" if k == "r2" else words[k]
        # The value says "bytes"; keep the word where dropping it makes another key's label.
        if label.endswith(" bytes") and label.removesuffix(" bytes") not in words.values():
            label = label.removesuffix(" bytes")
        if isinstance(v, list):
            shown = [(_b(x) if "bytes" in k.lower() else str(x)) for x in v[:6]]
            rows.append(evidence(label, ", ".join(shown) + (f", … ({len(v)} values)" if len(v) > 6 else "")))
        elif isinstance(v, bool) or not isinstance(v, (int, float)):
            rows.append(evidence(label, ("yes" if v else "no") if isinstance(v, bool) else str(v)))
        elif "bytes" in k.lower():
            rows.append(evidence(label, _b(v), int(v)))
        elif isinstance(v, float) and 0 <= v <= 1 and k != "r2":
            rows.append(evidence(label, _pct(v), _r(v)))
        else:
            rows.append(evidence(label, f"{v:,}" if isinstance(v, int) else f"{v:.3g}", _r(v) if isinstance(v, float) else v))
    return rows


def memory_findings(oom: dict | None, memory_profile: dict | None, link: Link) -> list[dict]:
    """The memory findings of one host (P0..P2), from whichever payloads are given."""
    out: list[dict] = []
    if oom:
        out += _tier_findings(oom, link)
        out += _waste_findings(oom, link)
    out += _profile_leaks(memory_profile, oom, link, out)
    return out


def _cut(oom: dict) -> dict | None:
    """OOM risk's ``what_to_cut`` finding (every HIGH/OOM answer with contributors has one)."""
    return next((f for f in oom.get("findings") or [] if f["id"] == "what_to_cut"), None)


def _plan_fix(oom: dict) -> str:
    """The first priced change of OOM risk's plan that brings the peak below the HIGH tier."""
    for s in (oom.get("plan") or {}).get("savings") or []:
        if s.get("riskAfter") in ("LOW", "MEDIUM"):
            return (f" Plan: {s['title']} saves {_b(s.get('savedBytes'))}, the peak becomes "
                    f"{_b(s.get('peakAfterBytes'))} ({s['riskAfter']}).")
    return ""


def _headline(oom: dict, link: Link) -> list[dict]:
    peak_link = next((_link(link, u.get("link")) for u in oom.get("usage") or [] if u.get("bytes") == oom.get("peakBytes")), None)
    return [evidence(f"peak ({oom.get('peakMeasure') or 'peak'})", f"{_b(oom.get('peakBytes'))}, {oom.get('peakSource') or ''}".rstrip(", "),
                     oom.get("peakBytes"), peak_link),
            evidence("capacity", f"{_b(oom.get('capacityBytes'))}, {oom.get('capacityDetail') or oom.get('capacitySource') or ''}".rstrip(", "),
                     oom.get("capacityBytes")),
            evidence("utilization", _pct(oom.get("utilization")), _r(oom.get("utilization")))]


def _bytes_to_leave(oom: dict) -> int | None:
    """What the run must cut to leave the HIGH/OOM tier (below the high threshold), or None
    when it is not in it."""
    if oom.get("risk") not in ("HIGH", "OOM"):
        return None
    cut = _cut(oom)
    need = (cut or {}).get("evidence", {}).get("bytesToCutBelowHigh")
    # An observed OOM with a peak below the threshold (the failed request never became
    # part of the peak) has nothing to cut by: 0 is no bar for another finding to clear.
    return int(need) if need else None


def _tier_findings(oom: dict, link: Link) -> list[dict]:
    out = []
    host = oom.get("host")
    cut = _cut(oom)
    fix = ((cut["message"] if cut else "Shrink the largest contributors to the peak (OOM risk's contributors).")
           + _plan_fix(oom))
    cut_links = [evidence("largest contributor", cut["title"].removeprefix("What to cut: "),
                          cut["evidence"].get("categoryBytes"), _link(link, lk)) for lk in (cut or {}).get("links", [])[:1]]
    events: dict[str, list[dict]] = {}  # host -> its OOM events (OOM risk names up to 5 per host)
    for f in oom.get("findings") or []:
        if f["id"] == "oom_event":
            events.setdefault(f.get("host") or host or "", []).append(f)
    for h, fs in sorted(events.items()):
        shorts = [max(0, int(f["evidence"].get("requestedBytes") or 0) - int(f["evidence"].get("deviceFreeBytes") or 0)) for f in fs]
        e = fs[0]["evidence"]
        ev = [evidence(f"event {f['evidence'].get('event')}: requested", f"{_b(f['evidence'].get('requestedBytes'))} with "
                       f"{_b(f['evidence'].get('deviceFreeBytes'))} free", f["evidence"].get("requestedBytes"),
                       _link(link, (f["links"] or [None])[0])) for f in fs]
        ev.append(evidence("reserved by the process", _b(e.get("reservedBytes")), e.get("reservedBytes")))
        out.append(finding(
            _RULE["memory_oom"], title="An out-of-memory event is recorded" if len(fs) == 1 else f"{len(fs)} out-of-memory events are recorded",
            what=fs[0]["message"] + (f" {len(fs) - 1} more OOM event(s) follow." if len(fs) > 1 else ""),
            evidence=ev + cut_links,
            impact=impact(bytes=max(shorts), text=f"the largest failed allocation was {_b(max(shorts))} short; the step fails"),
            fix=fix, host=h or None))
    over = oom.get("overCapacity") or []
    cap = oom.get("capacityBytes")
    if (oom.get("risk") == "OOM" and not oom.get("oomEvents") and cap) or over:
        worst = max([oom.get("peakBytes") or 0] + [m["peakBytes"] for m in over])
        ev = _headline(oom, link) + [
            evidence(f"module {m['moduleName']}", f"{_b(m['peakBytes'])}, {_pct(m['utilization'])} of capacity",
                     m["peakBytes"], link("memory_viewer", module_name=m["moduleName"])) for m in over[:5]] + cut_links
        what = (f"{oom.get('reason')}." if oom.get("risk") == "OOM" else
                f"{len(over)} module(s) have a compiled peak above the {_b(cap)} capacity ({', '.join(m['moduleName'] for m in over[:3])}): "
                "each fails when it runs.")
        out.append(finding(_RULE["memory_over_capacity"], title="Peak memory above the device's capacity", what=what,
                           evidence=ev, impact=impact(bytes=worst - cap, text=f"{_b(worst - cap)} over capacity: the step cannot run"),
                           fix=fix, host=host))
    elif oom.get("risk") == "HIGH":
        need = _bytes_to_leave(oom)
        out.append(finding(_RULE["memory_high"], title="Peak memory close to the device's capacity",
                           what=f"{oom.get('reason')}: a larger batch, a longer sequence or fragmentation can make it fail.",
                           evidence=_headline(oom, link) + cut_links,
                           impact=impact(bytes=need, text=f"cut {_b(need)} to get below the high threshold"),
                           fix=fix, host=host))
    return out


def _waste_findings(oom: dict, link: Link) -> list[dict]:
    """OOM risk's findings of memory that could be saved, and the buffers dominating the peak."""
    out = []
    need = _bytes_to_leave(oom)
    plan = {c["id"]: c for c in (oom.get("plan") or {}).get("savings") or []}
    leak_seen = False
    for f in oom.get("findings") or []:
        host = f.get("host") or oom.get("host")
        links = list(f.get("links") or [])
        if f["id"] == "heap_growth":
            if leak_seen:
                continue
            leak_seen = True
            e = f["evidence"]
            per = e.get("slopeBytesPerStep", e.get("bytesPerStep"))
            per = int(round(per)) if per is not None else None
            out.append(finding(
                _RULE["memory_leak"], title="Memory grows step over step", what=f["message"],
                evidence=[evidence("growth per step", _b(per) if per is not None else "—", per, _link(link, links[0] if links else None)),
                          *_rows({k: v for k, v in e.items() if k not in ("slopeBytesPerStep", "bytesPerStep")})],
                impact=impact(bytes=per, text=f"{_b(per)} more live memory after every step" if per is not None else ""),
                fix="Find what each step keeps alive (the memory profile's rising ops and never-freed allocations at the "
                    "linked time): tensors appended to a list, a growing cache, losses kept with their graph "
                    "(store loss.item(), not loss).", host=host))
            continue
        rid = _FROM_OOM.get(f["id"])
        if rid is None:
            continue
        at_stake = _waste_bytes(f)
        text = f"{_b(at_stake)} could be saved" if at_stake else "the share of memory lost; its bytes are not in this input"
        priced = plan.get(_PLAN_CHANGE.get(f["id"], ""))
        if priced is not None:
            # OOM risk's plan prices the change (tools/oom_plan.py): rematerialising keeps the
            # largest activation live while it is recomputed, so not every activation byte goes.
            at_stake = int(priced["savedBytes"])
            text = f"{priced['title'].lower()}: saves about {_b(at_stake)} (OOM risk's plan)"
        prio = "P1" if need is not None and at_stake is not None and at_stake >= need and rid != "other_module_peak" else None
        ev = _rows(f.get("evidence") or {})
        ev += [evidence(f"open {lk['tool'].replace('_', ' ')}", str(lk.get("label") or ""), None, _link(link, lk))
               for lk in links[:5]]
        out.append(finding(_RULE[rid], title=f["title"], what=f["message"], evidence=ev,
                           impact=impact(bytes=at_stake, text=text), fix=_WASTE_FIX[rid], host=host, priority=prio))
    dom = _dominating(oom, link, need)
    return out + ([dom] if dom else [])


# OOM risk's findings that its plan prices (tools/oom_plan.py change ids).
_PLAN_CHANGE = {"activations_dominate": "remat", "undonated_arguments": "donate"}

_WASTE_FIX = {
    "undonated_arguments": "Donate the arguments the outputs replace: jax.jit(f, donate_argnums=...) (or donate_argnames); "
                           "XLA then writes each output into its argument's buffer.",
    "activations_dominate": "Rematerialise the repeated blocks (jax.checkpoint / jax.remat with a policy, "
                            "torch.utils.checkpoint) or shrink the per-device batch or sequence.",
    "memory_padding": "Pad the padded dimensions to the tile sizes (multiples of 8 and 128 on TPU) or reorder the dimensions "
                      "so the minor one is the large one.",
    "memory_fragmentation": "For a caching allocator set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True or allocate the "
                            "large long-lived tensors first; for XLA, fewer differently-sized live buffers (a fixed batch shape).",
    "other_module_peak": "Shrink that module's batch or shard it: it sets the memory the run needs, not the training step.",
}


def _waste_bytes(f: dict) -> int | None:
    """The bytes an OOM-risk finding puts at stake, from its own evidence."""
    e = f.get("evidence") or {}
    if f["id"] == "undonated_arguments":
        return int(e["bytes"])
    if f["id"] == "activations_dominate":
        return int(e["activationBytes"])
    if f["id"] == "padding":
        return int(e["paddingBytes"])
    if f["id"] == "fragmentation_compiler":
        return int(e["totalAllocationBytes"]) - int(e["peakBytes"])
    if f["id"] == "fragmentation_allocator" and "externalBytes" in e:
        return max(int(e["externalBytes"]), int(e.get("internalBytes") or 0))
    if f["id"] == "other_module_peak":
        return int(e["peakBytes"]) - int(e["trainingStepPeakBytes"])
    return None


_TIGHT = ("MEDIUM", "HIGH", "OOM")


def _dominating(oom: dict, link: Link, need: int | None) -> dict | None:
    """The largest buffers at the peak (OOM risk's contributors' items), when a few hold most of it."""
    peak = oom.get("contributorsPeakBytes") or oom.get("peakBytes")
    items = [i for c in oom.get("contributors") or [] for i in c.get("items") or []
             if c.get("category") not in ("small", "unknown", "allocator_reserve", "allocated_before")]
    # Only where memory is tight (MEDIUM tier or worse): on a run far from its capacity,
    # or one whose capacity is unknown, the largest buffers are no cut to make.
    if not peak or not items or oom.get("risk") not in _TIGHT:
        return None
    top = sorted(items, key=lambda i: (-i["bytes"], i.get("name") or ""))[:DOMINANT_COUNT]
    held = sum(i["bytes"] for i in top)
    if held < DOMINANT_SHARE * peak or any(i["bytes"] < DOMINANT_EACH * peak for i in top):
        return None
    advice = {"activations": "rematerialise it (jax.checkpoint) or shrink the batch",
              "parameters": "shard it over devices (FSDP, jax.sharding) or keep it in bf16",
              "optimizer_state": "shard it (ZeRO, a sharded optax state) or use a lower-memory optimizer",
              "gradients": "shard it (reduce-scatter) or accumulate over micro-batches"}
    ev = [evidence(i.get("name") or i["category"],
                   f"{_b(i['bytes'])}, {_pct(i['bytes'] / peak)} of the peak, {i['category'].replace('_', ' ')}"
                   + (f", {i['shape']}" if i.get("shape") else ""), i["bytes"], _link(link, i.get("link"))) for i in top]
    fixes = sorted({f"{i['category'].replace('_', ' ')}: {advice.get(i['category'], 'shard it, or split the op that makes it into chunks')}"
                    for i in top})
    prio = "P1" if need is not None and held >= need else None
    return finding(_RULE["buffers_dominate"], title=f"{len(top)} buffers hold {_pct(held / peak)} of the peak",
                   what=f"The {len(top)} largest buffers at the {_b(peak)} peak ({oom.get('contributorsSource') or 'peak'}) hold "
                        f"{_b(held)}: they are the rematerialisation or sharding candidates.",
                   evidence=ev, impact=impact(bytes=held, text=f"{_b(held)} held by {len(top)} buffers"),
                   fix="; ".join(fixes).capitalize() + ".", host=oom.get("host"), priority=prio)


def _profile_leaks(mp: dict | None, oom: dict | None, link: Link, found: list[dict]) -> list[dict]:
    """Leak hints of an xplane's memory profile (``profscope.allocators.<id>.leakHints``) that
    OOM risk did not already report: OOM risk reads one allocator (the highest peak), a
    leak can be on another. An allocator's rising ops (the ops whose live bytes grow) join
    its leak finding as evidence; alone, they are a P2 finding of their own."""
    allocs = ((mp or {}).get("profscope") or {}).get("allocators") or {}
    oom_leak = next((f for f in found if f["id"] == "memory_leak"), None)
    leaks = {lk.get("memory_id"): oom_leak for f in (oom or {}).get("findings") or [] if f["id"] == "heap_growth"
             for lk in f.get("links") or []}
    host = (oom or {}).get("host")
    out = []
    for mid in sorted(allocs):
        hints = allocs[mid].get("leakHints") or {}
        g = hints.get("heapGrowth") or {}
        if g.get("steadyLeak") and mid not in leaks:
            leaks[mid] = _allocator_leak(mid, g, link, host)
            out.append(leaks[mid])
        rising = hints.get("risingOps") or []
        ev = [evidence(f"rising op {r['tfOpName'] or '(no op)'}", f"+{_b(r['growthBytes'])} over {len(r['stepIds'])} steps",
                       int(r["growthBytes"]), link("memory_profile", memory_id=mid, q=r["tfOpName"] or "")) for r in rising[:5]]
        if rising and leaks.get(mid) is not None:
            leaks[mid]["evidence"] += ev
        elif rising:
            total = sum(int(r["growthBytes"]) for r in rising)
            out.append(finding(
                _RULE["memory_rising_ops"], title=f"{len(rising)} op(s) whose live memory keeps rising on {mid}",
                what=f"Live bytes allocated by {', '.join(r['tfOpName'] or '(no op)' for r in rising[:3])} never go down "
                     f"from step to step on allocator {mid}.",
                evidence=ev, impact=impact(bytes=total, text=f"{_b(total)} accumulated over the window"),
                fix="Free or reuse what these ops allocate each step (a growing list or cache is the usual cause).",
                host=host))
    return out


def _allocator_leak(mid: str, g: dict, link: Link, host: str | None) -> dict:
    per = int(round(g["slopeBytesPerStep"]))
    pts = g.get("points") or []
    last = pts[-1] if pts else None
    return finding(
        _RULE["memory_leak"], title="Memory grows step over step",
        what=f"The heap of allocator {mid} after each step grows by {_b(per)} per step over {len(pts)} steps "
             f"(least-squares fit, r² = {g['r2']:.3f}): a leak, or state accumulated across steps.",
        evidence=[evidence("growth per step", _b(per), per, link("memory_profile", memory_id=mid)),
                  evidence("steps", str(len(pts)), len(pts)), evidence("r²", f"{g['r2']:.3f}", _r(g["r2"]))]
        + ([evidence("heap after the last step", _b(last["heapBytes"]), last["heapBytes"],
                     link("memory_profile", memory_id=mid, t=repr(last["endTimePs"] / 1e9)))] if last else []),
        impact=impact(bytes=per, text=f"{_b(per)} more live memory after every step"),
        fix="Find what each step keeps alive (the rising ops and never-freed allocations of this allocator).",
        host=host)

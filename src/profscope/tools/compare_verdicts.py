"""What changed in a verdict (issue 36, docs/compare.md "OOM risk and Summary"): the OOM
risk and the Summary of a run against its base, as the diff JSON every compare answers.

Both are pure functions of two cached single answers (app/compare.py calls them as
``diff(base, current, *, base_ref, current_ref, link)``):

- OOM risk: the tier then -> now, and the peak's change split by the contributors'
  categories (tools/oom_risk.py ``contributors``: bytes live at the peak per category).
  Those categories cover what the input could attribute, not always the whole peak (a
  runtime peak whose allocations carry no op, a capacity from another figure), so the
  part of the change they do not explain is the ``residual``, said, never spread.
- Summary: the status then -> now, the median step's change split by the step-time
  categories (tools/analysis.py ``metrics.categories``, the median step's time per
  category, idle included), the findings that appeared, went or changed priority, and
  the memory verdict then -> now.

Rows are sorted by the size of their change (then key), so the top contributors to the
change come first.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable

# Tiers from best to worst (tools/oom_risk.py; UNKNOWN: no capacity to rate against), and
# the Summary's statuses (tools/analysis.py; NOT_ASSESSED: nothing could be read).
RISK_ORDER = ("LOW", "MEDIUM", "HIGH", "OOM")
STATUS_ORDER = ("OPTIMAL", "NEEDS_ATTENTION", "CRITICAL")
PRIORITY_ORDER = ("P2", "P1", "P0")
TOP_ITEMS = 20  # buffers listed under "items" (the largest changes among the contributors' items)


def change_row(key: str, label: str, base: float | None, current: float | None, *, match: str | None,
               link_base: str | None = None, link_current: str | None = None, **extras) -> dict:
    """One Row of the diff JSON: a thing present in both answers or in one only."""
    where = "both" if base is not None and current is not None else ("base_only" if current is None else "current_only")
    b, c = base or 0, current or 0
    return {"key": key, "label": label, "in": where, "base": b, "current": c, "delta": c - b, "match": match,
            "link_base": link_base, "link_current": link_current, **extras}


def by_change(rows: Iterable[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (-abs(r["delta"]), r["key"]))


def _worse(order: tuple[str, ...], then: str | None, now: str | None) -> str:
    """"worse", "better", "same" or "other" (a value outside the order: UNKNOWN, NOT_ASSESSED)."""
    if then == now:
        return "same"
    if then not in order or now not in order:
        return "other"
    return "worse" if order.index(now) > order.index(then) else "better"


def _totals(base: float | None, current: float | None, rows: list[dict], unit: str) -> dict | None:
    if base is None or current is None:
        return None
    delta = current - base
    return {"base": base, "current": current, "delta": delta, "unit": unit,
            "residual": delta - sum(r["delta"] for r in rows)}


def diff_oom_risk(base: dict, current: dict, *, base_ref: dict, current_ref: dict,
                  link: Callable[..., str]) -> dict:
    """OOM risk then -> now: the tier, the peak, and the peak's change by contributor category."""
    cats_b = {c["category"]: c for c in base.get("contributors") or []}
    cats_c = {c["category"]: c for c in current.get("contributors") or []}
    rows = by_change(
        change_row(cat, (cats_c.get(cat) or cats_b[cat]).get("label", cat),
                   cats_b[cat]["bytes"] if cat in cats_b else None, cats_c[cat]["bytes"] if cat in cats_c else None,
                   match="category",
                   link_base=link("oom_risk", run=base_ref["run"], host=base_ref.get("host")) if cat in cats_b else None,
                   link_current=link("oom_risk", host=current_ref.get("host")) if cat in cats_c else None)
        for cat in sorted(cats_b.keys() | cats_c.keys()))
    totals = _totals(base.get("peakBytes"), current.get("peakBytes"), rows, "bytes")
    why = None if totals else "one side has no peak to compare (its OOM risk found no memory figure)"
    return {
        "comparable": totals is not None,
        "why": why,
        "verdict": {
            "base": _risk_side(base), "current": _risk_side(current),
            "change": _worse(RISK_ORDER, base.get("risk"), current.get("risk")),
            "text": f"{base.get('risk')} → {current.get('risk')}",
        },
        "totals": totals,
        "groups": {"category": rows},
        "rows": rows,
        "items": _item_changes(cats_b, cats_c),
        "notes": [n for n in (base.get("contributorsNote"), current.get("contributorsNote")) if n],
    }


def _risk_side(answer: dict) -> dict:
    return {k: answer.get(k) for k in ("risk", "reason", "peakBytes", "capacityBytes", "utilization", "headroomBytes",
                                       "peakSource")}


def _item_changes(cats_b: dict, cats_c: dict) -> list[dict]:
    """The contributors' buffers (or allocation sites) matched by name and shape, then by
    name: the largest changes. Each side lists its own top items only, so these name
    what moved, they do not add up to the total (the category rows do)."""
    def items(cats):
        out = {}
        for cat in cats.values():
            for it in cat.get("items") or []:
                out.setdefault((it.get("name") or it.get("label") or "", it.get("shape") or ""), it)
        return out
    ib, ic = items(cats_b), items(cats_c)
    rows, used = [], set()
    for key, it in ic.items():
        other, how = ib.get(key), "name+shape"
        if other is None or key in used:
            other = next((v for k, v in ib.items() if k[0] == key[0] and k not in used), None)
            how = "name" if other is not None else None
        if other is not None:
            used.add(next(k for k, v in ib.items() if v is other))
        rows.append(change_row(f"{key[0]}|{key[1]}", key[0], None if other is None else other.get("bytes"),
                               it.get("bytes"), match=how, category=it.get("category"), shape=key[1]))
    rows += [change_row(f"{k[0]}|{k[1]}", k[0], v.get("bytes"), None, match=None, category=v.get("category"),
                        shape=k[1]) for k, v in ib.items() if k not in used]
    return by_change(rows)[:TOP_ITEMS]


def diff_summary(base: dict, current: dict, *, base_ref: dict, current_ref: dict,
                 link: Callable[..., str]) -> dict:
    """The Summary then -> now: status, the median step by category, findings, memory."""
    mb, mc = base.get("metrics") or {}, current.get("metrics") or {}
    cb = {c["key"]: c for c in mb.get("categories") or []}
    cc = {c["key"]: c for c in mc.get("categories") or []}
    rows = by_change(
        change_row(key, (cc.get(key) or cb[key]).get("label", key),
                   cb[key]["us"] if key in cb else None, cc[key]["us"] if key in cc else None, match="category",
                   link_base=link("steps_ops", run=base_ref["run"], host=base_ref.get("host")) if key in cb else None,
                   link_current=link("steps_ops", host=current_ref.get("host")) if key in cc else None)
        for key in sorted(cb.keys() | cc.keys()))
    sb, sc = (mb.get("steps") or {}).get("median_us"), (mc.get("steps") or {}).get("median_us")
    totals = _totals(sb, sc, rows, "us")
    why = None if totals else "one side has no steps: only the status, findings and memory are compared"
    memb, memc = mb.get("memory") or {}, mc.get("memory") or {}
    return {
        "comparable": True,
        "why": why,
        "verdict": {
            "base": {"status": base.get("status"), "summary": base.get("summary")},
            "current": {"status": current.get("status"), "summary": current.get("summary")},
            "change": _worse(STATUS_ORDER, base.get("status"), current.get("status")),
            "text": f"{base.get('status')} → {current.get('status')}",
        },
        "totals": totals,
        "groups": {"category": rows},
        "rows": rows if totals else [],
        "memory": {
            "base": memb, "current": memc,
            "peak_delta": (memc["peak_bytes"] - memb["peak_bytes"]
                           if memb.get("peak_bytes") is not None and memc.get("peak_bytes") is not None else None),
            "change": _worse(RISK_ORDER, memb.get("risk"), memc.get("risk")),
        },
        # host against host: one rule's finding on either host is the same finding
        "findings": _finding_changes(base.get("findings") or [], current.get("findings") or [],
                                     by_host=base_ref.get("host") == current_ref.get("host")),
    }


def _finding_changes(base: list[dict], current: list[dict], *, by_host: bool) -> list[dict]:
    """Findings matched by rule id (and host, when both sides are the same host or every
    host): new, gone, or kept (with priority then -> now); the worst priority first."""
    def keyed(findings):
        return {(f.get("id"), f.get("host") if by_host else None): f for f in findings}
    fb, fc = keyed(base), keyed(current)
    out = []
    for key in sorted(fb.keys() | fc.keys(), key=str):
        then, now = fb.get(key), fc.get(key)
        f = now or then
        out.append({"id": key[0], "host": f.get("host"), "title": f.get("title"),
                    "in": "both" if then and now else ("base_only" if now is None else "current_only"),
                    "priority_base": then.get("priority") if then else None,
                    "priority_current": now.get("priority") if now else None})
    rank = {p: i for i, p in enumerate(reversed(PRIORITY_ORDER))}
    return sorted(out, key=lambda r: (rank.get(r["priority_current"] or r["priority_base"], 9),
                                      r["in"] == "both", r["id"] or ""))

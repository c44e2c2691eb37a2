"""``profscope report``'s "What would make it fit" in Markdown (the HTML report's is
templates/oom_report_plan.html): tools/oom_plan.py's ``plan`` of one report, as lines."""

from __future__ import annotations

from profscope.frontend.render import bytes_text, pct_text


def markdown(plan: dict | None) -> list[str]:
    if not plan:
        return []
    lines = [f"### What would make it fit (priced from the buffers at the peak of {plan['module']})", ""]
    if plan["savings"]:
        lines += ["| change | saves | peak after | tier after | largest buffers |", "|---|---:|---:|---|---|"]
        for s in plan["savings"]:
            saves = bytes_text(s["savedBytes"]) + (f" (at least {bytes_text(s['savedAtLeastBytes'])})" if "savedAtLeastBytes" in s else "")
            bufs = ", ".join(f"`{b['name']}` {bytes_text(b['bytes'])}" for b in s["buffers"][:3])
            lines.append(f"| {s['title']} | {saves} | {bytes_text(s['peakAfterBytes'])} ({pct_text(s['utilizationAfter'])}) | "
                         f"{s['riskAfter']} | {bufs} |")
        lines.append("")
        lines += [f"- {s['title']}: {s['detail']}" for s in plan["savings"]]
        lines.append("")
    b = plan.get("batch")
    if b:
        dim = f"dimension {b['dimension']['dimension']} of `{b['dimension']['parameter']}`" if b["dimension"].get("parameter") else "the size"
        pts = ", ".join(f"`{p['moduleName']}` ({bytes_text(p['peakBytes'])})" if p["size"] is None else
                        f"{p['size']:,} → {bytes_text(p['peakBytes'])}" for p in b["points"])
        lines += [f"**Batch size that fits** ({dim}), from {len(b['points'])} compilation(s): {pts}.", "",
                  ("Not trustworthy: " if not b["trust"]["ok"] else "" if b["trust"].get("checked") else "Unchecked: ")
                  + b["trust"]["reason"] + ".", ""]
        labels = {"fits": f"largest that fits {bytes_text(b.get('capacityBytes'))}", "belowHigh": "largest below HIGH",
                  "belowMedium": "largest rated LOW"}
        for key, label in labels.items():
            x = (b.get("largest") or {}).get(key) if b.get("largest") else None
            if b.get("largest"):
                lines.append(f"- {label}: " + (f"**{x['size']:,}** (peak {bytes_text(x['peakBytes'])}"
                                                + (", extrapolated beyond the compiled sizes" if x["extrapolated"] else "") + ")"
                                                if x and x["size"] else "none"))
        if b.get("at"):
            at = b["at"]
            lines.append(f"- at {at['size']:,}: **{bytes_text(at['peakBytes'])}** ({at['peakBytes']:,} bytes), {at['risk']}"
                         + ("" if at["interpolated"] else " (extrapolated beyond the compiled sizes)"))
        lines.append("")
    return lines

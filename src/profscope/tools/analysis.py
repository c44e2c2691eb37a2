"""The Summary (issue 35, docs/analysis.md): a run's status, a short summary, its key
metrics and its findings P0..P2, built from plain data (no I/O).

:func:`summarize` takes the parts the app gathered for one host, or every host
(app/summary.py): the host's Steps & ops payload, its OOM-risk payload, the findings of
the time, memory and compiler rules (tools/analysis_time.py, analysis_memory.py,
analysis_hlo.py), the per-host rows of an ``ALL_HOSTS`` summary and the parts that could
not be read. It sorts the findings (priority, then impact, then id and host) and never
re-ranks one: a rule decides its priority. The same parts give the same JSON, byte for
byte: nothing here reads a clock, and every order is by value.
"""

from __future__ import annotations

from profscope.model.units import fmt_bytes
from profscope.tools import analysis_hlo, analysis_memory, analysis_time
from profscope.tools.analysis_rules import PRIORITIES, Rule

__all__ = ["RULES", "VERSION", "counts", "hosts_rows", "roofline_metrics", "sort_findings", "status_of", "summarize"]

VERSION = 1
RULES: tuple[Rule, ...] = (*analysis_time.RULES, *analysis_memory.RULES, *analysis_hlo.RULES)
OPTIMAL, NEEDS_ATTENTION = "OPTIMAL", "NEEDS_ATTENTION"
# No part of the run could be read (a corrupt file, a git-LFS pointer): no finding is no
# clean bill of health, so neither of XProf's two verdicts is given.
NOT_ASSESSED = "NOT_ASSESSED"
_RANK = {p: i for i, p in enumerate(PRIORITIES)}


def _impact_key(f: dict) -> tuple[int, float]:
    """A finding's impact to sort by within a priority: seconds per step and bytes are no
    one unit, so the findings with a time at stake come first (most seconds first), then
    those with bytes (most first), then those with neither."""
    imp = f.get("impact") or {}
    if imp.get("seconds_per_step") is not None:
        return 0, -float(imp["seconds_per_step"])
    if imp.get("bytes") is not None:
        return 1, -float(imp["bytes"])
    return 2, 0.0


def sort_findings(findings: list[dict]) -> list[dict]:
    """P0 first, then the largest impact, then the rule's id, then the host."""
    return sorted(findings, key=lambda f: (_RANK[f["priority"]], _impact_key(f), f["id"], f.get("host") or "",
                                           f["title"]))


def counts(findings: list[dict]) -> dict:
    return {p: sum(1 for f in findings if f["priority"] == p) for p in PRIORITIES}


def status_of(findings: list[dict]) -> str:
    """NEEDS_ATTENTION iff a P0 or P1 finding exists."""
    return NEEDS_ATTENTION if any(f["priority"] in ("P0", "P1") for f in findings) else OPTIMAL


def _us(us: float) -> str:
    return analysis_time._us(us)


def step_metrics(so: dict | None) -> dict | None:
    """``metrics.steps``: the step summary of a Steps & ops payload (None without steps)."""
    s = (so or {}).get("summary") or {}
    if not s.get("steps") or s.get("median_us") is None:
        return None
    return {"count": s["steps"], "median_us": s["median_us"], "p90_us": s.get("p90_us"),
            "slowest_step": s.get("slowest_step"), "slowest_us": s.get("slowest_us"),
            "step_source": s.get("step_source"), "host": so.get("host")}


def memory_metrics(oom: dict | None) -> dict | None:
    """``metrics.memory``: the OOM-risk payload's peak against capacity, and its tier."""
    if not oom:
        return None
    return {"peak_bytes": oom.get("peakBytes"), "capacity_bytes": oom.get("capacityBytes"),
            "utilization": None if oom.get("utilization") is None else round(oom["utilization"], 4),
            "risk": oom.get("risk"), "source": oom.get("peakSource"), "host": oom.get("host")}


def roofline_metrics(so: dict | None, peaks: dict | None) -> dict | None:
    """``metrics.roofline``: the HLO ops' FLOPs and bytes over their device time against
    the device's peaks (XProf op_profile's flops and memory-bandwidth utilization of the
    program node: the op's FLOPs / (its time x peak FLOP/s)). None unless the ops carry
    FLOPs and the device plane names its peaks (a TPU's XProf stats)."""
    if not so or not peaks or not peaks.get("peak_flops_per_s") or not peaks.get("peak_bytes_per_s"):
        return None
    hlo = [o for o in so.get("ops") or [] if o.get("kind") == "hlo"]
    time_s = sum(o["total_us"] for o in hlo) / 1e6
    flops = sum(o.get("flops") or 0 for o in hlo)
    nbytes = sum(o.get("bytes_accessed") or 0 for o in hlo)
    if not time_s or not (flops or nbytes):
        return None
    return {"flops_utilization": round(flops / (time_s * peaks["peak_flops_per_s"]), 6),
            "hbm_utilization": round(nbytes / (time_s * peaks["peak_bytes_per_s"]), 6),
            "flops": int(flops), "bytes_accessed": int(nbytes), "device_time_us": round(time_s * 1e6, 3),
            "peak_flops_per_s": peaks["peak_flops_per_s"], "peak_bytes_per_s": peaks["peak_bytes_per_s"]}


def hosts_rows(per_host: list[dict]) -> list[dict]:
    """``hosts[]`` of an ALL_HOSTS summary, worst host first: NEEDS_ATTENTION before
    OPTIMAL, then more P0, P1, P2 findings, then the slower median step, then the name. An
    unreadable host (``error``) comes last, named."""
    def key(h):
        c = h.get("counts") or {}
        return (h.get("error") is not None, h.get("status") != NEEDS_ATTENTION, -c.get("P0", 0), -c.get("P1", 0),
                -c.get("P2", 0), -(h.get("median_us") or 0), h["host"])
    return sorted(per_host, key=key)


def refused_rows(refused: list[dict]) -> list[dict]:
    """``refused``: each unreadable file once, with its reason and the parts that needed it
    (one corrupt xplane fails the steps, the OOM risk and the memory profile alike)."""
    rows: dict[tuple, list[str]] = {}
    for r in refused:
        rows.setdefault((r.get("file") or "", r.get("reason") or ""), []).append(r.get("part") or "")
    return [{"file": f or None, "reason": why, "parts": sorted(set(p for p in parts if p))}
            for (f, why), parts in sorted(rows.items())]


def _sentences(run: str, host: str | None, status: str, found: list[dict], metrics: dict, hosts, refused,
               inputs, capture: dict | None = None) -> str:
    c = counts(found)
    where = f"{run}" + (f" ({'all hosts' if host == 'ALL_HOSTS' else 'host ' + host})" if host else "")
    worst = f"; of its {len(hosts)} hosts, {hosts[0]['host']} is the worst" if hosts else ""
    out = [f"{where}: {status.replace('_', ' ').lower()}, with {c['P0']} P0, {c['P1']} P1 and {c['P2']} P2 "
           f"finding{'s' if sum(c.values()) != 1 else ''}{worst}."]
    st, dev = metrics.get("steps"), metrics.get("device")
    if st:
        s = f"The median step takes {_us(st['median_us'])} (p90 {_us(st['p90_us'])}) over {st['count']} step" + \
            ("s" if st["count"] != 1 else "")
        if dev:
            s += f"; the devices are busy {100 * dev['busy_share']:.1f} % of it and idle {100 * dev['idle_share']:.1f} %"
        out.append(s + ".")
    else:
        out.append("No step time was measured.")
    mem = metrics.get("memory")
    if mem and mem.get("peak_bytes") is not None:
        cap = mem.get("capacity_bytes")
        out.append(f"Peak memory is {fmt_bytes(mem['peak_bytes'])}" +
                   (f" of {fmt_bytes(cap)} ({100 * mem['utilization']:.1f} %, {mem['risk']} risk)."
                    if cap and mem.get("utilization") is not None else f" (capacity unknown, {mem['risk']} risk)."))
    if capture:
        # a triggered capture (app/capture_watch.py): why it was taken, right after the status;
        # a ring's snapshot (app/capture_ring.py): the seconds it holds and what it missed
        out[1:1] = _capture_sentences(capture)
    if refused:
        files = sorted({r.get("file") or "?" for r in refused})
        named = f"{len(files)} file{'s' if len(files) != 1 else ''} could not be read ({', '.join(files)})"
        if not any((inputs or {}).values()):
            # nothing was read: no finding is no clean bill of health
            out[0] = f"{where}: nothing could be read, so nothing was assessed."
            out.insert(1, f"{named}.")
        else:
            out.insert(1, f"{named}: the summary covers only what was.")
    if found:
        top = found[0]
        out.append(f"Most urgent: {top['title']}" + (f": {top['impact']['text']}." if top["impact"].get("text") else "."))
    elif any((inputs or {}).values()):
        out.append("No rule found anything to fix.")
    return " ".join(out)  # at most 7: the status, why and how it was captured, what was refused, steps, memory,
    # the most urgent


def capture_facts(meta: dict | None) -> dict | None:
    """The Summary's ``capture``: of a captured run's metadata file (app/capture.py
    ``write_capture_meta``, a file in the log directory, so every field is checked, never
    trusted), ``reason``, ``condition``, ``fired_at``, ``mode`` and, for a ring's snapshot,
    ``ring``: ``held_s`` (the longest a host holds), ``pieces`` (per host, the most),
    ``gaps`` (between pieces, all hosts), ``gap_ms_min``/``gap_ms_max``. None when it
    has neither a reason nor a ring's window."""
    if not isinstance(meta, dict):
        return None
    def text(v):
        return v[:500] if isinstance(v, str) else None
    def number(v):
        return v if isinstance(v, (int, float)) and not isinstance(v, bool) and v == v and abs(v) < 1e18 else None
    out = {"reason": text(meta.get("reason")), "condition": text(meta.get("condition")),
           "fired_at": number(meta.get("fired_at")), "mode": text(meta.get("mode"))}
    window, gaps = meta.get("window"), meta.get("gaps_ms")
    if out["mode"] == "ring" and isinstance(window, dict) and isinstance(window.get("held_s"), dict) \
            and isinstance(gaps, dict):
        held = [number(v) for v in window["held_s"].values()]
        per_host = [[number(g) for g in v] for v in gaps.values() if isinstance(v, list)]
        all_gaps = [g for v in per_host for g in v]
        if held and None not in held and all_gaps.count(None) == 0:
            out["ring"] = {"held_s": max(held), "pieces": max((len(v) + 1 for v in per_host), default=1),
                           "gaps": len(all_gaps), "gap_ms_min": min(all_gaps, default=None),
                           "gap_ms_max": max(all_gaps, default=None)}
    return out if out["reason"] is not None or "ring" in out else None


def _capture_sentences(capture: dict) -> list[str]:
    out = []
    if capture.get("reason"):
        out.append(f"Captured because {capture['reason'].rstrip('.')}.")
    ring = capture.get("ring")
    if ring:
        before = "the trigger" if capture.get("reason") else "the snapshot"
        s = f"It holds the last {ring['held_s']:.1f} s before {before}, recorded in {ring['pieces']} piece" + \
            ("s" if ring["pieces"] != 1 else "") + " per host"
        if ring["gaps"]:
            lo, hi = ring["gap_ms_min"], ring["gap_ms_max"]
            span = f"{lo:.0f} ms" if round(lo) == round(hi) else f"{lo:.0f}–{hi:.0f} ms"
            s += f"; the {ring['gaps']} gap{'s' if ring['gaps'] != 1 else ''} between them ({span}) were not recorded"
        out.append(s + ".")
    return out


def summarize(parts: dict) -> dict:
    """The Summary JSON (docs/analysis.md "JSON") from ``parts``: ``run``, ``host``,
    ``steps_ops`` (the host's payload, or the worst host's for ALL_HOSTS; None),
    ``oom_risk`` (None), ``peaks`` (the device's ``peak_flops_per_s`` and
    ``peak_bytes_per_s``; None), ``findings`` (every rule's, any order), ``hosts`` (the
    per-host rows of ALL_HOSTS; None), ``refused`` (``[{file, reason}]``), ``inputs`` and ``capture`` (a
    triggered capture's metadata, app/capture.py; None)."""
    found = sort_findings(parts.get("findings") or [])
    capture = capture_facts(parts.get("capture"))
    so = parts.get("steps_ops")
    metrics = {"steps": step_metrics(so),
               "device": analysis_time.device_metrics(so) if so else None,
               "categories": analysis_time.median_step_categories(so) if so else [],
               "memory": memory_metrics(parts.get("oom_risk")),
               "roofline": roofline_metrics(so, parts.get("peaks"))}
    read_any = any((parts.get("inputs") or {}).values())
    status = status_of(found) if found or read_any else NOT_ASSESSED
    hosts = hosts_rows(parts["hosts"]) if parts.get("hosts") is not None else None
    refused = refused_rows(parts.get("refused") or [])
    out = {"version": VERSION, "run": parts["run"], "host": parts.get("host"), "status": status,
           "summary": _sentences(parts["run"], parts.get("host"), status, found, metrics, hosts, refused,
                                 parts.get("inputs"), capture),
           "metrics": metrics, "findings": found}
    if capture:
        # why and how the run was captured: only on such runs, so every other summary's
        # JSON stays as it was
        out["capture"] = capture
    if hosts is not None:
        out["hosts"] = hosts
    out["refused"] = refused
    out["inputs"] = {k: bool((parts.get("inputs") or {}).get(k)) for k in ("steps_ops", "oom_risk", "memory_profile", "hlo")}
    return out

"""Steps & ops, run vs run (issue 36, docs/compare.md "Steps & ops"): the diff of two
single answers of the ``steps_ops`` tool (app/traces.py ``steps_ops``), in the diff JSON
every comparable tool answers.

Pure: it reads the two cached payloads and nothing else, so every number it gives is a
difference of two numbers the single answers show (``current - base``, no re-rounding):
the step time (median, p90, and the mean that the split by category adds up to) and each
op's total time.

- ``totals``: the mean step time of each run, in µs, where a step's time is split, on
  every device, into its busy and idle time (the single answer's ``busy_us`` and
  ``idle_us``; tools/step_breakdown.py makes them add up to ``step_time_us`` per device),
  the busy time shared among the categories as their ``time_us`` are (see _step_split). ``groups.category`` is that split, each category's
  time per step averaged over the steps and devices, ``idle`` one of them: its deltas sum
  to the total's delta, ``residual`` is what float sums leave (< 1e-6 µs).
- ``step_time``: the median and p90 the single answers report, and their deltas.
- ``rows``: the ops table. An op is matched by its kind (hlo, kernel, framework: the
  single answer's ``ops[].kind``) and name first; among the ops left, one op of a kind
  and category on each side is matched by that category (a fusion renamed between two
  compilations); the others are listed as only in one run. Sorted by |delta| desc.
  Rows do not add up to the step time: an xplane's HLO ops count the whole profile and
  the kernels and framework ops the steps (the single answer's ``ops_scope``); their sums
  per kind are ``ops_totals``.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

VERSION = 1
IDLE = "idle"


def _ref(ref: dict, answer: dict) -> dict:
    out = {"run": ref.get("run", answer.get("run")), "host": ref.get("host", answer.get("host"))}
    out["label"] = ref.get("label") or (f"{out['run']} · {out['host']}" if out["host"] else str(out["run"]))
    return out


def _step_split(answer: dict) -> tuple[float, dict[str, float]]:
    """The mean step time and each category's (and idle's) time per step, averaged over
    the steps and each step's devices. A device's busy plus idle time is the step's time
    (tools/step_breakdown.py); its categories' times add up to its busy time on an xplane
    but overlap on a PyTorch trace (kernels of two streams at once each count, as HTA's
    temporal breakdown), so each category gets its share of the busy time: the split
    adds up to the mean step time either way."""
    per: dict[str, float] = defaultdict(float)
    steps = answer.get("steps") or []
    for step in steps:
        devices = step.get("devices") or []
        for dev in devices:
            times = dev.get("time_us") or {}
            busy, counted = dev.get("busy_us") or 0.0, sum(times.values())
            weight = 1.0 / len(devices) / len(steps)
            for cat, us in times.items():
                per[cat] += (us * busy / counted if counted else 0.0) * weight
            if busy and not counted:  # busy with nothing categorised: no category to give it to
                per["other"] += busy * weight
            per[IDLE] += (dev.get("idle_us") or 0.0) * weight
        if not devices:  # a step with no device: all of it host time, counted as idle
            per[IDLE] += step["step_time_us"] / len(steps)
    return sum(per.values()), dict(per)


def _row(key, label, b, c, match, link_base, link_current, **extra) -> dict:
    where = "both" if b is not None and c is not None else ("base_only" if c is None else "current_only")
    bv, cv = (b if b is not None else 0.0), (c if c is not None else 0.0)
    return {"key": key, "label": label, "in": where, "base": bv, "current": cv, "delta": cv - bv,
            "match": match, "link_base": link_base if b is not None else None,
            "link_current": link_current if c is not None else None, **extra}


def _by_abs_delta(rows: list[dict]) -> list[dict]:
    return sorted(rows, key=lambda r: (-abs(r["delta"]), str(r["key"])))


def _category_rows(b_split: dict, c_split: dict, labels: dict, link_b: str, link_c: str) -> list[dict]:
    rows = []
    for cat in sorted(b_split.keys() | c_split.keys()):
        rows.append(_row(cat, labels.get(cat, cat), b_split.get(cat), c_split.get(cat), "category",
                         link_b, link_c))
    return _by_abs_delta(rows)


def _op_key(op: dict) -> tuple:
    """An op's identity across two runs: its kind, its module's name (an HLO op's name is
    unique within its module only; the module's name, not its program id, is the same in
    two compilations) and its name."""
    return (op["kind"], op.get("module") or "", op["name"])


def _by_key(ops: list[dict]) -> dict[tuple, dict]:
    """The ops by :func:`_op_key`; two rows of one key (one module name for two programs)
    are summed, so no op's time is dropped."""
    out: dict[tuple, dict] = {}
    for op in ops:
        key = _op_key(op)
        if key in out:
            first = out[key]
            out[key] = {**first, "total_us": first["total_us"] + op["total_us"],
                        "occurrences": first["occurrences"] + op["occurrences"]}
        else:
            out[key] = op
    return out


def _ops_rows(base_ops: list[dict], cur_ops: list[dict], link_b: Callable, link_c: Callable) -> list[dict]:
    """Ops matched by kind and name, then the ones left by kind and category when that
    category has exactly one op left on each side (otherwise the pairing would be a
    guess); the rest only in one run."""
    b_by, c_by = _by_key(base_ops), _by_key(cur_ops)
    rows = []

    def extra(b, c):
        one = c or b
        return {"kind": one["kind"], "category": one.get("category"), "module": one.get("module"),
                "occurrences_base": b["occurrences"] if b else 0, "occurrences_current": c["occurrences"] if c else 0}

    def key_text(key):
        return ":".join(k for k in key if k)

    for key in b_by.keys() & c_by.keys():
        b, c = b_by[key], c_by[key]
        rows.append(_row(key_text(key), key[2], b["total_us"], c["total_us"], "name",
                         link_b(b), link_c(c), **extra(b, c)))
    left_b: dict[tuple, list] = defaultdict(list)
    left_c: dict[tuple, list] = defaultdict(list)
    for key in b_by.keys() - c_by.keys():
        left_b[(key[0], b_by[key].get("category"))].append(key)
    for key in c_by.keys() - b_by.keys():
        left_c[(key[0], c_by[key].get("category"))].append(key)
    for group in left_b.keys() | left_c.keys():
        bs, cs = sorted(left_b.get(group, [])), sorted(left_c.get(group, []))
        if len(bs) == 1 and len(cs) == 1:
            b, c = b_by[bs[0]], c_by[cs[0]]
            rows.append(_row(f"{key_text(bs[0])}→{key_text(cs[0])}", f"{b['name']} → {c['name']}",
                             b["total_us"], c["total_us"], "category", link_b(b), link_c(c), **extra(b, c)))
            continue
        for key in bs:
            rows.append(_row(key_text(key), key[2], b_by[key]["total_us"], None, None,
                             link_b(b_by[key]), None, **extra(b_by[key], None)))
        for key in cs:
            rows.append(_row(key_text(key), key[2], None, c_by[key]["total_us"], None,
                             None, link_c(c_by[key]), **extra(None, c_by[key])))
    return _by_abs_delta(rows)


def _ops_totals(rows: list[dict]) -> dict:
    out: dict[str, dict] = {}
    for r in rows:
        t = out.setdefault(r["kind"], {"base": 0.0, "current": 0.0})
        t["base"] += r["base"]
        t["current"] += r["current"]
    for t in out.values():
        t["delta"] = t["current"] - t["base"]
    return out


def _all_hosts(base: dict, current: dict) -> str | None:
    """An ALL_HOSTS answer (every host side by side: its ``hosts``, no one host's steps or
    ops) on either side: it is compared host by host."""
    sides = [side for side, a in (("base", base), ("current", current)) if "hosts" in a]
    if not sides:
        return None
    return (f"the {' and the '.join(sides)} side is every host at once (ALL_HOSTS): Steps & ops compares one host "
            "with one host; pick a host, or compare the straggler with the median host")


def _why(base: dict, current: dict) -> str | None:
    """What cannot be compared: a run without steps has no step time (its ops still do)."""
    every = _all_hosts(base, current)
    if every:
        return every
    empty = [side for side, a in (("base", base), ("current", current)) if not a.get("steps") and not a.get("ops")]
    if empty:
        return f"the {' and the '.join(empty)} run has neither steps nor device ops: nothing to compare"
    missing = [side for side, a in (("base", base), ("current", current)) if not a.get("steps")]
    if len(missing) == 2:
        return "neither run has steps: only the ops are compared, there is no step time"
    if missing:
        return f"the {missing[0]} run has no steps: only the ops are compared, there is no step time"
    return None


def diff(base: dict, current: dict, *, base_ref: dict, current_ref: dict, link: Callable) -> dict:
    """The diff JSON (docs/compare.md) of two ``steps_ops`` answers of one host each."""
    b_ref, c_ref = _ref(base_ref, base), _ref(current_ref, current)
    link_b = link("steps_ops", run=b_ref["run"], host=b_ref["host"])
    link_c = link("steps_ops", run=c_ref["run"], host=c_ref["host"])
    b_mean, b_split = _step_split(base)
    c_mean, c_split = _step_split(current)
    labels = {c["key"]: c["label"] for a in (base, current) for c in a.get("categories") or []}
    labels[IDLE] = "Idle (no device activity)"
    why = _why(base, current)
    groups = {"category": _category_rows(b_split, c_split, labels, link_b, link_c)} if why is None else {"category": []}
    delta = c_mean - b_mean
    residual = delta - sum(r["delta"] for r in groups["category"]) if why is None else None
    bs, cs = base.get("summary") or {}, current.get("summary") or {}

    def op_link(ref):
        # the page's selected op: its opKey, kind|program_id|name (pages/steps_ops.js)
        return lambda op: link("steps_ops", run=ref["run"], host=ref["host"], kind=op["kind"],
                               op=f"{op['kind']}|{op.get('program_id') or ''}|{op['name']}")

    rows = _ops_rows(base.get("ops") or [], current.get("ops") or [], op_link(b_ref), op_link(c_ref))
    return {
        "version": VERSION, "tool": "steps_ops", "base": b_ref, "current": c_ref,
        "comparable": _all_hosts(base, current) is None
        and bool(base.get("ops") or base.get("steps")) and bool(current.get("ops") or current.get("steps")),
        "why": why,
        "totals": {"base": b_mean if base.get("steps") else None, "current": c_mean if current.get("steps") else None,
                   "delta": delta if why is None else None, "unit": "us", "residual": residual},
        "groups": groups,
        "rows": rows,
        "step_time": {k: {"base": bs.get(f"{k}_us"), "current": cs.get(f"{k}_us"),
                          "delta": (cs[f"{k}_us"] - bs[f"{k}_us"])
                          if bs.get(f"{k}_us") is not None and cs.get(f"{k}_us") is not None else None}
                      for k in ("median", "p90")},
        "steps": {"base": bs.get("steps", 0), "current": cs.get("steps", 0)},
        "ops_totals": _ops_totals(rows),
        "ops_scope": {"base": base.get("ops_scope"), "current": current.get("ops_scope")},
    }

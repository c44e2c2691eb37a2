"""The OOM risk's "what would make it fit" (tools/oom_plan.py), fed from the workspace:
the rated module's compiled evidence and the other compilations of the same program in
the run (modules whose entry parameters match by name, type and rank)."""

from __future__ import annotations

from profscope.app import lazy
from profscope.app.queries import MemoryViewerQuery, OomRiskQuery
from profscope.errors import ProfscopeError
from profscope.model.catalog import Run

oom_plan = lazy.module("profscope.tools.oom_plan")
oom_risk = lazy.module("profscope.tools.oom_risk")

MAX_SIBLINGS = 16  # scheduled modules read to find the other compilations of the program


def plan(ws, run: Run, host: str | None, compiled: dict | None, answer: dict, query: OomRiskQuery) -> dict | None:
    """``plan`` of the OOM-risk answer: ``savings`` (priced changes) and ``batch`` (the
    size fit), or None when the answer rates no XLA module (a snapshot, a trace)."""
    if compiled is None:
        return None
    shards = query.shards or oom_plan.DEFAULT_SHARDS
    out = {"module": compiled["moduleName"], "savings": oom_plan.savings(compiled, answer, shards)}
    points = [_point(compiled)]
    sig = oom_plan.signature(compiled)
    if sig is not None:
        for m in answer.get("modules") or []:
            name = m["moduleName"]
            if name == compiled["moduleName"] or not m.get("heapEvents") or m.get("error"):
                continue
            if len(points) > MAX_SIBLINGS:
                break
            try:
                mv = ws._payload(run, "memory_viewer", MemoryViewerQuery(module_name=name, host=host))
            except ProfscopeError:
                continue  # a module the memory viewer refuses is no point of the fit
            ev = oom_risk.compiled_evidence(mv, name)
            if oom_plan.signature(ev) == sig:
                points.append(_point(ev))
    evs = [p.pop("ev") for p in points]
    found = oom_plan.sizes(evs) if len(evs) > 1 else None
    if found is None:
        out["batch"] = oom_plan.batch_fit([{**p, "size": None} for p in points[:1]], answer, {}, None)
        return out
    values, info = found
    for p, v in zip(points, values, strict=True):
        p["size"] = v
    out["batch"] = oom_plan.batch_fit(points, answer, info, query.batch)
    return out


def jax_mem_fraction(query: OomRiskQuery) -> float | None:
    """The share of the device JAX preallocates when the user says the run was JAX on a
    GPU (jax_gpu=1, or jax_mem_fraction= its XLA_PYTHON_CLIENT_MEM_FRACTION), else None."""
    if query.jax_mem_fraction is not None:
        return query.jax_mem_fraction
    return 0.75 if query.jax_gpu else None


def _point(ev: dict) -> dict:
    cats: dict[str, int] = {}
    for i in ev["items"]:
        cats[i["category"]] = cats.get(i["category"], 0) + i["bytes"]
    return {"moduleName": ev["moduleName"], "peakBytes": ev["peakBytes"], "categories": cats, "ev": ev}

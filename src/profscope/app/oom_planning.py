"""The OOM risk's "what would make it fit" (tools/oom_plan.py), fed from the workspace:
the rated module's compiled evidence and the other compilations of the same program in
the run (modules whose entry parameters match by name, type and rank)."""

from __future__ import annotations

from profscope.app import lazy
from profscope.app.queries import MemoryViewerQuery, OomRiskQuery
from profscope.errors import BadRequest, ProfscopeError
from profscope.model.catalog import Run, RunKind

oom_plan = lazy.module("profscope.tools.oom_plan")
oom_risk = lazy.module("profscope.tools.oom_risk")

MAX_SIBLINGS = 16  # modules with a schedule read to find the other compilations of the program


def plan(ws, run: Run, host: str | None, compiled: dict | None, answer: dict, query: OomRiskQuery) -> dict | None:
    """``plan`` of the OOM-risk answer: ``savings`` (priced changes) and ``batch`` (the
    size fit), or None when the answer rates no XLA module (a snapshot, a trace)."""
    if compiled is None:
        return None
    shards = query.shards or oom_plan.DEFAULT_SHARDS
    out = {"module": compiled["moduleName"], "savings": oom_plan.savings(compiled, answer, shards)}
    points = [_point(compiled)]
    sig = oom_plan.signature(compiled)
    # The run's other modules, then those of the runs fit_with= names (two profiles or two
    # dumps of the same program at two sizes), each named "run: module" there.
    candidates = [(run, host, m["moduleName"], m["moduleName"]) for m in answer.get("modules") or []
                  if m["moduleName"] != compiled["moduleName"] and m.get("heapEvents") and not m.get("error")]
    for other in _other_runs(ws, run, query):
        candidates += [(other, None, m["moduleName"], f"{other.name}: {m['moduleName']}") for m in ws.module_peaks(other)
                       if m.get("heapEvents") and not m.get("error")]
    # Each candidate costs a memory-viewer conversion (cached): at most MAX_SIBLINGS are read.
    for where, on_host, name, label in candidates[:MAX_SIBLINGS] if sig is not None else []:
        try:
            mv = ws._payload(where, "memory_viewer", MemoryViewerQuery(module_name=name, host=on_host))
        except ProfscopeError:
            continue  # a module the memory viewer refuses is no point of the fit
        ev = oom_risk.compiled_evidence(mv, name)
        if oom_plan.signature(ev) == sig:
            points.append({**_point(ev), "moduleName": label})
    evs = [p.pop("ev") for p in points]
    found = oom_plan.sizes(evs) if len(evs) > 1 else None
    if found is None:
        out["batch"] = oom_plan.batch_fit([{**p, "size": None} for p in points[:1]], answer, {}, None)
        out["headline"] = oom_plan.headline(out, answer)
        return out
    values, info = found
    for p, v in zip(points, values, strict=True):
        p["size"] = v
    out["batch"] = oom_plan.batch_fit(points, answer, info, query.batch)
    out["headline"] = oom_plan.headline(out, answer)
    return out


def _other_runs(ws, run: Run, query: OomRiskQuery) -> list[Run]:
    """The runs ``fit_with`` names (comma-separated): profiles or XLA dumps. An unknown run
    is a 404 naming it (Workspace.run); a run of another kind, a 400."""
    out = []
    for name in dict.fromkeys(n.strip() for n in (query.fit_with or "").split(",") if n.strip()):
        other = ws.run(name)
        if other.kind not in (RunKind.PROFILE, RunKind.XLA_DUMP):
            raise BadRequest(f"fit_with: run {other.name!r} is a {other.kind.value}, not a profile or an XLA dump with compiled modules")
        if other.name != run.name:
            out.append(other)
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

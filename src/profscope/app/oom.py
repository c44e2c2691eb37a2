"""OOM risk: the evidence of the other tools' payloads for one run (the compiled peak, the
allocator's, a snapshot's, a trace's) and the device capacity, assessed by
tools/oom_risk.py."""

from __future__ import annotations

import gzip

import orjson

from profscope.app import keys, lazy
from profscope.app import oom_planning
from profscope.app.queries import MemoryProfileQuery, MemoryViewerQuery, OomRiskQuery
from profscope.errors import NothingToAssess, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import FileKind

chrome_trace = lazy.module("profscope.formats.chrome_trace")
xplane_devices = lazy.module("profscope.formats.xplane_devices")
xplane_module_time = lazy.module("profscope.formats.xplane_module_time")
memory_profile_snapshot = lazy.module("profscope.tools.memory_profile_snapshot")
oom_risk = lazy.module("profscope.tools.oom_risk")

# OOM risk of a snapshot: blocks read at the peak, and stacks resolved to frames.
OOM_MAX_BLOCKS = 500_000
OOM_MAX_STACKS = 500


class OomAssessment:
    """Part of :class:`~profscope.app.workspace.Workspace`: OOM risk."""

    def oom_risk(self, run: Run, query: OomRiskQuery, progress) -> dict:
        """Peak vs capacity with contributors and findings (tools/oom_risk.py), from the
        memory viewer of one module (``module_name``, default the worst step module), the
        run's module peaks, the allocator events of an xplane and a snapshot's peak."""
        # The request first: an unknown device is a 400 before any file is read.
        requested = oom_risk.requested_capacity(query.capacity_bytes, query.device_memory)
        thresholds = oom_risk.tier_thresholds(query.threshold_medium, query.threshold_high)
        host = query.host
        if self._rates_every_host(run, query):
            return self._oom_risk_every_host(run, query, progress)
        compiled = allocator = snap_ev = trace_ev = pprof_ev = module_choice = None
        modules: list[dict] = []
        devices: list[dict] = []
        trace_devices: list[dict] = []
        if run.kind is RunKind.TORCH_SNAPSHOT:
            snap_ev = self._oom_snapshot_evidence(run, host, progress)
        elif run.kind is RunKind.PPROF:
            pprof_ev = self.pprof_oom_evidence(run, host)
        elif run.kind is RunKind.CHROME_TRACE:
            trace_ev = oom_risk.torch_trace_evidence(orjson.loads(gzip.decompress(self.torch_memory_payload(run))))
            if trace_ev is None:
                raise NothingToAssess(f"run {run.name!r}: the trace has no [memory] events (profile_memory=True) to assess")
            trace_devices = self.trace_device_properties(run)
        else:
            progress.update(0.0, "ranking the modules by peak")
            modules = self.module_peaks(run) if run.kind is RunKind.PROFILE or run.kind is RunKind.XLA_DUMP else []
            name = query.module_name
            module_choice = {"rule": "requested"} if name else None
            if not name:
                # The worst module that runs as a step (tools/oom_risk.py default_module,
                # docs/oom_risk.md "The rated module"); module run times only break the
                # tie when no module is named as a step.
                times = self.module_run_times(run, host) if run.kind is RunKind.PROFILE and run.hosts else {}
                # One host is rated on its own modules: another host's module is not in
                # its xplane (memory_viewer with host= was a 404, e.g. a TF host in a
                # session with JAX hosts), and a host with none is rated on its allocator.
                info = run.xplane(host) if run.kind is RunKind.PROFILE and host else None
                own = set(self._modules_of(info)) if info is not None else None
                known = {m["moduleName"] for m in modules if not m.get("error") and (own is None or m["moduleName"] in own)}
                name, module_choice = oom_risk.default_module(modules, known, times)
                if name is None:
                    name = ((sorted(own) if own is not None else self.modules(run)) or [None])[0]
                    module_choice = {"rule": "first module (no module peak could be read)"}
            if name:
                mv = self._payload(run, "memory_viewer", MemoryViewerQuery(module_name=name, host=host))
                compiled = oom_risk.compiled_evidence(mv, name)
            if run.kind is RunKind.PROFILE and run.hosts:
                progress.update(0.6, "reading allocator events")
                mp = self._payload(run, "memory_profile", MemoryProfileQuery(host=host))
                allocator = oom_risk.allocator_evidence(mp)
                devices = self.device_capabilities(run, host)
            if compiled is None and allocator is None:
                raise NothingToAssess(f"run {run.name!r} has neither HLO modules nor allocator events to assess")
        answer = oom_risk.assess(compiled=compiled, allocator=allocator, snapshot=snap_ev, modules=modules,
                                 requested=requested, device_name=query.device, devices=devices,
                                 torch_trace=trace_ev, trace_devices=trace_devices, thresholds=thresholds,
                                 module_choice=module_choice, jax_mem_fraction=oom_planning.jax_mem_fraction(query),
                                 pprof=pprof_ev)
        # What would make it fit: priced changes and the batch fit (app/oom_planning.py).
        answer["plan"] = oom_planning.plan(self, run, host, compiled, answer, query)
        return answer

    def assess_hosts_first(self, run: Run, query: OomRiskQuery) -> None:
        """Before a multi-host profile is rated by its worst host: its hosts' assessments,
        all at once (on the cluster, or in several workers); the run's own conversion
        then reads them back one by one (Workspace.fan_out)."""
        if not self._rates_every_host(run, query):
            return
        tool = self.tool_named("oom_risk")
        per_host = [query.but(host=h) for h in run.hosts]
        self.fan_out(run, [(self.tool_data_key(run, tool, q), ("tool_data", q.host, tool.name, q.fields()))
                           for q in per_host], f"{tool.title} of {len(per_host)} hosts", one_worker_each=False)

    @staticmethod
    def _rates_every_host(run: Run, query: OomRiskQuery) -> bool:
        """A multi-host profile, or a distributed job (its ranks, app/discovery.py),
        without ``host=`` is rated by its worst host."""
        return (run.kind is RunKind.PROFILE or bool(run.ranks)) and not query.host and len(run.hosts) > 1

    def _oom_risk_every_host(self, run: Run, query: OomRiskQuery, progress) -> dict:
        """A multi-host profile rated by its worst host: the first host alone can miss a
        larger peak or a leak on another one. The payload is the worst host's, with
        ``host`` (that host), ``hosts`` (every host's headline) and the other hosts'
        findings that the worst one lacks (each finding names its ``host``)."""
        rank = oom_risk.RANK
        per, failed = [], []
        for i, h in enumerate(run.hosts):
            progress.update(i / len(run.hosts), f"assessing host {h}")
            try:
                # Through the per-host cache entry: asking for one host later reads it back.
                per.append((h, self._payload(run, "oom_risk", query.but(host=h))))
            except ProfscopeError as e:
                # One unreadable host must not hide the others; it is named in ``hosts``.
                failed.append({"host": h, "risk": "UNKNOWN", "problem": e.message, "findings": []})
        if not per:
            raise NotFound(f"run {run.name!r}: no host could be assessed: "
                           + "; ".join(f"{f['host']}: {f['problem']}" for f in failed))
        worst_host, worst = max(per, key=lambda hp: (rank.get(hp[1]["risk"], -1), hp[1].get("utilization") or 0, hp[1]["peakBytes"]))
        out = dict(worst)
        out["host"] = worst_host
        out["hosts"] = [{"host": h, **{k: p.get(k) for k in ("risk", "reason", "peakBytes", "peakSource", "capacityBytes",
                                                             "capacitySource", "utilization", "headroomBytes")},
                         "findings": [f["id"] for f in p["findings"]]} for h, p in per] + failed
        seen = {f["id"] for f in worst["findings"]}
        out["findings"] = [{**f, "host": worst_host} for f in worst["findings"]]
        for h, p in per:
            for f in p["findings"]:
                if f["id"] not in seen:
                    seen.add(f["id"])
                    out["findings"].append({**f, "host": h})
        return out

    def _payload(self, run: Run, tool_name: str, query) -> dict:
        """Another tool's payload through that tool's own cache entry, so that a new
        capacity or threshold re-assesses without reading the files again."""
        return orjson.loads(gzip.decompress(self.tool_data(run, self.tool_named(tool_name), query)))

    def device_capabilities(self, run: Run, host: str | None = None) -> list[dict]:
        """The device planes' capabilities (memory size, name) of one host's xplane."""
        info = self.host_xplane(run, host, "device planes")
        return self.derived_json(keys.DEVICE_CAPS, info, "reading device planes of", "devices",
                                 xplane_devices.device_capabilities)

    def module_run_times(self, run: Run, host: str | None = None) -> dict[str, dict]:
        """Total time of each XLA module's events in one host's xplane
        (formats/xplane_module_time.py), for the OOM-risk default module."""
        info = run.xplane(host or run.hosts[0])
        if info is None:
            return {}
        return self.derived_json(keys.MODULE_RUN_TIMES, info, "timing the modules of", "module times",
                                 xplane_module_time.module_run_times)

    def trace_device_properties(self, run: Run) -> list[dict]:
        """A PyTorch trace's ``deviceProperties`` (kineto writes ``id``, ``name``,
        ``totalGlobalMem``, ... per GPU as a top-level key), for the OOM-risk capacity."""
        trace = run.files_of(FileKind.CHROME_TRACE)[0]
        key = keys.derived(keys.TRACE_DEVICE_PROPERTIES, self.logdir.url, trace.identity())

        def compute(progress):
            progress.update(message=f"reading deviceProperties of {trace.name}")
            meta: dict = {}
            with self.logdir.open(trace.path) as f:
                for _ in chrome_trace.iter_events(f, self.logdir.display_path(trace.path), meta):
                    pass
            props = meta.get("deviceProperties")
            return [d for d in props if isinstance(d, dict)] if isinstance(props, list) else []

        return self.cache.get_or_compute_json(key, f"deviceProperties of {trace.path}", compute,
                                              file=self.logdir.display_path(trace.path))

    def _oom_snapshot_evidence(self, run: Run, host: str | None, progress) -> dict:
        snap = self.snapshot(run, progress)
        device = self.snapshot_device(run, host)
        ov = memory_profile_snapshot.overview(snap, device)
        event = (ov["summary"].get("peak") or {}).get("event")
        state = memory_profile_snapshot.state_at(snap, device, event, max_blocks=OOM_MAX_BLOCKS)
        groups: dict[int, dict] = {}
        for seg in state["segments"]:
            for b in seg["blocks"]:
                if b["state"].startswith("active"):
                    g = groups.setdefault(b["stackId"], {"stackId": b["stackId"], "bytes": 0, "count": 0})
                    g["bytes"] += b["size"]
                    g["count"] += 1
        ranked = sorted(groups.values(), key=lambda g: -g["bytes"])
        for g in ranked[:OOM_MAX_STACKS]:  # frames for the largest stacks; the rest stay "unknown"
            g["frames"] = memory_profile_snapshot.stack(snap, g["stackId"])["frames"] if g["stackId"] >= 0 else []
        return oom_risk.snapshot_evidence(ov, state["totals"], ranked, f"cuda:{device}")

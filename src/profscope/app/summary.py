"""The Summary tool's producer (issue 35, docs/analysis.md): for one host of a run, or
every host (``ALL_HOSTS``), the parts the rules read, gathered through the other tools'
own cache entries (Steps & ops, OOM risk, the memory profile, the HLO modules), then
tools/analysis.py ``summarize``.

A part that cannot be read (a corrupt file, one too large) is listed in ``refused`` with
its file and reason, never a failure of the whole summary; a part the run does not have
(a trace without ``[memory]`` events, a snapshot's steps) is only absent from
``inputs``.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlencode

from profscope.app import lazy
from profscope.app.profile_steps import ALL_HOSTS
from profscope.app.queries import MemoryProfileQuery, OomRiskQuery, StepsOpsQuery, SummaryQuery, TraceQuery
from profscope.errors import BadRequest, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind

analysis = lazy.module("profscope.tools.analysis")
analysis_time = lazy.module("profscope.tools.analysis_time")
analysis_memory = lazy.module("profscope.tools.analysis_memory")
step_breakdown = lazy.module("profscope.tools.step_breakdown")
oom_risk = lazy.module("profscope.tools.oom_risk")
compiler_checks = lazy.module("profscope.app.compiler_checks")


def linker(run: Run) -> Callable[..., str]:
    """``link(tool, **keys)``: the dashboard's URL query string of a view of ``run``
    (lib/state.js reads it: ``run``, ``tool``, ``host``, then the page's own keys as given,
    None left out), so that no rule knows the URL format."""
    def link(tool: str, **keys) -> str:
        pairs = [("run", run.name), ("tool", tool)] + [(k, str(v)) for k, v in keys.items() if v is not None]
        return "?" + urlencode(pairs)
    return link


def complete_host(run: Run, query: SummaryQuery) -> SummaryQuery:
    """No host: every host of a multi-host profile (one summary, worst host first), the
    one host of a single-host one."""
    if query.host is None and run.kind is RunKind.PROFILE and run.hosts:
        return query.but(host=ALL_HOSTS if len(run.hosts) > 1 else run.hosts[0])
    return query


class Analysis:
    """Part of :class:`~profscope.app.workspace.Workspace`: the Summary."""

    def analysis(self, run: Run, query: SummaryQuery, progress=None) -> dict:
        link = linker(run)
        # the request first, as OOM risk's: an unknown device is a 400, not a refused part
        oom_risk.requested_capacity(query.capacity_bytes, query.device_memory)
        if query.host == ALL_HOSTS and run.kind is not RunKind.PROFILE:
            # a snapshot's devices or a trace's file are no hosts to roll up: OOM risk rates
            # a snapshot by its device with the highest peak when no host is asked
            raise BadRequest(f"host=ALL_HOSTS summarises the hosts of a profile; {run.name!r} is a "
                             f"{run.kind.value}: leave host out (or name a device: {', '.join(self.hosts(run)) or 'none'})")
        if query.host is not None and query.host != ALL_HOSTS and run.kind in (RunKind.PROFILE, RunKind.TORCH_SNAPSHOT):
            known = self.hosts(run)
            if query.host not in known:
                raise NotFound(f"run {run.name!r} has no host {query.host!r}; hosts: {', '.join(known)}")
        if run.kind is RunKind.PROFILE and query.host == ALL_HOSTS and ALL_HOSTS not in run.hosts:
            return self._analysis_all_hosts(run, query, link, progress)
        refused: list[dict] = []
        parts = self._analysis_parts(run, query, query.host, link, refused, progress)
        return analysis.summarize({**parts, "run": run.name, "host": query.host, "refused": refused,
                                   "capture": self._capture_meta(run)})

    def _capture_meta(self, run: Run) -> dict | None:
        """Why a captured run was made: its session folder's profscope_capture.json (a
        trigger's reason, app/capture.py ``write_capture_meta``); None for other runs."""
        from profscope.app.capture import CAPTURE_META_FILE, parse_capture_meta

        if run.kind is not RunKind.PROFILE or not run.files:
            return None
        folder = run.files[0].path.rpartition("/")[0]
        try:
            raw = self.logdir.read_bytes(f"{folder}/{CAPTURE_META_FILE}" if folder else CAPTURE_META_FILE)
        except (ProfscopeError, OSError):
            return None
        return parse_capture_meta(raw)

    def summary_hosts_first(self, run: Run, query: SummaryQuery) -> None:
        """Before an ALL_HOSTS summary: each host's Steps & ops and OOM risk, all at once
        (on the cluster, or in several workers: Workspace.fan_out); the summary's own
        conversion then reads them back host by host."""
        if not (run.kind is RunKind.PROFILE and query.host == ALL_HOSTS and len(run.hosts) > 1):
            return
        jobs = []
        for name, q in (("steps_ops", StepsOpsQuery()), ("oom_risk", _oom_query(query, None))):
            tool = self.tool_named(name)
            per_host = [tool.complete(run, q.but(host=h)) if tool.complete else q.but(host=h) for h in run.hosts]
            jobs += [(self.tool_data_key(run, tool, hq), ("tool_data", hq.host, tool.name, hq.fields()))
                     for hq in per_host]
        self.fan_out(run, jobs, f"Summary of {len(run.hosts)} hosts", one_worker_each=False)

    def _analysis_part(self, run: Run, refused: list[dict], part: str, fn):
        """``fn()``, or None where the run has nothing for it (a 404) or it cannot be read
        (listed in ``refused``)."""
        try:
            return fn()
        except NotFound:
            return None
        except ProfscopeError as e:
            refused.append({"part": part, **self._refused_row(run, e.file, e.message)})
            return None

    def _refused_row(self, run: Run, shown_file: str | None, message: str) -> dict:
        """The unreadable file by its path in the log directory, as the run list names it
        (an error names it by LogDir.display_path, the machine's own path: the same input
        would give other JSON elsewhere), and the reason without that path in front."""
        shown = {self.logdir.display_path(f.path): f.path for f in run.files}
        file = shown.get(shown_file, shown_file) if shown_file else None
        head, sep, rest = message.partition(": ")
        return {"file": file, "reason": rest if sep and shown_file and head == shown_file else message}

    def _analysis_parts(self, run: Run, query: SummaryQuery, host: str | None, link, refused: list[dict],
                        progress=None, compiler: bool = True) -> dict:
        """One host's payloads and every rule's findings on them (``compiler``: the
        compiler checks of its modules too)."""
        def tool_payload(name, q):
            tool = self.tool_named(name)
            if not tool.applies_to(run) or not tool.has_input(self, run):
                return None
            return self._analysis_part(run, refused, name, lambda: self._payload(run, name, q))
        if progress is not None:
            progress.update(0.0, f"steps and ops of {host or run.name}")
        so = tool_payload("steps_ops", StepsOpsQuery(host=host))
        if progress is not None:
            progress.update(0.4, f"memory of {host or run.name}")
        oom = tool_payload("oom_risk", _oom_query(query, host))
        mp = tool_payload("memory_profile", MemoryProfileQuery(host=host)) if run.kind is not RunKind.TORCH_SNAPSHOT else None
        hlo = self._compiler_findings(run, host, link, refused) if compiler else None
        findings = self._time_findings(run, so, link, refused) if so is not None else []
        if oom is not None or mp is not None:
            findings += analysis_memory.memory_findings(oom, mp, link)
        findings += hlo or []
        for f in findings:
            # a rule that read one host's payload names it (the JSON's Finding.host)
            if f.get("host") is None:
                f["host"] = host
        return {"steps_ops": so, "oom_risk": oom, "peaks": self._peaks(run, so, refused), "findings": findings,
                "inputs": {"steps_ops": so is not None, "oom_risk": oom is not None, "memory_profile": mp is not None,
                           "hlo": hlo is not None}}

    def _time_findings(self, run: Run, so: dict, link, refused: list[dict]) -> list[dict]:
        """The time rules on one host's Steps & ops, and where it has no step window or no
        device time, on the trace's device spans or the profile's step database."""
        found = analysis_time.time_findings(so, link)
        if so.get("source") == "chrome_trace" and not (so.get("summary") or {}).get("steps"):
            # a trace without ProfilerStep#N: the device's idle over its whole span
            spans = self._analysis_part(run, refused, "steps_ops", lambda: self._device_spans(run))
            found += analysis_time.span_findings(so, spans, link)
        if so.get("source") == "xplane" and run.kind is RunKind.PROFILE and so.get("host") in run.hosts:
            # a CPU-only profile's input time (XProf's step database), where no device time is
            step_db = self._analysis_part(run, refused, "steps", lambda: self.xplane_steps(run, so["host"])["step_db"])
            found += analysis_time.host_input_findings(so, step_db, link)
        return found

    def _peaks(self, run: Run, so: dict | None, refused: list[dict]) -> dict | None:
        """The device's peak FLOP/s and HBM bytes/s for the roofline, where its plane names
        both (XProf's ``peak_teraflops_per_second``, ``peak_hbm_bw_gigabytes_per_second``)."""
        if so is None or run.kind is not RunKind.PROFILE or not run.hosts:
            return None
        caps = self._analysis_part(run, refused, "device planes", lambda: self.device_capabilities(run, so.get("host")))
        cap = next((c for c in caps or [] if c.get("peak_teraflops_per_second")), None)
        if not cap or not cap.get("peak_hbm_bw_gigabytes_per_second"):
            return None
        return {"peak_flops_per_s": cap["peak_teraflops_per_second"] * 1e12,
                "peak_bytes_per_s": cap["peak_hbm_bw_gigabytes_per_second"] * 1e9}

    def _device_spans(self, run: Run) -> list[dict]:
        """Per device of a Chrome trace, HTA's temporal breakdown over its whole kernel span
        (tools/step_breakdown.py ``temporal``: first start to last end, the idle no
        activity covers), in µs, from the trace index Steps & ops read."""
        name, info, _pos = self._trace_hosts(run, TraceQuery())[0]
        k = step_breakdown.device_kernels(self.trace_index(run, name, info))
        out = []
        for dev in sorted(set(int(d) for d in k.device)):
            sel = k.device == dev
            tb = step_breakdown.temporal(k.start[sel], k.end[sel], sel[sel] & False)
            out.append({"device": dev, "kernels": int(sel.sum()), "span_us": round(tb["kernel_time"] / 1e6, 3),
                        "idle_us": round(tb["idle"] / 1e6, 3), "start_us": round(float(k.start[sel].min()) / 1e6, 3)})
        return out

    def _compiler_findings(self, run: Run, host: str | None, link, refused: list[dict]) -> list[dict] | None:
        """The compiler checks of the run's modules (one host's; None or ALL_HOSTS: every
        module once); None where the run has no modules to read. A module that cannot be
        read is listed in ``refused`` and the others are still checked."""
        if run.kind not in (RunKind.PROFILE, RunKind.XLA_DUMP):
            return None
        unread: list[dict] = []
        found = self._analysis_part(run, refused, "hlo",
                                    lambda: compiler_checks.hlo_findings_for(self, run, host, link, refused=unread))
        refused += [{"part": "hlo", **self._refused_row(run, r.get("file"), r.get("reason") or "")} for r in unread]
        return found

    def _analysis_all_hosts(self, run: Run, query: SummaryQuery, link, progress) -> dict:
        """Every host summarised on its own, then one summary: the worst host's metrics,
        each rule's most severe finding over the hosts (with how many hosts have it), the
        straggler host, and ``hosts[]`` (worst first; an unreadable host is a row naming
        its error)."""
        refused: list[dict] = []
        rows, by_host = [], {}
        for i, h in enumerate(run.hosts):
            if progress is not None:
                progress.update(i / len(run.hosts), f"host {h}")
            mine: list[dict] = []
            parts = self._analysis_parts(run, query, h, link, mine, None, compiler=False)
            refused += mine
            by_host[h] = parts
            so, oom = parts["steps_ops"], parts["oom_risk"]
            row = {"host": h, "status": analysis.status_of(parts["findings"]), "counts": analysis.counts(parts["findings"]),
                   "median_us": ((so or {}).get("summary") or {}).get("median_us"),
                   "collective_us": analysis_time.collective_per_step(so), "peak_bytes": (oom or {}).get("peakBytes")}
            if so is None and mine:
                row["error"] = mine[0]["reason"]
            rows.append(row)
        straggler = analysis_time.host_straggler_findings(rows, link)
        for f in straggler:
            # the straggler host's own row counts it: it is the host to look at first
            row = next(r for r in rows if r["host"] == f["host"])
            row["counts"][f["priority"]] += 1
            row["status"] = analysis.status_of([f]) if row["status"] == "OPTIMAL" else row["status"]
        ranked = analysis.hosts_rows(rows)
        worst = by_host[next((r["host"] for r in ranked if "error" not in r), ranked[0]["host"])]
        findings = _most_severe_per_rule([f for h in run.hosts for f in by_host[h]["findings"]], len(run.hosts))
        findings += straggler
        # every module of the run checked once (hosts share their programs)
        hlo = self._compiler_findings(run, ALL_HOSTS, link, refused)
        findings += hlo or []
        inputs = {k: any(by_host[h]["inputs"][k] for h in run.hosts) for k in ("steps_ops", "oom_risk", "memory_profile")}
        inputs["hlo"] = hlo is not None
        # memory: OOM risk's own rating of the run by its worst host (from the per-host
        # entries just made), not the slowest host's
        oom = self._analysis_part(run, [], "oom_risk", lambda: self._payload(run, "oom_risk", _oom_query(query, None)))
        return analysis.summarize({"run": run.name, "host": ALL_HOSTS, "steps_ops": worst["steps_ops"],
                                   "oom_risk": oom, "peaks": worst["peaks"], "findings": findings,
                                   "hosts": rows, "refused": refused, "inputs": inputs,
                                   "capture": self._capture_meta(run)})


def _oom_query(query: SummaryQuery, host: str | None) -> OomRiskQuery:
    """The OOM-risk part's query: the host, and the capacity the summary was asked with."""
    return OomRiskQuery(host=host, capacity_bytes=query.capacity_bytes, device_memory=query.device_memory)


def _most_severe_per_rule(findings: list[dict], n_hosts: int) -> list[dict]:
    """Each rule's most severe finding across the hosts (the order of tools/analysis.py
    ``sort_findings``) per title (a rule with findings of several titles, one per
    allocator say, keeps each), with an evidence row saying on how many hosts it fired: a
    finding on every host is one finding, not one per host."""
    out = []
    ranked = analysis.sort_findings(findings)
    for key in sorted({(f["id"], f["title"]) for f in findings}):
        same = [f for f in ranked if (f["id"], f["title"]) == key]
        hosts = sorted({f["host"] for f in same if f.get("host")})
        top = dict(same[0])
        top["evidence"] = top["evidence"] + [{"label": "hosts with this finding", "value": f"{len(hosts)} of {n_hosts}: "
                                              + ", ".join(hosts), "number": len(hosts), "link": None}]
        out.append(top)
    return out

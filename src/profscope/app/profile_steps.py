"""The steps of an xplane profile: profscope's step breakdown (the xplane half of
``/api/steps_ops``, tools/xplane_step_breakdown.py) and XProf's ``overview_page``
(tools/xprof_overview.py), both from one read of each host's file
(formats/xplane_step_events.py), kept per file identity under ``keys.XPLANE_STEPS``."""

from __future__ import annotations

from profscope.app import keys, lazy
from profscope.errors import NotFound, ProfscopeError
from profscope.model.catalog import Run

xplane_step_events = lazy.module("profscope.formats.xplane_step_events")
xplane_step_breakdown = lazy.module("profscope.tools.xplane_step_breakdown")
xprof_overview = lazy.module("profscope.tools.xprof_overview")

# XProf's merged host (server/xprof_api.py ALL_HOSTS); /api/steps_ops takes it too
ALL_HOSTS = "ALL_HOSTS"


def _read(f, path: str) -> dict:
    ev = xplane_step_events.read_step_events(f, path)
    step_db = {"hardware": ev.hardware, "device_type": ev.device_type, "device_count": len(ev.devices),
               "tf_data": ev.tf_data, "grouping": ev.grouping, "hostname": ev.hostname,
               "steps": [{**s, "type_ps": {str(k): v for k, v in s["type_ps"].items()}} for s in ev.steps]}
    return {"step_db": step_db, "breakdown": xplane_step_breakdown.breakdown(ev, ev.program_names)}


class ProfileSteps:
    """Part of :class:`~profscope.app.workspace.Workspace`: an xplane profile's steps."""

    def xplane_steps(self, run: Run, host: str | None) -> dict:
        """One host's ``{"step_db", "breakdown"}``, read once per file."""
        info = self.host_xplane(run, host, "steps")
        return self.derived_json(keys.XPLANE_STEPS, info, "reading the steps and device activities of",
                                 "steps and device time", _read)

    def xplane_steps_ops(self, run: Run, host: str) -> dict:
        """The step part of ``/api/steps_ops`` for an xplane run (its ``ops`` are added by
        the caller). ``host=ALL_HOSTS``: every host's breakdown, and ``hosts[]`` with the
        straggler host."""
        if host == ALL_HOSTS and ALL_HOSTS not in run.hosts:
            # a host whose file cannot be read is a row with its error (as /api/trace_hosts
            # lists it), not a 4xx for every host: the others are still compared; with no
            # readable host at all, the first one's error is the answer
            per_host, failed = [], {}
            for h in run.hosts:
                try:
                    per_host.append({"host": h, **self.xplane_steps(run, h)["breakdown"]})
                except ProfscopeError as e:
                    failed[h] = e
            if failed and not per_host:
                raise next(iter(failed.values()))
            rolled = xplane_step_breakdown.all_hosts(per_host)
            ok = {r["host"]: r for r in rolled["hosts"]}
            rolled["hosts"] = [ok[h] if h in ok else {"host": h, "status": "error", "reason": failed[h].message,
                                                       "file": failed[h].file, "steps": 0} for h in run.hosts]
            return {"host": ALL_HOSTS, "source": "xplane", "categories": per_host[0]["categories"] if per_host else [],
                    "summary": {"steps": sum(h["summary"]["steps"] for h in per_host), "hosts": len(run.hosts),
                                "unreadable": len(failed),
                                "step_source": per_host[0]["summary"]["step_source"] if per_host else "none"},
                    "steps": [], "per_host": per_host, **rolled}
        return self.xplane_steps(run, host)["breakdown"]

    def overview_page(self, run: Run, query, progress=None) -> list:
        """XProf's ``overview_page`` of one host, or with ``host=ALL_HOSTS`` of all the
        run's hosts merged as XProf merges them (tools/xprof_overview.py ``combine_hosts``)."""
        if query.host == ALL_HOSTS and ALL_HOSTS not in run.hosts:
            if not run.hosts:
                raise NotFound(f"run {run.name!r} has no xplane profile to read steps from")
            dbs = [self.xplane_steps(run, h)["step_db"] for h in run.hosts]
            return xprof_overview.overview_page(xprof_overview.combine_hosts(dbs))
        return xprof_overview.overview_page(self.xplane_steps(run, query.host)["step_db"])

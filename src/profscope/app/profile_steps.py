"""The steps of an xplane profile: profscope's step breakdown (the xplane half of
``/api/steps_ops``, tools/xplane_step_breakdown.py) and XProf's ``overview_page``
(tools/xprof_overview.py), both from one read of each host's file
(formats/xplane_step_events.py), kept per file identity under ``keys.XPLANE_STEPS``."""

from __future__ import annotations

import threading

import orjson

from profscope.app import keys, lazy
from profscope.errors import NotFound, ProfscopeError
from profscope.model.catalog import Run
from profscope.model.gc_pause import gc_paused

xplane_step_events = lazy.module("profscope.formats.xplane_step_events")
xplane_step_breakdown = lazy.module("profscope.tools.xplane_step_breakdown")
xprof_overview = lazy.module("profscope.tools.xprof_overview")

# XProf's merged host (server/xprof_api.py ALL_HOSTS); /api/steps_ops takes it too
ALL_HOSTS = "ALL_HOSTS"


# In a CPU-only xplane's trace index folder built for Steps & ops (app/traces.py
# ``trace_index(..., steps=True)``): its host steps, grouped by the build from the host
# plane it read (formats/xplane_trace.py); a timeline's build and older folders lack it.
HOST_STEPS_FILE = "host_steps.json"
# The index folder is kept per INDEX_VERSION, not per keys.XPLANE_STEPS: a change of the
# steps themselves (XProf's grouping, the host step database: formats/xplane_steps.py,
# xplane_step_events.py) bumps this too, and older files are then passed over for the reader.
HOST_STEPS_VERSION = 1


# The host steps of the last index build made in this process, by its index key, until
# read: Steps & ops builds the index, then reads its steps at once; in the same process
# (no conversion worker, or a worker's nested conversions) it takes them from here
# instead of loading the file just written back (44,000 steps: 0.1 s). One slot: a build
# in a forked worker fills the worker's, and the file is read.
_built: dict = {}
_BUILT_LOCK = threading.Lock()


def write_host_steps(folder, events, key: str | None = None) -> None:
    """The host steps the trace index build grouped (``TraceEvents.host_steps``), if
    any, into its index folder; and kept for :func:`_from_index` under the index's
    ``key``, if given."""
    steps = getattr(events, "host_steps", None)
    if steps is not None:
        saved = {"version": HOST_STEPS_VERSION, **steps}
        (folder / HOST_STEPS_FILE).write_bytes(orjson.dumps(saved))
        if key is not None:
            with _BUILT_LOCK:
                _built.clear()
                _built[key] = saved


def _from_index(folder, key: str | None = None):
    """:func:`read_step_events`' answer for a CPU-only profile from the host steps its
    index build grouped (the same fields: no device, no program names), or None. Its
    steps' ``type_ps`` keys stay strings, as the step database has them (44,000 steps'
    keys made ints and back cost 0.17 s; the breakdown does not read them). ``key``: the
    index's; its steps as this process's build kept them, if it did (the file's data,
    not loaded back)."""
    with _BUILT_LOCK:
        saved = _built.pop(key, None)
    try:
        if saved is None:
            saved = orjson.loads((folder / HOST_STEPS_FILE).read_bytes())
    except FileNotFoundError:
        return None
    if saved.get("version") != HOST_STEPS_VERSION:  # grouped by an older profscope's rules
        return None
    steps = saved["steps"]
    return xplane_step_events.StepEvents("CPU_ONLY", "CPU", [], steps, "grouped" if steps else "none",
                                         saved["first_ps"], False, {}, saved["hostname"])


def _answer(ev, keys_are_str: bool = False) -> dict:
    steps = ev.steps if keys_are_str else [{**s, "type_ps": {str(k): v for k, v in s["type_ps"].items()}}
                                           for s in ev.steps]
    step_db = {"hardware": ev.hardware, "device_type": ev.device_type, "device_count": len(ev.devices),
               "tf_data": ev.tf_data, "grouping": ev.grouping, "hostname": ev.hostname, "steps": steps}
    return {"step_db": step_db, "breakdown": xplane_step_breakdown.breakdown(ev, ev.program_names)}


def _read(f, path: str) -> dict:
    with gc_paused():  # tens of thousands of step dicts (model/gc_pause.py)
        return _answer(xplane_step_events.read_step_events(f, path))


class ProfileSteps:
    """Part of :class:`~profscope.app.workspace.Workspace`: an xplane profile's steps."""

    def xplane_steps(self, run: Run, host: str | None, *, load: bool = True) -> dict | None:
        """One host's ``{"step_db", "breakdown"}``, read once per file (``load=False``:
        only made, if it was not: app/traces.py ``_prefetch_steps``)."""
        info = self.host_xplane(run, host, "steps")
        # a CPU-only profile's trace index built by Steps & ops holds its steps: no second read
        index_key = self._trace_index_key(host or run.hosts[0], info)
        folder = self.cache.built_dir(index_key)
        read = _read
        if folder is not None and (folder / HOST_STEPS_FILE).is_file():
            def read(f, path):
                with gc_paused():
                    ev = _from_index(folder, index_key)
                    return _read(f, path) if ev is None else _answer(ev, keys_are_str=True)
        # (and the cached answer's JSON loaded back, where a worker made it: 44,000 steps'
        # dicts on the 308 MB profile; made here, the answer as made: plain JSON data)
        with gc_paused():
            return self.derived_json(keys.XPLANE_STEPS, info, "reading the steps and device activities of",
                                     "steps and device time", read, as_made=True, load=load)

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

"""Questions answered from a build's early preview while the full index is still sorted
(issue 40, "the preview becomes interactive"): a window inside the trace, one slice's
details, a search by name.

What a build publishes (tools/trace_index.py ``IndexWriter._write_preview``) is a small
index of its own: every event at least a tier bin of the page's first window long, and the
first shorter one of every (track, depth, bin), with the whole trace's tracks, depths,
span and event counts. So it answers the same calls as the full index
(tools/trace_viewer.py ``TraceView``), only from fewer slices: a zoomed window shows the
preview's slices clipped to it (coarse: the short ones arrive with the index), the details
of a slice are what the preview holds (name, start, duration, process › track; no
arguments: the preview is written without them) and a search finds the names of the
preview's slices. Ids are the preview's rows, not the index's: every answer says
``"preview": true`` and the page maps a selection to the index's slice once it lands.

No preview is a state, not an error (every trace page asks while its first window is on
its way; a 404 was a red line in every page's console):
``{"preview": false, "state": "pending" | "ready" | "several_hosts"}``, 200. A window that
is empty or wholly outside the trace is a 400 naming the file."""

from __future__ import annotations

from profscope.app import lazy
from profscope.app.queries import TraceQuery
from profscope.errors import BadRequest
from profscope.model.catalog import Run
from profscope.model.file_kinds import FileKind, classify

# numpy and the readers only once a preview is asked (tests/test_architecture.py: the
# server's first answers import neither)
xplane_trace = lazy.module("profscope.formats.xplane_trace")
trace_index = lazy.module("profscope.tools.trace_index")
trace_viewer = lazy.module("profscope.tools.trace_viewer")
PS_PER_MS = 10**9  # tools/trace_viewer.py's: the page's times are ms

# Said by every answer here, and shown by the page in its toolbar.
COARSE = "preview: coarse, the short slices arrive with the index"


def _state(run: Run, state: str, message: str) -> dict:
    return {"run": run.name, "preview": False, "state": state, "message": message}


def _open(ws, run: Run, query: TraceQuery) -> tuple:
    """(the preview as a one-host TraceView, None, file name), or (None, the state, name)
    when there is none: ``pending`` (its build has not got that far: ask again), ``ready``
    (the index is: ask the window) or ``several_hosts`` (a preview is one host's)."""
    chosen = ws._trace_hosts(run, query)
    if len(chosen) != 1:
        return None, _state(run, "several_hosts", "a preview is made of one host's trace only"), ""
    name, info, pos = chosen[0]
    key = ws._trace_index_key(name, info)
    if ws.cache.built_dir(key) is not None:
        return None, _state(run, "ready", f"no preview of {info.name}: its index is ready"), info.name
    try:
        ix = trace_index.TraceIndex(ws.cache.preview_dir(key), decoder=xplane_trace)
    except FileNotFoundError:
        # the build may have just finished and cleared its preview: say which
        if ws.cache.built_dir(key) is not None:
            return None, _state(run, "ready", f"no preview of {info.name}: its index is ready"), info.name
        return None, _state(run, "pending", f"no preview of {info.name} yet"), info.name
    # XProf numbers the one selected host 1 (pid = 1000 + device id), as the full view does
    offset = 1000 if classify(info.name) is FileKind.XPLANE else 0
    return trace_viewer.TraceView(run.name, [trace_viewer.HostIndex(pos, name, ix, offset)]), None, info.name


def _marked(answer: dict) -> dict:
    return {**answer, "preview": True, "coarse": COARSE}


def _from_preview(ws, run: Run, query: TraceQuery, answer) -> dict:
    """``answer(view, file name)`` from the preview, or the state when there is none. The
    build may finish and clear its preview while an answer reads it: the preview's
    columns are memory-mapped when first used (tools/trace_index.py ``TraceIndex``), so a
    file can be gone between opening the preview and reading it (a FileNotFoundError, a
    500, seen once in a browser test polling during a build). Then the answer is the
    state as it is now (``ready``), not an error."""
    view, state, file = _open(ws, run, query)
    if view is None:
        return state
    try:
        return answer(view, file)
    except FileNotFoundError:
        again, state, _file = _open(ws, run, query)
        if again is None:
            return state
        raise


def window(ws, run: Run, query: TraceQuery) -> dict:
    """``start_ms``..``end_ms`` (absent: the whole trace) from the preview: its slices
    overlapping the window at ``resolution``, the whole trace's tracks and counts
    (``totalEventsSize``: the whole trace's events, as the index will say). Empty or
    wholly outside the trace: 400 naming the file."""

    def answer(view, file: str) -> dict:
        ix = view.hosts[0].index
        # the preview's tracks carry the whole trace's event counts
        total = sum(t["events"] for t in ix.tracks)
        if query.start_ms is None and query.end_ms is None:  # the page's first picture
            return {**view.window(None, None, query.resolution), "preview": True, "totalEventsSize": total}
        s, e = view.span_ps(query.start_ms, query.end_ms)  # end before start: 400
        if e <= 0 or s >= view.end_ps:
            raise BadRequest(f"the window {query.start_ms}–{query.end_ms} ms lies outside the trace of {file} "
                             f"(0–{view.end_ps / PS_PER_MS:g} ms)")
        return _marked({**view.window(query.start_ms, query.end_ms, query.resolution), "totalEventsSize": total,
                        "previewEventsSize": ix.n})

    return _from_preview(ws, run, query, answer)


def event(ws, run: Run, query: TraceQuery) -> dict:
    """One preview slice (``id`` from a preview window or search): what the preview holds
    of it, name, start, duration, depth and process › track. Its arguments and links to
    the other tools come from the index (``/api/trace/event``): the preview has none."""
    if query.id is None:
        raise BadRequest("missing parameter 'id' (an event id from /api/trace/preview)")

    def answer(view, _file: str) -> dict:
        return _marked(view.event_slice(query.id))  # an id past the preview's rows: 404

    return _from_preview(ws, run, query, answer)


def search(ws, run: Run, query: TraceQuery) -> dict:
    """The preview's slices whose name holds ``q`` (TraceView.search's order and paging):
    ``total`` counts the preview's matches only (``previewEventsSize`` of the whole
    trace's ``totalEventsSize`` events are in it)."""

    def answer(view, _file: str) -> dict:
        ix = view.hosts[0].index
        found = view.search(query.q, query.limit, query.offset)  # no q: 400
        return _marked({**found, "previewEventsSize": ix.n, "totalEventsSize": sum(t["events"] for t in ix.tracks)})

    return _from_preview(ws, run, query, answer)

"""What ``profscope report`` shows, collected: the runs the OOM risk can assess, one
assessment payload per run (and per device of a snapshot: the data API's ``tag=oom_risk``,
tools/oom_risk.py), worst first; the files it refused (they cannot be read); the runs it
did not assess (they read, but hold nothing it measures: a PyTorch trace without
``[memory]`` events). Files are named by their path in the log directory, as the run list
names them. :func:`document` is the report as plain data (its JSON output);
frontend/oom_report.py renders it."""

from __future__ import annotations

import gzip
import json

from profscope.app import lazy
from profscope.app.queries import OomRiskQuery
from profscope.app.workspace import Workspace
from profscope.app.unsupported_files import not_read_note
from profscope.errors import BadRequest, NothingToAssess, NotFound, ProfscopeError
from profscope.model.catalog import Run, RunKind

oom_risk = lazy.module("profscope.tools.oom_risk")


def assessable(ws: Workspace, run: Run) -> bool:
    """Whether the OOM risk has something to read in ``run`` (it is made for every run
    kind: the workspace's tools of a run are the ones with an input there)."""
    return ws.tool_named("oom_risk") in ws.tools(run)


def pick_runs(ws: Workspace, run_name: str | None, file: str | None = None, refused: list[dict] | None = None) -> list[Run]:
    """The runs to report: ``run_name``, the run holding ``file`` (a path relative to the
    log directory), or every run the OOM-risk tool can assess. With ``refused`` (a list),
    a run whose files cannot even be listed (a corrupt profile) goes there instead of
    stopping the others."""
    if run_name:
        run = ws.run(run_name)
        if not assessable(ws, run):
            raise BadRequest(f"run {run.name!r} is a {run.kind.value}: the OOM risk has nothing to read there")
        return [run]
    runs = ws.runs()
    if file is not None:
        runs = [r for r in runs if any(f.path == file for f in r.files)]
        if not runs:
            raise NotFound(f"{file}: not part of any run profscope recognises"
                           + not_read_note(ws.logdir.listing(), ws.runs(), file))
    kept = []
    for r in runs:
        try:
            if assessable(ws, r):
                kept.append(r)
        except ProfscopeError as e:
            if refused is None:
                raise
            refused.append(_refusal(ws, r, None, e))
    runs = kept
    if not runs and refused:
        raise ProfscopeError(f"nothing could be read: {len(refused)} run(s) refused: "
                             + "; ".join(f"{x['file']}: {x['problem']}" for x in refused))
    if not runs:
        raise NotFound(f"no run in {ws.logdir.url} that the OOM risk can assess (profiles, XLA dumps, PyTorch snapshots "
                       "and traces)" + not_read_note(ws.logdir.listing(), ws.runs()))
    return runs


def collect(ws: Workspace, runs: list[Run], query: OomRiskQuery, refused: list[dict] | None = None,
            not_assessed: list[dict] | None = None) -> list[dict]:
    """One payload per run (and per device of a snapshot), with ``run``/``host`` added. A
    multi-host profile is one payload: the workspace rates it by its worst host and lists
    every host under ``hosts``. With ``refused`` (a list), a run whose file is refused
    (an unsafe pickle, a corrupt profile) is appended there as ``{run, host, file,
    problem}`` and the others are still reported; with ``not_assessed``, a run that reads
    but holds nothing to assess (:class:`~profscope.errors.NothingToAssess`) goes there in
    the same shape. Without the lists, the first such error is raised."""
    out = []
    tool = ws.tool_named("oom_risk")
    for run in runs:
        try:
            hosts = [query.host] if query.host else (ws.hosts(run) if run.kind is RunKind.TORCH_SNAPSHOT and not run.ranks else [None])
        except ProfscopeError as e:
            if refused is None:
                raise
            refused.append(_refusal(ws, run, None, e))
            continue
        for host in hosts:
            try:
                payload = json.loads(gzip.decompress(ws.tool_data(run, tool, query.but(host=host))))
            except NothingToAssess as e:
                if not_assessed is None:
                    raise
                not_assessed.append(_refusal(ws, run, host, e))
                continue
            except ProfscopeError as e:
                if refused is None:
                    raise
                refused.append(_refusal(ws, run, host, e))
                continue
            out.append({"run": run.name, "kind": run.kind.value, "host": host, **payload})
    return out


def _refusal(ws: Workspace, run: Run, host: str | None, e: ProfscopeError) -> dict:
    xplane = run.xplane(host) if host and run.kind is RunKind.PROFILE else None
    # An error names its file as messages do (LogDir.display_path: the log directory's URL
    # and the path in it); the report names it by the path in the log directory, as the
    # run list does. The run's own files map one to the other (a mounted capture folder's
    # too, whose display path is its own folder's).
    shown = {ws.logdir.display_path(f.path): f.path for f in run.files}
    file = shown.get(e.file, e.file) if e.file else (xplane.path if xplane else run.files[0].path if len(run.files) == 1 else run.name)
    problem = e.message
    # Messages often start with the file's own path: say it once, in ``file``.
    head, sep, rest = problem.partition(": ")
    if sep and (head.endswith(file) or file.endswith(head.rsplit("/", 1)[-1]) or head == f"run {run.name!r}"):
        problem = rest
    return {"run": run.name, "host": host, "file": file, "problem": problem}


def worst(reports: list[dict]) -> str:
    return max((r["risk"] for r in reports), key=lambda k: oom_risk.RANK[k], default="UNKNOWN")


def ordered(reports: list[dict]) -> list[dict]:
    """Worst first: by tier, then by how full the device is, then by peak."""
    return sorted(reports, key=lambda r: (-oom_risk.RANK[r["risk"]], -(r.get("utilization") or 0), -(r.get("peakBytes") or 0),
                                          r["run"], r.get("host") or ""))


def document(reports: list[dict], refused: list[dict], not_assessed: list[dict] | None = None) -> dict:
    """The report as plain data: the worst ``risk``, the ``reports`` worst first, the
    ``refused`` files and the runs ``notAssessed`` (each ``{run, host, file, problem}``).
    ``profscope report --format json`` prints it as it is."""
    return {"risk": worst(reports), "reports": ordered(reports), "refused": refused, "notAssessed": not_assessed or []}

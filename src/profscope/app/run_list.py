"""The run lists as plain data: ``/api/runs`` (the dashboard's) and the runs of a log
directory. Built here, not in the routers, because ``profscope serve`` answers the run
lists before FastAPI and the workspace are imported (server/quick_start.py) as well as
from its routes (server/api.py, server/xprof_api.py): one body for both."""

from __future__ import annotations

from profscope.app.discovery import discover
from profscope.app.unsupported_files import unsupported_files
from profscope.model.catalog import Run
from profscope.model.file_kinds import RANK_RULE
from profscope.storage import LogDir
from profscope.storage.mounted import MountedLogDir

CAPTURES = "captures"  # where captured runs appear in the run list (else captures-profscope, ...)


def served_logdir(logdir: LogDir, captures: LogDir | None) -> tuple[LogDir | MountedLogDir, str | None]:
    """``logdir`` as a workspace serves it, and the name its captures are under: the
    capture folder (``captures``, a log directory of its own) mounted at a top-level name
    the log directory does not use; ``logdir`` itself when nothing is captured. The
    workspace and the server's quick start (server/quick_start.py) both list runs here."""
    if captures is None:
        return logdir, None
    mount = MountedLogDir.free_name(logdir, CAPTURES)
    return MountedLogDir(logdir, {mount: captures}), mount


def runs_of(logdir: LogDir) -> list[Run]:
    """Every run of ``logdir`` (``Workspace.runs``)."""
    return discover(logdir.listing())


def run_summary(run: Run) -> dict:
    return {
        "name": run.name,
        "kind": run.kind.value,
        "folder": run.folder,
        "hosts": run.hosts,
        "fileCount": len(run.files),
        "totalBytes": sum(f.size for f in run.files),
        # a distributed job (app/discovery.py): its ranks, in rank order, and the rule that grouped them
        "job": {"ranks": list(run.ranks), "rule": RANK_RULE} if run.ranks else None,
    }


def runs_listing(logdir: LogDir, runs: list[Run]) -> dict:
    """``/api/runs``: ``runs`` (:func:`runs_of`), and the files profscope recognises but
    does not read, each with why (never dropped unsaid)."""
    unsupported = unsupported_files(logdir.listing(), runs)
    return {"logdir": logdir.url, "runs": [run_summary(run) for run in runs], "unsupported": unsupported}

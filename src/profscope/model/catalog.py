"""Runs: what a log directory holds, named the way XProf names it.

XProf (plugin/xprof/profile_plugin.py, ``generate_runs``) finds every folder
``<tb_run>/plugins/profile/<session>/`` below the log directory; the session is a run
named ``<tb_run>/<session>``, or just ``<session>`` when ``<tb_run>`` is the root, and
``runs`` lists them sorted in reverse (newest timestamp-named session first). A run's
hosts are its ``<host>.xplane.pb`` files.

profscope adds runs XProf does not know, named by their path below the log directory:
a folder of XLA dump files (``*.hlo.pb``, ``*-buffer-assignment.txt``), a PyTorch memory
snapshot (``*.pickle``), a Chrome trace outside any profile session: ``*.trace.json[.gz]``
by name, and any other ``*.json[.gz]`` (``trace.json``, ``rank-0.json.gz``) whose first
bytes show a Chrome trace. A trace's companion ``<stem>.memory_timeline.json[.gz]``
joins its run. This module holds the types and the naming rules; finding the runs of a
listing, which looks inside some files, is app/discovery.py.

Run names are looked up in the catalog, never joined onto a path, so a name from a URL
can only ever select one of the runs listed here.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field

from profscope.model import dump_layout
from profscope.model.file_kinds import FileKind, classify, xplane_host
from profscope.storage import FileInfo

PLUGINS_DIR, PROFILE_DIR = "plugins", "profile"


class RunKind(enum.Enum):
    PROFILE = "profile"  # an XProf profile session folder
    XLA_DUMP = "xla_dump"  # a folder of XLA dump files
    TORCH_SNAPSHOT = "torch_snapshot"  # one PyTorch memory snapshot file
    CHROME_TRACE = "chrome_trace"  # one Chrome trace JSON file
    # JAX device-memory profiles (gzipped pprof): one file, or a folder's successive ones
    PPROF = "pprof"


@dataclass(slots=True)
class Run:
    name: str
    kind: RunKind
    folder: str  # relative path of the session / dump folder, or of the single file's folder
    files: list[FileInfo] = field(default_factory=list)
    # kinds found by looking inside a file (a sniffed Chrome trace), by path; the name decides the rest
    kinds: dict[str, FileKind] = field(default_factory=dict)
    # One distributed job (app/discovery.py, docs/runs.md): each rank's own run, exactly
    # as discovery makes it for that file alone, by rank host name in rank order. The
    # ranks are the run's hosts; ``host=<rank>`` reads that rank's run.
    ranks: dict[str, Run] = field(default_factory=dict)

    def kind_of(self, info: FileInfo) -> FileKind:
        return self.kinds.get(info.path) or classify(info.name)

    def files_of(self, kind: FileKind) -> list[FileInfo]:
        return [f for f in self.files if self.kind_of(f) is kind]

    @property
    def hosts(self) -> list[str]:
        """XProf's hosts: one per ``<host>.xplane.pb`` in the session, sorted; a
        distributed job's ranks."""
        if self.kind is RunKind.PROFILE:
            return sorted({h for f in self.files if (h := xplane_host(f.name))})
        return list(self.ranks)

    def rank_run(self, host: str | None) -> Run | None:
        """The run of one rank of a distributed job (``host`` a rank name), else None."""
        return self.ranks.get(host) if host else None

    def xplane(self, host: str) -> FileInfo | None:
        return next((f for f in self.files if xplane_host(f.name) == host), None)

    def dump_modules(self) -> list[dump_layout.DumpModule]:
        return dump_layout.modules([f.name for f in self.files]) if self.kind is RunKind.XLA_DUMP else []

    def file(self, name: str) -> FileInfo | None:
        return next((f for f in self.files if f.name == name), None)


def session_of(path: str) -> tuple[str, str] | None:
    """'a/b/plugins/profile/S/x' -> ('a/b', 'S'); None when not directly in a session."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[-3] == PROFILE_DIR and parts[-4] == PLUGINS_DIR:
        return "/".join(parts[:-4]), parts[-2]
    return None


def session_dir(path: str) -> tuple[str, str] | None:
    """'a/b/plugins/profile/S' -> ('a/b', 'S') for a session folder itself."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[-2] == PROFILE_DIR and parts[-3] == PLUGINS_DIR:
        return "/".join(parts[:-3]), parts[-1]
    return None


def run_name(tb_run: str, session: str) -> str:
    return f"{tb_run}/{session}" if tb_run else session

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
bytes show a Chrome trace (formats/sniff.py). Those are read through ``Listing.head``
(at most :data:`~profscope.formats.sniff.HEAD_BYTES`, only for names nothing else claims)
and remembered in ``Listing.notes`` per file identity, so listing again reads nothing. A
trace's companion ``<stem>.memory_timeline.json[.gz]`` joins its run.

Run names are looked up in the catalog, never joined onto a path, so a name from a URL
can only ever select one of the runs listed here.
"""

from __future__ import annotations

import enum
import posixpath
from dataclasses import dataclass, field

import logging

from profscope.formats import sniff
from profscope.model import dump_layout
from profscope.model.file_kinds import (
    MEMORY_TIMELINE_SUFFIXES,
    FileKind,
    classify,
    may_be_chrome_trace,
    trace_stem,
    xplane_host,
)
from profscope.storage import FileInfo, Listing

PLUGINS_DIR, PROFILE_DIR = "plugins", "profile"
log = logging.getLogger(__name__)


class RunKind(enum.Enum):
    PROFILE = "profile"  # an XProf profile session folder
    XLA_DUMP = "xla_dump"  # a folder of XLA dump files
    TORCH_SNAPSHOT = "torch_snapshot"  # one PyTorch memory snapshot file
    CHROME_TRACE = "chrome_trace"  # one Chrome trace JSON file


@dataclass(slots=True)
class Run:
    name: str
    kind: RunKind
    folder: str  # relative path of the session / dump folder, or of the single file's folder
    files: list[FileInfo] = field(default_factory=list)
    # kinds found by looking inside a file (a sniffed Chrome trace), by path; the name decides the rest
    kinds: dict[str, FileKind] = field(default_factory=dict)

    def kind_of(self, info: FileInfo) -> FileKind:
        return self.kinds.get(info.path) or classify(info.name)

    def files_of(self, kind: FileKind) -> list[FileInfo]:
        return [f for f in self.files if self.kind_of(f) is kind]

    @property
    def hosts(self) -> list[str]:
        """XProf's hosts: one per ``<host>.xplane.pb`` in the session, sorted."""
        if self.kind is RunKind.PROFILE:
            return sorted({h for f in self.files if (h := xplane_host(f.name))})
        return []

    def xplane(self, host: str) -> FileInfo | None:
        return next((f for f in self.files if xplane_host(f.name) == host), None)

    def dump_modules(self) -> list[dump_layout.DumpModule]:
        return dump_layout.modules([f.name for f in self.files]) if self.kind is RunKind.XLA_DUMP else []

    def file(self, name: str) -> FileInfo | None:
        return next((f for f in self.files if f.name == name), None)


def _session_of(path: str) -> tuple[str, str] | None:
    """'a/b/plugins/profile/S/x' -> ('a/b', 'S'); None when not directly in a session."""
    parts = path.split("/")
    if len(parts) >= 4 and parts[-3] == PROFILE_DIR and parts[-4] == PLUGINS_DIR:
        return "/".join(parts[:-4]), parts[-2]
    return None


def _session_dir(path: str) -> tuple[str, str] | None:
    """'a/b/plugins/profile/S' -> ('a/b', 'S') for a session folder itself."""
    parts = path.split("/")
    if len(parts) >= 3 and parts[-2] == PROFILE_DIR and parts[-3] == PLUGINS_DIR:
        return "/".join(parts[:-3]), parts[-1]
    return None


def _run_name(tb_run: str, session: str) -> str:
    return f"{tb_run}/{session}" if tb_run else session


def _sniffed_trace(listing: Listing, info: FileInfo) -> bool:
    """Whether a ``*.json[.gz]`` nothing else claims starts like a Chrome trace; looked up
    in ``listing.notes`` first, so each version of a file is read once."""
    if listing.head is None:
        return False
    key = ("chrome_trace_head", info.identity())
    known = listing.notes.get(key)
    if known is None:
        try:
            known = sniff.is_chrome_trace(listing.head(info, sniff.HEAD_BYTES))
        except Exception as e:  # noqa: BLE001 - unreadable (gone, no permission): not a run
            log.debug("cannot read the start of %s: %s", info.path, e)
            return False  # not remembered: it may be readable next time
        listing.notes[key] = known
    return known


def discover(listing: Listing) -> list[Run]:
    """All runs of a log directory listing, in XProf's order (names sorted descending)."""
    runs: dict[str, Run] = {}

    # XProf lists a session folder even when it holds no profile yet.
    for d in listing.dirs:
        where = _session_dir(d)
        if where is not None:
            name = _run_name(*where)
            runs.setdefault(name, Run(name, RunKind.PROFILE, d))

    dump_folders: dict[str, list[FileInfo]] = {}
    extra: list[Run] = []
    for info in listing.files.values():
        where = _session_of(info.path)
        if where is not None:
            name = _run_name(*where)
            run = runs.setdefault(name, Run(name, RunKind.PROFILE, info.parent))
            run.files.append(info)
            continue
        kind = classify(info.name)
        if dump_layout.is_dump_file(info.name) or kind is FileKind.HLO_TEXT:
            dump_folders.setdefault(info.parent, []).append(info)
        elif kind is FileKind.TORCH_SNAPSHOT:
            extra.append(Run(info.path, RunKind.TORCH_SNAPSHOT, info.parent, [info]))
        elif kind is FileKind.CHROME_TRACE or may_be_chrome_trace(info.name) and _sniffed_trace(listing, info):
            files = [info]
            stem = posixpath.join(info.parent, trace_stem(info.name) or "")
            # export_memory_timeline writes gzip when its path ends in .gz
            timeline = next((t for s in MEMORY_TIMELINE_SUFFIXES if (t := listing.files.get(stem + s))), None)
            if timeline is not None:
                files.append(timeline)
            kinds = {} if kind is FileKind.CHROME_TRACE else {info.path: FileKind.CHROME_TRACE}
            extra.append(Run(info.path, RunKind.CHROME_TRACE, info.parent, files, kinds))

    for folder, files in dump_folders.items():
        run = Run(folder or ".", RunKind.XLA_DUMP, folder, files)
        if run.dump_modules():
            extra.append(run)

    for run in extra:
        name = run.name
        if name in runs:  # a path that happens to equal a profile run's name
            name = f"{name} [{run.kind.value}]"
            run.name = name
        runs[name] = run

    for run in runs.values():
        run.files.sort(key=lambda f: f.path)
    return [runs[name] for name in sorted(runs, reverse=True)]

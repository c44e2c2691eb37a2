"""Finding the runs of a log directory listing (the types and naming rules are
model/catalog.py): profile sessions and dump folders by their layout, snapshots and
Chrome traces by name, and any other ``*.json[.gz]`` (``trace.json``, ``rank-0.json.gz``)
whose first bytes show a Chrome trace (formats/sniff.py). Those bytes are read through
``Listing.head`` (at most :data:`~profscope.formats.sniff.HEAD_BYTES`, only for names
nothing else claims) and remembered in ``Listing.notes`` per file identity, so listing
again reads nothing."""

from __future__ import annotations

import logging
import posixpath

from profscope.formats import pprof_head, sniff
from profscope.model import dump_layout
from profscope.model.catalog import Run, RunKind, run_name, session_dir, session_of
from profscope.model.file_kinds import (MEMORY_TIMELINE_SUFFIXES, FileKind, classify, may_be_chrome_trace, may_be_pprof,
                                       rank_of, trace_stem)
from profscope.storage import FileInfo, Listing

log = logging.getLogger(__name__)


def _sniffed_trace(listing: Listing, info: FileInfo, what: str = "chrome_trace_head", test=sniff.is_chrome_trace) -> bool:
    """Whether a ``*.json[.gz]`` nothing else claims starts like a Chrome trace (or, with
    ``test=pprof_head.is_pprof_head``, a ``*.prof`` like a gzipped pprof Profile); looked up in
    ``listing.notes`` first, so each version of a file is read once."""
    if listing.head is None:
        return False
    key = (what, info.identity())
    known = listing.notes.get(key)
    if known is None:
        try:
            known = test(listing.head(info, sniff.HEAD_BYTES))
        except Exception as e:  # noqa: BLE001 - unreadable (gone, no permission): not a run
            log.debug("cannot read the start of %s: %s", info.path, e)
            return False  # not remembered: it may be readable next time
        listing.notes[key] = known
    return known


def _rank_groups(runs: list[Run]) -> list[Run]:
    """Single-file snapshot and trace runs whose paths differ only by a rank token
    (model/file_kinds.py ``rank_of``) made one run per job: named by the path with ``*``
    for the rank number, its hosts the ranks in rank order, each rank's run kept whole in
    ``Run.ranks`` (so a rank's answers are the file's own). Two or more ranks of the same
    run kind and template group; anything else stays as it was."""
    groups: dict[tuple[RunKind, str], list[tuple[int, str, Run]]] = {}
    for run in runs:
        where = rank_of(run.name) if run.kind in (RunKind.TORCH_SNAPSHOT, RunKind.CHROME_TRACE) else None
        if where is not None:
            template, rank = where
            groups.setdefault((run.kind, template), []).append((int("".join(c for c in rank if c.isdigit())), rank, run))
    grouped: dict[int, Run] = {}
    for (kind, template), members in groups.items():
        # two files of one rank number (rank1 and rank01) are not one job's ranks
        if len(members) < 2 or len({number for number, _, _ in members}) < len(members):
            continue
        members.sort(key=lambda m: (m[0], m[1]))
        # the ranks' folder, or the one above per-rank folders (tr/rank_0/x, tr/rank_1/x -> tr)
        folder = posixpath.dirname(posixpath.commonprefix([r.name for _, _, r in members]))
        job = Run(template, kind, folder, [f for _, _, r in members for f in r.files],
                  {k: v for _, _, r in members for k, v in r.kinds.items()}, {rank: r for _, rank, r in members})
        for _, _, r in members:
            grouped[id(r)] = job
    out, seen = [], set()
    for run in runs:
        job = grouped.get(id(run), run)
        if id(job) not in seen:
            seen.add(id(job))
            out.append(job)
    return out


def discover(listing: Listing) -> list[Run]:
    """All runs of a log directory listing, in XProf's order (names sorted descending)."""
    runs: dict[str, Run] = {}

    # XProf lists a session folder even when it holds no profile yet.
    for d in listing.dirs:
        where = session_dir(d)
        if where is not None:
            name = run_name(*where)
            runs.setdefault(name, Run(name, RunKind.PROFILE, d))

    dump_folders: dict[str, list[FileInfo]] = {}
    pprof_folders: dict[str, list[FileInfo]] = {}
    extra: list[Run] = []
    for info in listing.files.values():
        where = session_of(info.path)
        if where is not None:
            name = run_name(*where)
            run = runs.setdefault(name, Run(name, RunKind.PROFILE, info.parent))
            run.files.append(info)
            continue
        kind = classify(info.name)
        if dump_layout.is_dump_file(info.name) or kind is FileKind.HLO_TEXT:
            dump_folders.setdefault(info.parent, []).append(info)
        elif kind is FileKind.TORCH_SNAPSHOT:
            extra.append(Run(info.path, RunKind.TORCH_SNAPSHOT, info.parent, [info]))
        elif may_be_pprof(info.name) and _sniffed_trace(listing, info, "pprof_head", pprof_head.is_pprof_head):
            pprof_folders.setdefault(info.parent, []).append(info)
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

    # A folder's pprof files are successive profiles of one job (save_device_memory_profile
    # called again and again): one run, named by the file when it is alone
    for folder, files in pprof_folders.items():
        name = files[0].path if len(files) == 1 else (folder or ".")
        extra.append(Run(name, RunKind.PPROF, folder, files,
                         {f.path: FileKind.DEVICE_MEMORY_PROFILE for f in files}))

    for run in _rank_groups(extra):
        name = run.name
        if name in runs:  # a path that happens to equal a profile run's name
            name = f"{name} [{run.kind.value}]"
            run.name = name
        runs[name] = run

    for run in runs.values():
        for one in (run, *run.ranks.values()):  # a rank's run as it would be alone
            one.files.sort(key=lambda f: f.path)
    return [runs[name] for name in sorted(runs, reverse=True)]

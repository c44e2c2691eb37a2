"""Files profscope recognises but does not read, each with the reason: the run list's
"recognised, not read" section (``/api/runs``' ``unsupported``, ``profscope runs``, the
dashboard's run list).

Discovery (app/discovery.py) makes runs of what it reads and passes over the rest; a file
whose name (model/file_kinds.py) or first bytes say what it is, but that is in no run or
that its run cannot read, must not vanish without a word. Which of those there are:

============================  ==========================================================
kind                          listed when
============================  ==========================================================
``xplane``                    outside ``<logdir>/**/plugins/profile/<session>/`` (XProf
                              reads XSpaces only there, profile_plugin.py)
``xplane_riegeli``            always: ``<host>.xplane.riegeli`` (XProf lists it beside
                              ``*.xplane.pb``) is not read; no PyPI writer of it exists
                              (jaxlib 0.10.2 and xprof 2.24.2 write ``*.xplane.pb`` only)
XLA dump files                no module of theirs can be read (named off XLA's
                              ``module_<id>.<name>.<stage>`` pattern, or text modules
                              without an HloProto / buffer assignment / usage report)
``memory_timeline``           no Chrome trace of the same stem beside it
``device_memory_profile``     in no run: a ``*.prof`` whose head is no gzipped pprof
                              ``Profile`` (a cProfile dump); a JAX one is a run
``torch_snapshot``            its pickle protocol is one the snapshot reader refuses
                              (2..5 are read; formats/snapshot_pickle.py)
any recognised kind           a git-LFS pointer stands where the file should be
============================  ==========================================================

Only small heads are read, through ``Listing.head`` and remembered per file version in
``Listing.notes`` (as discovery does): an LFS pointer is a ~130-byte text file, so only
files of at most :data:`LFS_POINTER_MAX` bytes are looked into for one; a snapshot's
protocol is its pickle's second byte (``PROTO n``), gzipped or not.
"""

from __future__ import annotations

import logging
import zlib

from profscope.model.catalog import Run, RunKind
from profscope.model.file_kinds import DUMP_KINDS, FileKind, classify
from profscope.storage import FileInfo, Listing

log = logging.getLogger(__name__)

#: The git-LFS spec's first line: a clone without ``git lfs pull`` leaves this text file.
LFS_POINTER = b"version https://git-lfs.github.com/spec/v1"
#: An LFS pointer is three short lines (version, oid sha256:<64 hex>, size): ~130 bytes.
LFS_POINTER_MAX = 1024
#: Pickle protocols the snapshot reader reads (formats/snapshot_pickle.py: 2 <= p <= 5).
PICKLE_PROTOCOLS = range(2, 6)
_HEAD = 64

REASONS = {
    FileKind.XPLANE: ("an XSpace outside a profile session folder: profscope, like XProf, reads "
                      "<host>.xplane.pb only inside <logdir>/**/plugins/profile/<session>/ "
                      "(move it into such a folder)"),
    FileKind.XPLANE_RIEGELI: ("a riegeli-framed XSpace: not read (riegeli record files are not supported; "
                              "jax.profiler and xprof write the same XSpace as <host>.xplane.pb, which is)"),
    FileKind.MEMORY_TIMELINE: ("a PyTorch memory timeline is read beside its Chrome trace "
                               "<stem>.pt.trace.json[.gz] or <stem>.json[.gz] in the same folder: none found"),
    # A *.prof whose head is a gzipped pprof Profile is a run (formats/pprof.py); what is
    # left is named like jax.profiler.save_device_memory_profile's files but holds no Profile.
    FileKind.DEVICE_MEMORY_PROFILE: ("named like a JAX device-memory profile (*.prof), but not a gzipped "
                                     "pprof Profile, the only kind of *.prof profscope reads (cProfile writes *.prof too)"),
}
_DUMP_REASON = ("an XLA dump file from which no module can be read: a module needs XLA's dump name "
                "module_<id>.<name>.<stage>… and an HloProto (*.hlo.pb), buffer assignment or "
                "memory-usage report (dump with --xla_dump_hlo_as_proto)")


def _head(listing: Listing, info: FileInfo) -> bytes | None:
    """The file's first bytes, remembered per version; None when unreadable (not remembered:
    it may be readable next time) or when the listing cannot read files."""
    if listing.head is None:
        return None
    key = ("unsupported_head", info.identity())
    known = listing.notes.get(key)
    if known is None:
        try:
            known = listing.head(info, _HEAD)
        except Exception as e:  # noqa: BLE001 - gone, no permission: nothing to say about it
            log.debug("cannot read the start of %s: %s", info.path, e)
            return None
        listing.notes[key] = known
    return known


def _pickle_protocol(head: bytes) -> int | None:
    """A pickle's protocol from its first bytes (``\\x80`` PROTO n), gzipped or not."""
    if head[:2] == b"\x1f\x8b":
        try:  # a head cut short decompresses as far as it goes
            head = zlib.decompressobj(16 + zlib.MAX_WBITS).decompress(head, 2)
        except zlib.error:
            return None
    return head[1] if len(head) > 1 and head[0] == 0x80 else None


def _content_reason(listing: Listing, info: FileInfo, kind: FileKind) -> str | None:
    """Why a file that its name claims cannot be read, from its first bytes; None if fine."""
    if info.size > LFS_POINTER_MAX and kind is not FileKind.TORCH_SNAPSHOT:
        return None
    head = _head(listing, info)
    if head is None:
        return None
    if head.startswith(LFS_POINTER):
        return ("a git-LFS pointer, not the file: it stands for an object kept by git-LFS "
                "(run `git lfs pull` to fetch it)")
    if kind is FileKind.TORCH_SNAPSHOT:
        protocol = _pickle_protocol(head)
        if protocol is not None and protocol not in PICKLE_PROTOCOLS:
            return (f"a pickle of protocol {protocol}: the snapshot reader reads protocols "
                    f"{PICKLE_PROTOCOLS.start}-{PICKLE_PROTOCOLS.stop - 1} (the ones torch.save and pickle write today)")
    return None


def _unread_dump_files(run: Run) -> list[FileInfo]:
    """A dump folder's files that no module of it reads: off XLA's naming, or modules with
    nothing a memory tool reads (dump_layout.modules keeps only those)."""
    read = {name for m in run.dump_modules() for name in m.files.values()}
    return [f for f in run.files if f.name not in read and classify(f.name) in DUMP_KINDS]


def unsupported_files(listing: Listing, runs: list[Run]) -> list[dict]:
    """``{file, kind, reason, run}`` for each recognised file that is not read, by path;
    ``run`` names the run the file is part of, or is None."""
    owner = {f.path: run for run in runs for f in run.files}
    found: dict[str, dict] = {}

    def add(info: FileInfo, kind: FileKind | str, reason: str) -> None:
        run = owner.get(info.path)
        found.setdefault(info.path, {"file": info.path, "kind": getattr(kind, "value", kind), "reason": reason,
                                     "run": run.name if run is not None else None})

    for info in listing.files.values():
        run = owner.get(info.path)
        kind = run.kind_of(info) if run is not None else classify(info.name)
        if kind is FileKind.OTHER:
            continue
        if (reason := _content_reason(listing, info, kind)) is not None:
            add(info, kind, reason)
        elif kind is FileKind.XPLANE_RIEGELI:
            add(info, kind, REASONS[kind])
        elif run is None and kind in REASONS:  # a session's files are always its run's
            add(info, kind, REASONS[kind])
        elif run is None and (kind in DUMP_KINDS or kind is FileKind.HLO_TEXT):
            add(info, kind, _DUMP_REASON)
    for run in runs:
        if run.kind is RunKind.XLA_DUMP:
            for info in _unread_dump_files(run):
                add(info, classify(info.name), _DUMP_REASON)
    return [found[path] for path in sorted(found)]


def not_read_note(listing: Listing, runs: list[Run], path: str | None = None) -> str:
    """For an error that found no run (``path``: the file or folder the user named, else the
    whole log directory): what there is that profscope recognises but does not read, and why;
    '' when nothing."""
    inside = [u for u in unsupported_files(listing, runs)
              if path is None or u["file"] == path or u["file"].startswith(path.rstrip("/") + "/")]
    if not inside:
        return ""
    shown = "; ".join(f"{u['file']}: {u['reason']}" for u in inside[:5])
    more = f"; and {len(inside) - 5} more (profscope runs lists them)" if len(inside) > 5 else ""
    return f" (recognised but not read: {shown}{more})"

"""Which input format a file name belongs to, by the names the producing tools write.

One table, so that run discovery and every reader agree on what a file is.
"""

from __future__ import annotations

import enum


class FileKind(enum.Enum):
    XPLANE = "xplane"  # <host>.xplane.pb[.gz], tsl XSpace (jax.profiler, tf.profiler)
    CHROME_TRACE = "chrome_trace"  # *.trace.json[.gz], *.pt.trace.json[.gz]
    HLO_PROTO = "hlo_proto"  # XLA dump, --xla_dump_hlo_as_proto: *.hlo.pb[.gz]
    HLO_TEXT = "hlo_text"  # XLA dump, --xla_dump_hlo_as_text: *.txt module dumps
    BUFFER_ASSIGNMENT = "buffer_assignment"  # XLA dump: *-buffer-assignment.txt
    MEMORY_USAGE_REPORT = "memory_usage_report"  # XLA dump: *-memory-usage-report.txt
    TORCH_SNAPSHOT = "torch_snapshot"  # torch.cuda.memory._dump_snapshot(): *.pickle
    # torch.profiler's export_memory_timeline(): <name>.memory_timeline.json, read beside
    # the Chrome trace <name>.pt.trace.json[.gz] of the same run.
    MEMORY_TIMELINE = "memory_timeline"
    OTHER = "other"


XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
CHROME_TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")
HLO_PROTO_SUFFIXES = (".hlo.pb", ".hlo.pb.gz")
TORCH_SNAPSHOT_SUFFIXES = (".pickle", ".pkl")
MEMORY_TIMELINE_SUFFIX = ".memory_timeline.json"

# Files that make a folder an XLA dump folder on their own (text modules alone do not:
# plenty of folders hold *.txt).
DUMP_KINDS = frozenset({FileKind.HLO_PROTO, FileKind.BUFFER_ASSIGNMENT, FileKind.MEMORY_USAGE_REPORT})


def classify(name: str) -> FileKind:
    """The kind of a file, from its base name alone."""
    if name.endswith(XPLANE_SUFFIXES):
        return FileKind.XPLANE
    if name.endswith(CHROME_TRACE_SUFFIXES):
        return FileKind.CHROME_TRACE
    if name.endswith(HLO_PROTO_SUFFIXES):
        return FileKind.HLO_PROTO
    if name.endswith("-buffer-assignment.txt"):
        return FileKind.BUFFER_ASSIGNMENT
    if name.endswith("-memory-usage-report.txt"):
        return FileKind.MEMORY_USAGE_REPORT
    if name.startswith("module_") and name.endswith(".txt"):
        return FileKind.HLO_TEXT
    if name.endswith(TORCH_SNAPSHOT_SUFFIXES):
        return FileKind.TORCH_SNAPSHOT
    if name.endswith(MEMORY_TIMELINE_SUFFIX):
        return FileKind.MEMORY_TIMELINE
    return FileKind.OTHER


def trace_stem(name: str) -> str | None:
    """'x.pt.trace.json.gz' -> 'x' (the name a companion memory timeline shares)."""
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", *CHROME_TRACE_SUFFIXES[::-1]):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def xplane_host(name: str) -> str | None:
    """'<host>.xplane.pb[.gz]' -> '<host>' (XProf's host naming), else None."""
    for suffix in XPLANE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None

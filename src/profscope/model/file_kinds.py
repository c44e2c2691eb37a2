"""Which input format a file name belongs to, by the names the producing tools write.

One table, so that run discovery and every reader agree on what a file is.
"""

from __future__ import annotations

import enum


class FileKind(enum.Enum):
    XPLANE = "xplane"  # <host>.xplane.pb[.gz], tsl XSpace (jax.profiler, tf.profiler)
    # *.trace.json[.gz], *.pt.trace.json[.gz] by name; any other *.json[.gz] whose first
    # bytes show a Chrome trace is one too, once sniffed (formats/sniff.py, model/catalog.py)
    CHROME_TRACE = "chrome_trace"
    HLO_PROTO = "hlo_proto"  # XLA dump, --xla_dump_hlo_as_proto: *.hlo.pb[.gz]
    HLO_TEXT = "hlo_text"  # XLA dump, --xla_dump_hlo_as_text: *.txt module dumps
    BUFFER_ASSIGNMENT = "buffer_assignment"  # XLA dump: *-buffer-assignment.txt
    MEMORY_USAGE_REPORT = "memory_usage_report"  # XLA dump: *-memory-usage-report.txt
    TORCH_SNAPSHOT = "torch_snapshot"  # torch.cuda.memory._dump_snapshot(): *.pickle
    # torch.profiler's export_memory_timeline(): <name>.memory_timeline.json[.gz] (it gzips
    # when the path ends in .gz), read beside the Chrome trace <name>.pt.trace.json[.gz]
    # (or <name>.json[.gz]) of the same run.
    MEMORY_TIMELINE = "memory_timeline"
    # jax.profiler.save_device_memory_profile(): a gzipped pprof protobuf, named by the
    # user (JAX's docs write memory.prof). Recognised so that it is never taken for
    # anything else; not read yet.
    DEVICE_MEMORY_PROFILE = "device_memory_profile"
    OTHER = "other"


XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
CHROME_TRACE_SUFFIXES = (".trace.json", ".trace.json.gz")
HLO_PROTO_SUFFIXES = (".hlo.pb", ".hlo.pb.gz")
TORCH_SNAPSHOT_SUFFIXES = (".pickle", ".pkl")
MEMORY_TIMELINE_SUFFIX = ".memory_timeline.json"
MEMORY_TIMELINE_SUFFIXES = (MEMORY_TIMELINE_SUFFIX, MEMORY_TIMELINE_SUFFIX + ".gz")
DEVICE_MEMORY_PROFILE_SUFFIXES = (".prof", ".prof.gz")
#: Names that may hold a Chrome trace under any stem (trace.json from PyTorch's
#: export_chrome_trace recipe, rank-0.json.gz, ...): sniffed when nothing else claims them.
JSON_SUFFIXES = (".json", ".json.gz")

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
    if name.endswith(MEMORY_TIMELINE_SUFFIXES):
        return FileKind.MEMORY_TIMELINE
    if name.endswith(DEVICE_MEMORY_PROFILE_SUFFIXES):
        return FileKind.DEVICE_MEMORY_PROFILE
    return FileKind.OTHER


def may_be_chrome_trace(name: str) -> bool:
    """A name nothing else claims that could still hold a Chrome trace: its first bytes decide."""
    return name.endswith(JSON_SUFFIXES) and classify(name) is FileKind.OTHER


def trace_stem(name: str) -> str | None:
    """'x.pt.trace.json.gz' -> 'x', 'rank-0.json.gz' -> 'rank-0' (the name a companion
    memory timeline shares)."""
    for suffix in (".pt.trace.json.gz", ".pt.trace.json", *CHROME_TRACE_SUFFIXES[::-1], *JSON_SUFFIXES[::-1]):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None


def xplane_host(name: str) -> str | None:
    """'<host>.xplane.pb[.gz]' -> '<host>' (XProf's host naming), else None."""
    for suffix in XPLANE_SUFFIXES:
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return None

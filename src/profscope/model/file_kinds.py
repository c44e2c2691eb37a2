"""Which input format a file name belongs to, by the names the producing tools write.

One table, so that run discovery and every reader agree on what a file is.
"""

from __future__ import annotations

import enum
import re


class FileKind(enum.Enum):
    XPLANE = "xplane"  # <host>.xplane.pb[.gz], tsl XSpace (jax.profiler, tf.profiler)
    # <host>.xplane.riegeli: the same XSpace framed as a riegeli record file, which XProf's
    # profile_io.py lists beside *.xplane.pb. Recognised so that it is listed with its
    # reason (app/unsupported_files.py); not read: no writer of it on PyPI (jaxlib, xprof).
    XPLANE_RIEGELI = "xplane_riegeli"
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
    # user (JAX's docs write memory.prof); a run once its head shows a gzipped Profile
    # (formats/pprof_head.py is_pprof_head): cProfile writes *.prof too.
    DEVICE_MEMORY_PROFILE = "device_memory_profile"
    OTHER = "other"


XPLANE_SUFFIXES = (".xplane.pb", ".xplane.pb.gz")
XPLANE_RIEGELI_SUFFIX = ".xplane.riegeli"
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
    if name.endswith(XPLANE_RIEGELI_SUFFIX):
        return FileKind.XPLANE_RIEGELI
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


def may_be_pprof(name: str) -> bool:
    """A name that may hold a pprof Profile (a JAX device-memory profile): ``*.prof``,
    ``*.prof.gz``, a ``*.pb.gz`` nothing else claims, or no extension at all (pprof's own
    default names); its first bytes decide (app/discovery.py)."""
    kind = classify(name)
    if kind is FileKind.DEVICE_MEMORY_PROFILE:
        return True
    return kind is FileKind.OTHER and (name.endswith(".pb.gz") or "." not in name)


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


# One distributed job's files differ by rank only (docs/runs.md "One run per distributed
# job"). A rank token is the word ``rank``, at most one ``-`` or ``_``, then decimal
# digits (``rank0``, ``rank-1``, ``rank_2``, any case), standing between path separators,
# ``_``, ``-`` or ``.`` (or the ends): ``trace_rank3.json``, ``rank0_snapshot.pickle``,
# torchrun-style folders ``rank_0/``, ``node0_rank1/``. Deliberately strict: ``r3``,
# ``worker3``, ``gpu3`` or a bare number are not ranks (``model_v1``/``model_v2`` are two
# runs, as are ``a.pickle``/``b.pickle``).
#: The rule in words, as /api/runs' ``job`` carries it to the pages.
RANK_RULE = ("files that differ only by one rank token (rank<N>, rank-<N> or rank_<N>, in the name or a folder), "
             "of one kind, are one run whose hosts are the ranks")
_RANK_TOKEN = re.compile(r"(?<![^/._-])(rank[-_]?)(\d+)(?![^/._-])", re.IGNORECASE)


def rank_of(path: str) -> tuple[str, str] | None:
    """``(template, rank)`` of a path holding exactly one rank token: the path with that
    token's digits replaced by ``*`` (the group's run name) and the token as written (the
    rank's host name). ``'ddp/rank-1.json.gz'`` -> ``('ddp/rank-*.json.gz', 'rank-1')``;
    None for no token or several (``rank0/rank1.pickle`` is ambiguous)."""
    found = list(_RANK_TOKEN.finditer(path))
    if len(found) != 1:
        return None
    m = found[0]
    return path[: m.start(2)] + "*" + path[m.end(2) :], m.group(0)

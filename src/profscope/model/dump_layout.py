"""XLA dump folders (``XLA_FLAGS=--xla_dump_to=DIR``): which files belong to which module.

XLA names every dump file ``module_<unique id, 4+ digits>.<module name>.<stage>...``
(xla/service/dump.cc, FilenameFor): e.g.

    module_0012.jit_train_step.before_optimizations.hlo.pb
    module_0012.jit_train_step.cpu_after_optimizations.hlo.pb          (HloProto with buffer assignment)
    module_0012.jit_train_step.cpu_after_optimizations-buffer-assignment.txt
    module_0012.jit_train_step.cpu_after_optimizations-memory-usage-report.txt
    module_0040.jit_step.sm_9.0_gpu_after_optimizations.hlo.pb                (GPU: the stage names the target)

The unique id is the module's id, the same number a profile records as ``program_id``,
so a dumped module is named ``<name>(<id>)`` exactly as XProf names it from a profile.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from profscope.model.file_kinds import DUMP_KINDS, FileKind, classify

_DUMP_NAME = re.compile(
    r"^module_(?P<id>\d+)\.(?P<name>.+?)\."
    r"(?P<stage>(?:[A-Za-z0-9_.]*_)?(?:after|before)_optimizations|[A-Za-z0-9_]+?)"
    r"(?:\.hlo\.pb(?:\.gz)?|-buffer-assignment\.txt|-memory-usage-report\.txt|\.txt)$"
)


@dataclass(frozen=True, slots=True)
class DumpFileName:
    module_id: int
    module_name: str
    stage: str  # "cpu_after_optimizations", "before_optimizations", ...
    kind: FileKind

    @property
    def display_name(self) -> str:
        return f"{self.module_name}({self.module_id})"

    @property
    def after_optimizations(self) -> bool:
        return self.stage.endswith("after_optimizations")


@dataclass(slots=True)
class DumpModule:
    """The files of one module in a dump folder, by kind (base names)."""

    module_id: int
    module_name: str
    files: dict[str, str] = field(default_factory=dict)  # role -> base name

    @property
    def display_name(self) -> str:
        return f"{self.module_name}({self.module_id})"


def parse_name(name: str) -> DumpFileName | None:
    m = _DUMP_NAME.match(name)
    if m is None:
        return None
    return DumpFileName(int(m["id"]), m["name"], m["stage"], classify(name))


def is_dump_file(name: str) -> bool:
    return classify(name) in DUMP_KINDS


def modules(names: list[str]) -> list[DumpModule]:
    """Group a folder's dump files by module; roles: 'hlo_proto' (after optimizations,
    the one holding the buffer assignment), 'hlo_proto_before', 'buffer_assignment',
    'memory_usage_report', 'hlo_text'."""
    by_id: dict[int, DumpModule] = {}
    for name in sorted(names):
        parsed = parse_name(name)
        if parsed is None or parsed.kind is FileKind.OTHER:
            continue
        module = by_id.setdefault(parsed.module_id, DumpModule(parsed.module_id, parsed.module_name))
        if parsed.kind is FileKind.HLO_PROTO:
            role = "hlo_proto" if parsed.after_optimizations else "hlo_proto_before"
        elif parsed.kind is FileKind.HLO_TEXT:
            if not parsed.after_optimizations:
                continue
            role = "hlo_text"
        else:
            role = parsed.kind.value
        module.files.setdefault(role, name)
    # A module counts when it has something a memory tool can read.
    return [
        m
        for _, m in sorted(by_id.items())
        if {"hlo_proto", "buffer_assignment", "memory_usage_report"} & m.files.keys()
    ]

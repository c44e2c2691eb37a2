"""XLA's text dumps of a buffer assignment: ``*-buffer-assignment.txt`` and
``*-memory-usage-report.txt`` (``XLA_FLAGS=--xla_dump_to=DIR``, no ``.hlo.pb`` needed).

Writers (openxla/xla ``xla/service/buffer_assignment.cc`` unless said otherwise):

``-buffer-assignment.txt`` = ``BufferAssignment::ToString()`` (dump.cc, ``DumpHloModuleImpl``)::

    BufferAssignment:                                  ToString: "BufferAssignment:\\n"
    allocation 0: size 1048576, parameter 16, shape |f32[512,512]| at ShapeIndex {}, maybe-live-out:
     value: <481 state__params.1 @0> (size=1048576,offset=0): f32[512,512]{1,0}

  * allocation header, ``BufferAllocation::ToShortString``:
    ``StrAppendFormat("allocation %d: size %d", index_, size())``, then in this order
    ``", color ", color()`` (only when color != 0);
    ``", parameter ", parameter_number(), ", shape |", <param subshape, no layout>,
    "| at ShapeIndex ", param_shape_index().ToString()`` (entry parameters);
    ``", output shape is |", <root shape, no layout>, "|"`` (the allocation holds the entry
    root's top-level buffer); ``", constant"``; ``", thread-local"``; ``", maybe-live-out"``;
    ``", preallocated-temp"``; then ``":\\n"``.
  * assigned values, ``BufferAllocation::ToString``, sorted by value id:
    ``StrFormat(" value: %s (size=%d,offset=%d): %s\\n", buffer->ToShortString(),
    offset_size.size, offset_size.offset, ShapeUtil::HumanStringWithLayout(shape))``, where
    ``HloValue::ToShortString`` (hlo_value.cc) is ``StrFormat("<%d %s%s%s%s>", id(),
    instruction()->name(), <index().ToString() if the instruction's shape is a tuple>,
    is_phi() ? " (phi)" : "", has_color() ? StrCat(" @", color()) : "")``.
  * the newest XLA source (2026) may add, after the values,
    ``" reused by buffers of a different color:\\n"`` and
    ``StrFormat("  value: %s (color=%d)\\n", ...)`` lines (values already listed above).
  * older XLA (jax 0.4.30, 0.5.3) end ``ToString`` with
    ``"\\nTotal bytes used: ", total_size, " (", HumanReadableNumBytes(total_size),
    ")\\n"`` and ``"\\nUsed values:\\n"`` + ``HloValue::ToString`` per value: ``<id name...>``,
    ``" positions:"``, ``"  <position>"``..., ``" uses:"``, ``"  <use>"``...,
    ``" from instruction:"<instruction>``
    (jax 0.4.30 prints no newline after the instruction, so the next ``<id ...>`` follows on
    the same line), and then ``HloLiveRange::ToString`` (hlo_live_range.cc):
    ``"HloLiveRange (max %d):\\n"``, ``"  InstructionSequence:\\n"``, ``"    %d:%s\\n"``...,
    ``"  BufferLiveRange:\\n"``, ``"    %s%s:%d-%d\\n"`` (name, shape index, start, end)...,
    ``"  Live ranges at %lld (peak):\\n"``, ``"    %s: %lld bytes\\n"``.... Newer XLA writes
    those to ``-buffer-assignment-values.txt`` and ``-live-range.txt`` instead
    (``BufferAssignment::ValuesToString``, ``--xla_dump_buffer_assignment_analysis``).
  * ``BufferAssignment::ToVerboseString`` (the OOM message, not a dump file, but users paste
    it): ``"BufferAssignment OOM Debugging.\\n"``, ``StatsString`` lines such as
    ``"             parameter allocation: %10s\\n"`` / ``"              total fragmentation:
    %10s (%.2f%%)\\n"``, then ``"Peak buffers:"`` and per buffer
    ``"\\n\\tBuffer %d:\\n\\t\\tSize: "``, ``"\\n\\t\\tOperator: "``,
    ``"\\n\\t\\tEntry Parameter Subshape: "`` or ``"\\n\\t\\tXLA Label: "`` +
    ``"\\n\\t\\tShape: "``, ``"\\n\\t\\t==========================\\n"``. Parsed when present.

``-memory-usage-report.txt`` = ``BufferAssignment::MemoryUsageReport()``, three formats so far:

  * current (jax 0.10.x): per memory space ``StrAppend("Memory Space: ",
    GetMemorySpaceName(color), " (color=", color, ")\\n")``, ``StrAppend("Total bytes: ",
    total_bytes, " (", HumanReadableNumBytes(total_bytes), ")\\n")``, then per allocation of that
    color, sorted by size descending then index (``GetMemoryUsageReportProto``), its
    ``BufferAllocation::MemoryUsageReport("  ", ...)`` table: ``"cumulative_size;       size;
    offset; used_by_n_values; shapes_list\\n"``, a dashed line, rows
    ``StrAppendFormat("%s%9s(%3.0f%%); %10s; %12d; %16d; ", prefix, Human(cumulative), percent,
    Human(size), offset, n_values)`` + shapes joined by ``", "`` as ``shape`` or ``N×shape``, and
    maybe ``"%sThe rest %d values are less than %d%% of the total size and not shown.\\n"``.
    The allocation index is not printed; the order is (size desc, index asc) per color.
  * briefly (2025): ``MemoryUsageReportProto(...).DebugString()`` — protobuf text format with
    ``memory_space_allocation_entries { total_bytes: .. allocation_entries { index: ..
    size: .. cumulative_size: .. hlo_text: "<the table above, C-escaped>" } }``.
  * legacy (jax 0.5.x): ``"Total bytes used: ", total, " (", Human(total), ")\\n"``,
    ``"\\nAllocations sorted by size:\\n\\n"``, ``"cumulative_size; total_size - cumulative_size;
    allocation\\n"``, dashes, rows ``StrFormat("%10s(%3.0f%%); %10s; %s", Human(cumulative),
    percent, Human(total - cumulative), allocation.ToShortString(true))``, maybe
    ``"The rest %d allocations are less than %d%% of the total size and not shown.\\n"``, then
    ``"\\n\\nAllocations sorted by size with their values:\\n"`` and per allocation its
    ``ToShortString(true)`` (human-readable size) followed, when it holds more than one
    value, by ``"\\n"`` + its table with prefix ``"\\t"`` + ``"\\n"``.

Unknown lines are counted and skipped (the format drifts). Text that is clearly not one of
these files, or that stops in the middle of an allocation, raises :class:`BadInput`.
"""

from __future__ import annotations

import re

from profscope.errors import BadInput
from profscope.model.buffer_assignment import (
    FLAG_CONSTANT,
    FLAG_MAYBE_LIVE_OUT,
    FLAG_PREALLOCATED_TEMP,
    FLAG_THREAD_LOCAL,
    HUMAN_BYTES,
    Allocation,
    AssignedValue,
    BufferAssignmentText,
    CrossColorValue,
    LiveRangeText,
    PeakBuffer,
    UsedValue,
    human_bytes,
)

__all__ = [
    "decode_dump_text",
    "human_bytes",
    "parse_buffer_assignment",
    "parse_memory_usage_report",
]

_FLAGS = (FLAG_CONSTANT, FLAG_THREAD_LOCAL, FLAG_MAYBE_LIVE_OUT, FLAG_PREALLOCATED_TEMP)

_MAX_WARNINGS = 20


# -- small helpers ------------------------------------------------------------------------

# XLA prints every number of these files from an int64: sizes and offsets (int64_t
# BufferAllocation::size, HloValue offsets), allocation indices (BufferAllocation::Index),
# value ids (HloValue::Id), colors, parameter numbers, schedule times (%lld in
# hlo_live_range.cc). A number beyond int64 is corruption, and would fail later (numpy
# int64 columns, JSON's 64-bit integers): it is refused with its line.
_I64_MAX = (1 << 63) - 1


class _BadNumber(Exception):
    """A number no XLA writes: beyond int64, or a negative size/offset. Not a ValueError,
    which the protobuf-text reader takes for "skip this field"."""

    def __init__(self, text: str, why: str):
        super().__init__(f"{why}: {text[:40]}{'...' if len(text) > 40 else ''}")
        self.text = text


def _i64(text: str) -> int:
    """``int(text)``, refused (_BadNumber) outside int64. Non-integers still raise
    ValueError (int's own), which some readers skip."""
    if len(text) > 20:  # also keeps int() clear of its 4300-digit ValueError
        raise _BadNumber(text, "a number beyond int64")
    v = int(text)
    if -_I64_MAX - 1 <= v <= _I64_MAX:
        return v
    raise _BadNumber(text, "a number beyond int64")


def _size(text: str) -> int:
    """A byte size or offset: an int64 that is not negative."""
    v = _i64(text)
    if v < 0:
        raise _BadNumber(text, "a negative size or offset")
    return v


def _number_error(path: str, e: _BadNumber, lines: list[str], lineno: int | None = None) -> BadInput:
    """BadInput naming the file and the line of a _BadNumber (found by its text when the
    reader does not count lines)."""
    if lineno is None:
        lineno = next((i for i, ln in enumerate(lines, 1) if e.text in ln), None)
    where = f"line {lineno}: " if lineno is not None else ""
    return BadInput(f"{path}: {where}{e} (XLA writes sizes, offsets, ids and indices as int64; "
                    f"the file is corrupt)", file=path)


def decode_dump_text(data: bytes, path: str) -> str:
    """UTF-8 text of a dump file, or BadInput when it is binary or not UTF-8."""
    if b"\x00" in data[:65536]:
        raise BadInput(f"{path}: binary data, not an XLA text dump", file=path)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise BadInput(f"{path}: not UTF-8 text (byte {e.start})", file=path) from None


def _check_text(text: str, path: str, what: str) -> None:
    if not text.strip():
        raise BadInput(f"{path}: empty file, not {what}", file=path)
    head = text[:65536]
    if "\x00" in head or head.count("\ufffd") > 16:
        raise BadInput(f"{path}: binary data, not {what}", file=path)


def _split_attrs(rest: str) -> list[str]:
    """Split ``, a, parameter 3, shape |(f32[], s32[2])| at ShapeIndex {}`` on ", " outside
    ``|...|`` (shapes are printed between pipes and contain ", ")."""
    if "|" not in rest:
        return [p.strip() for p in rest.split(", ") if p.strip()]
    pieces: list[str] = []
    buf = ""
    for i, seg in enumerate(rest.split("|")):
        if i % 2:
            buf += "|" + seg + "|"
            continue
        parts = seg.split(", ")
        buf += parts[0]
        for p in parts[1:]:
            pieces.append(buf)
            buf = p
    pieces.append(buf)
    return [p.strip() for p in pieces if p.strip()]


def _split_top_level(text: str, sep: str = ", ") -> list[str]:
    """Split on ``sep`` outside (), [], {} (a shapes list holds tuple shapes)."""
    out: list[str] = []
    depth = 0
    start = 0
    i = 0
    n = len(text)
    k = len(sep)
    while i < n:
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            depth -= 1
        elif depth == 0 and text.startswith(sep, i):
            out.append(text[start:i])
            i += k
            start = i
            continue
        i += 1
    out.append(text[start:])
    return [s for s in (p.strip() for p in out) if s]


# -- buffer assignment --------------------------------------------------------------------

# "allocation 12: size 2048" (exact) or "allocation 12: size 2.0KiB" (ToShortString(true)).
_ALLOC_HEAD = re.compile(r"^allocation (\d+): size (-?\d+(?:\.\d+)?[KMGTPE]?i?B|-?\d+)(?=[,:\s]|$)")
# " value: <472 name @0> (size=512,offset=0): s32[64,2]{1,0}"
_VALUE = re.compile(
    r"^\s*value:\s*<(?P<short>[^<>]*)>\s*\(size=(?P<size>-?\d+),\s*offset=(?P<offset>-?\d+)\)"
    r"\s*:?\s?(?P<shape>.*)$"
)
# The same, as XLA prints it today, in one match (the fast path for the common case).
_VALUE_FAST = re.compile(
    r"^ value: <(\d+) ([^\s{}<>]+)(\{[\d,]*\})?( \(phi\))?(?: @(-?\d+))?> "
    r"\(size=(\d+),offset=(\d+)\): (.*)$"
)
# "  value: <472 name @1> (color=1)" after " reused by buffers of a different color:"
_CROSS_VALUE = re.compile(r"^\s*value:\s*<(?P<short>[^<>]*)>\s*\(color=(?P<color>-?\d+)\)\s*$")
# HloValue::ToShortString without the angle brackets.
_SHORT = re.compile(
    r"^(?P<id>\d+) (?P<name>[^\s{}<>]+)(?P<index>\{[\d,\s]*\})?(?P<phi> \(phi\))?"
    r"(?: @(?P<color>-?\d+))?$"
)
_SHORT_AT_END = re.compile(
    r"<(?P<short>\d+ [^\s{}<>]+(?:\{[\d,\s]*\})?(?: \(phi\))?(?: @-?\d+)?)>$"
)
_PARAM = re.compile(r"^parameter (-?\d+)$")
_PARAM_SHAPE = re.compile(r"^shape \|(?P<shape>.*)\| at ShapeIndex (?P<index>\{.*\})$")
_OUTPUT_SHAPE = re.compile(r"^output shape is \|(?P<shape>.*)\|$")
_COLOR = re.compile(r"^color (-?\d+)$")
_TOTAL_USED = re.compile(r"^Total bytes used: (\d+)")
_LIVE_HEAD = re.compile(r"^HloLiveRange \(max (-?\d+)\):")
_LIVE_SEQ = re.compile(r"^\s+(\d+):(\S.*)$")
_LIVE_RANGE = re.compile(r"^\s+(?P<name>\S+?)(?P<index>\{[\d,\s]*\}):(?P<s>-?\d+)-(?P<e>-?\d+)$")
_LIVE_PEAK_HEAD = re.compile(r"^\s+Live ranges at (-?\d+) \(peak\):")
_LIVE_PEAK = re.compile(r"^\s+(?P<name>\S+): (?P<bytes>-?\d+) bytes$")
_STAT = re.compile(
    r"^\s*(?P<label>[A-Za-z_ ]+):\s+(?P<value>\S+)(?:\s+\((?P<pct>[-\d.naif]+)%\))?\s*$"
)


def _parse_short(short: str) -> tuple[int, str, str, bool, int | None] | None:
    m = _SHORT.match(short)
    if m is None:
        head = short.split(" ", 1)
        if not head[0].isdecimal():
            return None
        return _i64(head[0]), head[1] if len(head) > 1 else "", "{}", False, None
    index = (m["index"] or "{}").replace(" ", "")
    color = _i64(m["color"]) if m["color"] is not None else None
    return _i64(m["id"]), m["name"], index, m["phi"] is not None, color


def _parse_alloc_header(line: str) -> tuple[Allocation, str] | None:
    """An ``allocation N: size S, ...:`` line -> (Allocation, size text); None if incomplete."""
    m = _ALLOC_HEAD.match(line)
    if m is None:
        return None
    rest = line[m.end():].rstrip()
    if not rest.endswith(":"):
        return None
    size_text = m.group(2)
    if size_text.lstrip("-").isdecimal():
        size = _size(size_text)
    else:
        size = human_bytes(size_text)
        if size is None and HUMAN_BYTES.match(size_text):
            raise _BadNumber(size_text, "a size beyond int64")
        if size is not None and size < 0:
            raise _BadNumber(size_text, "a negative size or offset")
    alloc = Allocation(index=_i64(m.group(1)), size=size if size is not None else 0)
    for piece in _split_attrs(rest[:-1]):
        if piece in _FLAGS:
            if piece == FLAG_CONSTANT:
                alloc.is_constant = True
            elif piece == FLAG_THREAD_LOCAL:
                alloc.is_thread_local = True
            elif piece == FLAG_MAYBE_LIVE_OUT:
                alloc.maybe_live_out = True
            else:
                alloc.is_preallocated_temp = True
        elif (pm := _PARAM.match(piece)) is not None:
            alloc.parameter_number = _i64(pm.group(1))
        elif (sm := _PARAM_SHAPE.match(piece)) is not None:
            alloc.parameter_shape = sm["shape"]
            alloc.parameter_shape_index = sm["index"].replace(" ", "")
        elif (om := _OUTPUT_SHAPE.match(piece)) is not None:
            alloc.output_shape = om["shape"]
        elif (cm := _COLOR.match(piece)) is not None:
            alloc.color = _i64(cm.group(1))
        alloc.attributes.append(piece)
    return alloc, size_text


def parse_buffer_assignment(text: str, path: str) -> BufferAssignmentText:
    """Parse a ``*-buffer-assignment.txt`` (any XLA version seen so far; see module doc).

    Raises BadInput naming ``path`` for empty, binary or unrelated text, and for a file that
    stops in the middle of an allocation (or whose totals do not add up).
    """
    what = "an XLA buffer assignment"
    _check_text(text, path, what)
    if "\r" in text:
        text = text.replace("\r\n", "\n")  # a copy that went through Windows
    ba = BufferAssignmentText(path=path)
    lines = text.split("\n")
    complete_last = text.endswith("\n")
    if complete_last:
        lines.pop()  # the empty string after the final newline

    def bad(message: str) -> BadInput:
        return BadInput(f"{path}: {message}", file=path)

    def note(lineno: int, line: str) -> None:
        ba.unknown_lines += 1
        if len(ba.warnings) < _MAX_WARNINGS:
            ba.warnings.append(f"line {lineno}: unrecognized: {line[:120]!r}")

    seen_header = False
    seen_indices: set[int] = set()
    alloc: Allocation | None = None
    cross = False  # inside a "reused by buffers of a different color:" list
    mode = "alloc"  # alloc | values | live | stats | peak
    used: UsedValue | None = None
    used_sub = ""  # positions | uses
    live: LiveRangeText | None = None
    live_sub = ""  # seq | ranges | peak
    peak: PeakBuffer | None = None
    last_no = len(lines)

    lineno = 0
    try:
        for lineno, line in enumerate(lines, 1):
            if not line.strip():
                continue
            if line.startswith("allocation "):
                parsed = _parse_alloc_header(line)
                if parsed is None:
                    if lineno == last_no and not complete_last:
                        raise bad(f"truncated: line {lineno} stops inside an allocation header")
                    note(lineno, line)
                    continue
                if alloc is not None and not alloc.values and mode == "alloc":
                    ba.warnings.append(f"allocation {alloc.index} lists no values")
                alloc = parsed[0]
                alloc.line = lineno
                if alloc.index in seen_indices:
                    raise bad(f"allocation {alloc.index} appears twice (line {lineno})")
                seen_indices.add(alloc.index)
                ba.allocations.append(alloc)
                mode = "alloc"
                cross = False
                continue
            if mode == "alloc":
                if not cross and alloc is not None and (fm := _VALUE_FAST.match(line)) is not None:
                    vid, name, index, phi, color, size_s, offset_s, shape = fm.groups()
                    size, offset = _size(size_s), _size(offset_s)
                    if offset + size > alloc.size:
                        raise bad(f"line {lineno}: value <{vid} {name}> (offset {offset}, size "
                                  f"{size}) lies outside allocation {alloc.index} of size "
                                  f"{alloc.size}")
                    alloc.values.append(AssignedValue(
                        _i64(vid), name, index or "{}", offset, size, shape.strip(),
                        phi is not None, _i64(color) if color is not None else None,
                    ))
                    continue
                stripped = line.lstrip()
                if stripped.startswith("value:"):
                    if alloc is None:
                        note(lineno, line)
                        continue
                    if cross:
                        cm = _CROSS_VALUE.match(line)
                        if cm is not None:
                            short = _parse_short(cm["short"])
                            if short is not None:
                                alloc.cross_color_values.append(
                                    CrossColorValue(short[0], short[1], short[2], _i64(cm["color"]))
                                )
                                continue
                    vm = _VALUE.match(line)
                    short = _parse_short(vm["short"]) if vm is not None else None
                    if vm is None or short is None:
                        if lineno == last_no and not complete_last:
                            raise bad(f"truncated: line {lineno} stops inside a value of "
                                      f"allocation {alloc.index}")
                        note(lineno, line)
                        continue
                    size, offset = _i64(vm["size"]), _i64(vm["offset"])
                    if offset < 0 or size < 0 or offset + size > alloc.size:
                        raise bad(f"line {lineno}: value <{vm['short']}> (offset {offset}, size "
                                  f"{size}) lies outside allocation {alloc.index} of size "
                                  f"{alloc.size}")
                    alloc.values.append(AssignedValue(
                        id=short[0], name=short[1], shape_index=short[2], offset=offset,
                        size=size, shape=vm["shape"].strip(), phi=short[3], color=short[4],
                    ))
                    continue
                if stripped.startswith("reused by buffers of a different color"):
                    cross = True
                    continue
                if line.startswith("BufferAssignment:"):
                    seen_header = True
                    continue
            # Sections that follow the allocations (older XLA) or a pasted OOM message.
            if (tm := _TOTAL_USED.match(line)) is not None:
                ba.total_bytes_used = _size(tm.group(1))
                mode = "tail"
                continue
            if line.startswith("Used values:"):
                ba.used_values = []
                mode, used, used_sub = "values", None, ""
                continue
            if (lm := _LIVE_HEAD.match(line)) is not None:
                live = ba.live_range = LiveRangeText(max_time=_i64(lm.group(1)))
                mode, live_sub = "live", ""
                continue
            if line.startswith("BufferAssignment OOM Debugging") or line.startswith(
                "BufferAssignment stats:"
            ):
                ba.stats = ba.stats or {}
                mode = "stats"
                continue
            if line.startswith("Peak buffers:"):
                ba.peak_buffers = []
                mode, peak = "peak", None
                continue
            if mode == "values":
                assert ba.used_values is not None
                if line.startswith("<"):
                    short = _parse_short(line.strip()[1:-1]) if line.rstrip().endswith(">") else None
                    if short is None:
                        note(lineno, line)
                        continue
                    used = UsedValue(id=short[0], name=short[1], shape_index=short[2],
                                     phi=short[3], color=short[4])
                    ba.used_values.append(used)
                    used_sub = ""
                    continue
                if used is None:
                    note(lineno, line)
                    continue
                if line.startswith(" positions:"):
                    used_sub = "positions"
                elif line.startswith(" uses:"):
                    used_sub = "uses"
                elif line.startswith(" from instruction:"):
                    instr = line[len(" from instruction:"):].strip()
                    # jax 0.4.30: no newline after the instruction; the next value follows.
                    gm = _SHORT_AT_END.search(instr)
                    if gm is not None and gm.start() > 0:
                        short = _parse_short(gm["short"])
                        if short is not None:
                            used.instruction = instr[: gm.start()]
                            used = UsedValue(id=short[0], name=short[1], shape_index=short[2],
                                             phi=short[3], color=short[4])
                            ba.used_values.append(used)
                            used_sub = ""
                            continue
                    used.instruction = instr
                    used_sub = ""
                elif line.startswith("  ") and used_sub == "positions":
                    used.positions.append(line.strip())
                elif line.startswith("  ") and used_sub == "uses":
                    used.uses.append(line.strip())
                else:
                    note(lineno, line)
                continue
            if mode == "live":
                assert live is not None
                if line.startswith("  InstructionSequence:"):
                    live_sub = "seq"
                elif line.startswith("  BufferLiveRange:"):
                    live_sub = "ranges"
                elif (pm := _LIVE_PEAK_HEAD.match(line)) is not None:
                    live.peak_time = _i64(pm.group(1))
                    live_sub = "peak"
                elif live_sub == "seq" and (sm := _LIVE_SEQ.match(line)) is not None:
                    live.instruction_sequence.append(sm.group(2))
                elif live_sub == "ranges" and (rm := _LIVE_RANGE.match(line)) is not None:
                    live.ranges.append((rm["name"], rm["index"].replace(" ", ""),
                                        _i64(rm["s"]), _i64(rm["e"])))
                elif live_sub == "peak" and (pm := _LIVE_PEAK.match(line)) is not None:
                    live.peak_values.append((pm["name"], _size(pm["bytes"])))
                else:
                    if lineno == last_no and not complete_last:
                        raise bad(f"truncated: line {lineno} stops inside the live ranges")
                    note(lineno, line)
                continue
            if mode == "stats":
                assert ba.stats is not None
                if (st := _STAT.match(line)) is not None:
                    pct = st["pct"]
                    try:
                        percent = float(pct) if pct is not None else None
                    except ValueError:
                        percent = None
                    ba.stats[st["label"].strip()] = {
                        "text": st["value"], "approxBytes": human_bytes(st["value"]),
                        "percent": percent,
                    }
                else:
                    note(lineno, line)
                continue
            if mode == "peak":
                assert ba.peak_buffers is not None
                s = line.strip()
                if s.startswith("Buffer ") and s.endswith(":") and s[7:-1].isdecimal():
                    peak = PeakBuffer(rank=_i64(s[7:-1]))
                    ba.peak_buffers.append(peak)
                elif peak is not None and s.startswith("Size:"):
                    peak.size_text = s[5:].strip()
                elif peak is not None and s.startswith("Operator:"):
                    peak.operator = s[9:].strip()
                elif peak is not None and s.startswith("XLA Label:"):
                    peak.label = s[10:].strip()
                elif peak is not None and s.startswith("Shape:"):
                    peak.shape = s[6:].strip()
                elif peak is not None and s.startswith("Entry Parameter Subshape:"):
                    peak.shape = s[25:].strip()
                    peak.entry_parameter = True
                elif not s.strip("="):
                    pass  # the "=====" separator
                else:
                    note(lineno, line)
                continue
            if lineno == last_no and not complete_last:
                raise bad(f"truncated: line {lineno} ends without a newline")
            note(lineno, line)
    except _BadNumber as e:
        raise _number_error(path, e, lines, lineno) from None

    # -- whole-file checks ----------------------------------------------------------------
    if not ba.allocations:
        if ba.stats:
            return ba  # a pasted OOM message: stats and peak buffers only
        hint = " (only the header)" if seen_header else ""
        raise bad(f"no 'allocation N: size ...' lines{hint}: not {what}")
    if not complete_last:  # XLA ends every file with a newline (even jax 0.4.30's)
        raise bad(f"truncated: the last line ({len(lines)}) ends without a newline")
    if ba.allocation_bytes > _I64_MAX:  # each size fits int64, their sum must too (int64 total_size)
        raise bad(f"allocations add up to {ba.allocation_bytes} bytes, beyond int64 (corrupt)")
    last = ba.allocations[-1]
    if not last.values and ba.total_bytes_used is None:
        raise bad(f"truncated: allocation {last.index} (line {last.line}) ends before its values")
    if ba.total_bytes_used is not None and ba.total_bytes_used != ba.allocation_bytes:
        raise bad(f"allocations add up to {ba.allocation_bytes} bytes but the file says "
                  f"'Total bytes used: {ba.total_bytes_used}' (truncated or corrupt)")
    if ba.used_values is not None:
        listed = {u.id for u in ba.used_values}
        missing = [v.id for a in ba.allocations for v in a.values if v.id not in listed]
        if missing:
            raise bad(f"truncated: 'Used values:' stops before value {min(missing)} "
                      f"({len(missing)} assigned values not listed)")
    if ba.live_range is not None and ba.live_range.peak_time is None:
        raise bad("truncated: 'HloLiveRange' section without its 'Live ranges at N (peak):'")
    expected = list(range(len(ba.allocations)))
    if sorted(seen_indices) != expected:
        ba.warnings.append("allocation indices are not 0..N-1 (allocations missing?)")
    return ba


# -- memory usage report ------------------------------------------------------------------

_MS_HEAD = re.compile(r"^Memory Space: (?P<name>.*?) \(color=(?P<color>-?\d+)\)\s*$")
_TOTAL = re.compile(r"^Total bytes: (\d+)")
_TABLE_HEAD = re.compile(r"^\s*cumulative_size;\s+size;\s+offset;")
_ROW = re.compile(
    r"^\s*(?P<cum>\S+?)\(\s*(?P<pct>-?[\d.]+|-?nan|-?inf)%\);\s*(?P<size>\S+);\s*"
    r"(?P<offset>-?\d+);\s*(?P<n>\d+);\s?(?P<shapes>.*)$"
)
_REST_VALUES = re.compile(r"^\s*The rest (\d+) values are less than (\d+)% of the total size")
_LEGACY_HEAD = re.compile(r"^\s*cumulative_size;\s*total_size - cumulative_size;\s*allocation")
_LEGACY_ROW = re.compile(
    r"^\s*(?P<cum>\S+?)\(\s*(?P<pct>-?[\d.]+|-?nan|-?inf)%\);\s*(?P<rest>\S+);\s*"
    r"(?P<header>allocation \d+: .*)$"
)
_REST_ALLOCS = re.compile(r"^\s*The rest (\d+) allocations are less than (\d+)% of the total size")
_PROTO_FIELD = re.compile(r"^\s*(?P<key>[a-z_]+):\s*(?P<value>.*?)\s*$")
_PROTO_OPEN = re.compile(r"^\s*(?P<key>[a-z_]+)\s*\{\s*$")


def _pct(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if value == value and abs(value) != float("inf") else None


def _shapes(text: str) -> list[dict]:
    out = []
    for piece in _split_top_level(text.strip()):
        count = 1
        head, sep, tail = piece.partition("×")
        if sep and head.isdecimal():
            count, piece = _size(head), tail
        out.append({"shape": piece, "count": count})
    return out


def _row(m: re.Match) -> dict:
    return {
        "cumulativeText": m["cum"],
        "cumulativePercent": _pct(m["pct"]),
        "sizeText": m["size"],
        "approxBytes": human_bytes(m["size"]),
        "offset": _size(m["offset"]),
        "valueCount": _size(m["n"]),
        "shapes": _shapes(m["shapes"]),
    }


def _table_rows(lines: list[str]) -> tuple[list[dict], int | None]:
    rows: list[dict] = []
    omitted = None
    for line in lines:
        if (m := _ROW.match(line)) is not None:
            rows.append(_row(m))
        elif (r := _REST_VALUES.match(line)) is not None:
            omitted = _size(r.group(1))
    return rows, omitted


def _new_alloc_entry(**kw) -> dict:
    entry = {
        "rank": 0, "index": None, "sizeBytes": None, "sizeText": None,
        "cumulativeBytes": None, "cumulativeText": None, "cumulativePercent": None,
        "header": None, "offsets": [], "omittedOffsets": None,
    }
    entry.update(kw)
    return entry


def _c_unescape(s: str) -> str:
    """Undo protobuf's CEscape (\\n, \\", \\\\, \\' and octal/hex byte escapes)."""
    out = bytearray()
    i, n = 0, len(s)
    simple = {"n": 10, "t": 9, "r": 13, '"': 34, "'": 39, "\\": 92, "a": 7, "b": 8, "f": 12,
              "v": 11, "?": 63}
    while i < n:
        c = s[i]
        if c != "\\" or i + 1 >= n:
            out += c.encode("utf-8")
            i += 1
            continue
        d = s[i + 1]
        if d in simple:
            out.append(simple[d])
            i += 2
        elif d in "01234567":
            j = i + 1
            while j < n and j < i + 4 and s[j] in "01234567":
                j += 1
            out.append(int(s[i + 1:j], 8) & 0xFF)
            i = j
        elif d == "x":
            j = i + 2
            while j < n and j < i + 4 and s[j] in "0123456789abcdefABCDEF":
                j += 1
            out.append(int(s[i + 2:j] or "0", 16) & 0xFF)
            i = j
        else:
            out += d.encode("utf-8")
            i += 2
    return out.decode("utf-8", errors="replace")


def _proto_string(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        return _c_unescape(value[1:-1])
    return value


def _parse_report_proto_text(lines: list[str], path: str) -> dict:
    spaces: list[dict] = []
    stack: list[str] = []
    space: dict | None = None
    entry: dict | None = None
    for line in lines:
        if not line.strip():
            continue
        if (om := _PROTO_OPEN.match(line)) is not None:
            key = om["key"]
            stack.append(key)
            if key == "memory_space_allocation_entries":
                space = {"name": None, "color": 0, "totalBytes": None, "allocations": [],
                         "omittedAllocations": None}
                spaces.append(space)
            elif key == "allocation_entries" and space is not None:
                entry = _new_alloc_entry(rank=len(space["allocations"]))
                entry["definingPositions"] = []
                space["allocations"].append(entry)
            continue
        if line.strip() == "}":
            if not stack:
                raise BadInput(f"{path}: unbalanced '}}' in the memory usage report", file=path)
            key = stack.pop()
            if key == "allocation_entries" and entry is not None:
                # proto3 text format leaves out fields that are 0
                for k in ("index", "sizeBytes", "cumulativeBytes"):
                    if entry[k] is None:
                        entry[k] = 0
                entry = None
            elif key == "memory_space_allocation_entries" and space is not None:
                if space["totalBytes"] is None:
                    space["totalBytes"] = 0
                space = None
            continue
        fm = _PROTO_FIELD.match(line)
        if fm is None:
            continue
        key, value = fm["key"], fm["value"]
        try:
            if entry is not None:
                if key == "index":
                    entry["index"] = _i64(value)
                elif key == "size":
                    entry["sizeBytes"] = _size(value)
                elif key == "cumulative_size":
                    entry["cumulativeBytes"] = _size(value)
                elif key == "cumulative_percentage":
                    pct = _pct(value)
                    entry["cumulativePercent"] = None if pct is None else pct * 100.0
                elif key == "defining_positions":
                    entry["definingPositions"].append(_proto_string(value))
                elif key == "hlo_text":
                    rows, omitted = _table_rows(_proto_string(value).split("\n"))
                    entry["offsets"], entry["omittedOffsets"] = rows, omitted
            elif space is not None:
                if key == "total_bytes":
                    space["totalBytes"] = _size(value)
                elif key == "memory_space_color":
                    space["color"] = _i64(value)
        except ValueError:
            continue
    if stack:
        raise BadInput(f"{path}: truncated: the memory usage report stops inside "
                       f"'{stack[-1]} {{'", file=path)
    return {"format": "proto-text", "memorySpaces": spaces}


def _parse_report_legacy(lines: list[str]) -> dict:
    space = {"name": None, "color": None, "totalBytes": None, "allocations": [],
             "omittedAllocations": None}
    by_index: dict[int, dict] = {}
    current: dict | None = None  # second section: the allocation whose table follows
    table: list[str] = []

    def flush() -> None:
        nonlocal table
        if current is not None and table:
            rows, omitted = _table_rows(table)
            current["offsets"], current["omittedOffsets"] = rows, omitted
        table = []

    section = 0
    for line in lines:
        if (tm := _TOTAL_USED.match(line)) is not None:
            space["totalBytes"] = _size(tm.group(1))
            continue
        if line.startswith("Allocations sorted by size with their values"):
            section = 2
            continue
        if line.startswith("Allocations sorted by size"):
            section = 1
            continue
        if section == 1:
            if (m := _LEGACY_ROW.match(line)) is not None:
                parsed = _parse_alloc_header(m["header"])
                entry = _new_alloc_entry(
                    rank=len(space["allocations"]), cumulativeText=m["cum"],
                    cumulativePercent=_pct(m["pct"]),
                    cumulativeBytes=human_bytes(m["cum"]), header=m["header"].rstrip(),
                )
                entry["remainingText"] = m["rest"]
                if parsed is not None:
                    entry["index"] = parsed[0].index
                    entry["sizeText"] = parsed[1]
                    entry["approxBytes"] = human_bytes(parsed[1])
                    by_index[parsed[0].index] = entry
                space["allocations"].append(entry)
            elif (r := _REST_ALLOCS.match(line)) is not None:
                space["omittedAllocations"] = _size(r.group(1))
        elif section == 2:
            if line.startswith("allocation "):
                flush()
                parsed = _parse_alloc_header(line)
                current = by_index.get(parsed[0].index) if parsed is not None else None
            elif line.strip():
                table.append(line)
    flush()
    return {"format": "allocations-sorted-by-size", "memorySpaces": [space]}


def _parse_report_spaces(lines: list[str], path: str) -> dict:
    spaces: list[dict] = []
    space: dict | None = None
    entry: dict | None = None
    for line in lines:
        if (mm := _MS_HEAD.match(line)) is not None:
            space = {"name": mm["name"], "color": _i64(mm["color"]), "totalBytes": None,
                     "allocations": [], "omittedAllocations": None}
            spaces.append(space)
            entry = None
            continue
        if (tm := _TOTAL.match(line)) is not None and space is not None:
            space["totalBytes"] = _size(tm.group(1))
            continue
        if space is None:
            continue
        if _TABLE_HEAD.match(line):
            entry = _new_alloc_entry(rank=len(space["allocations"]))
            space["allocations"].append(entry)
            continue
        if entry is None:
            continue
        if (m := _ROW.match(line)) is not None:
            entry["offsets"].append(_row(m))
        elif (r := _REST_VALUES.match(line)) is not None:
            entry["omittedOffsets"] = _size(r.group(1))
    for sp in spaces:
        if sp["totalBytes"] is None:
            raise BadInput(f"{path}: truncated: memory space {sp['name']!r} has no "
                           "'Total bytes:' line", file=path)
        if sp["allocations"] and not sp["allocations"][-1]["offsets"]:
            raise BadInput(f"{path}: truncated: the last allocation table of memory space "
                           f"{sp['name']!r} has no rows", file=path)
        for e in sp["allocations"]:
            # The table's last cumulative size is this allocation's used extent (rounded).
            if e["offsets"]:
                e["cumulativeText"] = e["offsets"][-1]["cumulativeText"]
    return {"format": "memory-space", "memorySpaces": spaces}


def parse_memory_usage_report(text: str, path: str) -> dict:
    """Parse a ``*-memory-usage-report.txt`` (three XLA formats; see module doc).

    Returns a JSON-able dict::

        {"path", "format": "memory-space" | "allocations-sorted-by-size" | "proto-text",
         "totalBytes": int | None (sum over memory spaces),
         "memorySpaces": [{"name", "color", "totalBytes", "omittedAllocations",
             "allocations": [{"rank", "index" (None where the format does not print it),
                 "sizeBytes" (exact, proto-text only), "sizeText", "cumulativeBytes",
                 "cumulativeText", "cumulativePercent", "header", "omittedOffsets",
                 "offsets": [{"cumulativeText", "cumulativePercent", "sizeText",
                              "approxBytes", "offset", "valueCount",
                              "shapes": [{"shape", "count"}]}]}]}]}

    Human-readable sizes ("128.0KiB") are rounded by XLA; ``approxBytes`` says so.
    """
    what = "an XLA memory usage report"
    _check_text(text, path, what)
    if "\r" in text:
        text = text.replace("\r\n", "\n")
    lines = text.split("\n")
    if not text.endswith("\n"):
        raise BadInput(f"{path}: truncated: the last line ({len(lines)}) ends without a "
                       "newline", file=path)
    lines.pop()
    head = next((ln for ln in lines if ln.strip()), "")
    try:
        if head.lstrip().startswith("memory_space_allocation_entries"):
            report = _parse_report_proto_text(lines, path)
        elif any(_MS_HEAD.match(ln) for ln in lines[:64]):
            report = _parse_report_spaces(lines, path)
        elif any(_TOTAL_USED.match(ln) for ln in lines[:64]) and any(
            ln.startswith("Allocations sorted by size") for ln in lines
        ):
            report = _parse_report_legacy(lines)
        else:
            raise BadInput(f"{path}: no 'Memory Space:' / 'Total bytes used:' lines: not {what}",
                           file=path)
    except _BadNumber as e:
        raise _number_error(path, e, lines) from None
    if not report["memorySpaces"]:
        raise BadInput(f"{path}: no memory space in the report: not {what}", file=path)
    totals = [s["totalBytes"] for s in report["memorySpaces"]]
    report["totalBytes"] = sum(totals) if all(t is not None for t in totals) else None
    if report["totalBytes"] is not None and report["totalBytes"] > _I64_MAX:
        raise BadInput(f"{path}: the memory spaces' totals add up to {report['totalBytes']} bytes, "
                       "beyond int64 (corrupt)", file=path)
    report["path"] = path
    return report

"""XLA's ``*-live-range.txt`` dump: ``HloLiveRange::ToString`` (xla/hlo/analysis/
hlo_live_range.cc), which newer XLA writes beside ``*-buffer-assignment.txt`` (jax 0.10.2
does with ``--xla_dump_to=DIR --xla_dump_hlo_as_text``; jax 0.4.x put the same block at the
end of the buffer-assignment file, parsed by :mod:`profscope.formats.buffer_assignment_text`).

What jax 0.10.2 writes::

    HloLiveRange (max 2):
      InstructionSequence:
        0:x.1
        1:ynn_fusion
      BufferLiveRange:
        x.1{}:0-2
      Live ranges at 1 (peak):
        x.1{}: 16384 bytes (cumulative: 16384 bytes)
        ynn_fusion{}: 4 bytes (cumulative: 16388 bytes)
      Stack trace breakdown for peak usage: 16 388 bytes
        main.2 (100.0%, total: 16 388 bytes, ...)

The peak is the set of logical buffers (HloValues) live at one point of the schedule:
the sum of their sizes is what would be live at once *before* buffer assignment lets
values share an allocation, not the heap simulator's planned peak.
"""

from __future__ import annotations

import re

from profscope.errors import BadInput

__all__ = ["parse_live_range"]

_I64_MAX = (1 << 63) - 1
_HEADER = re.compile(r"^HloLiveRange \(max (\d+)\):\s*$")
_PEAK = re.compile(r"^\s+Live ranges at (\d+) \(peak\):\s*$")
_VALUE = re.compile(r"^\s+(\S.*?): (\d+) bytes(?: \(cumulative: (\d+) bytes\))?\s*$")
# ToString's "    %d:%s\n" (schedule time: instruction) and "    %s%s:%d-%d\n" (value name,
# shape index, start, end: both times inclusive, hlo_live_range.cc CalculateBufferStartEndMap).
_SEQ = re.compile(r"^\s+(\d+):(\S.*)$")
_RANGE = re.compile(r"^\s+(?P<name>\S+?)(?P<index>\{[\d,\s]*\}):(?P<s>-?\d+)-(?P<e>-?\d+)\s*$")


def parse_live_range(text: str, path: str) -> dict:
    """``{"maxTime", "instructionSequence": [name], "ranges": [{"name", "shapeIndex",
    "start", "end"}], "peakTime", "peakValues": [{"name", "bytes"}], "peakBytes"}``;
    ``peakTime`` None and no values when the file has no peak block. The peak block is
    XLA's: the values live at the moment XLA chose. Raises BadInput naming ``path`` when
    the text is not an ``HloLiveRange`` dump."""
    lines = text.splitlines()
    first = next((ln for ln in lines if ln.strip()), "")
    m = _HEADER.match(first)
    if not m:
        raise BadInput(f"not an XLA live-range dump: expected 'HloLiveRange (max N):', found {first[:80]!r}", file=path)
    def number(text: str, lineno: int) -> int:
        # hlo_live_range.cc prints schedule times and byte sizes from int64 (%d / %lld);
        # beyond that the file is corrupt, and the value would not survive JSON's 64 bits
        if len(text) > 19 or int(text) > _I64_MAX:
            raise BadInput(f"{path}: line {lineno}: {text[:40]} is beyond int64 (XLA writes these "
                           "as int64; the file is corrupt)", file=path)
        return int(text)

    out: dict = {"maxTime": number(m.group(1), lines.index(first) + 1), "instructionSequence": [], "ranges": [],
                 "peakTime": None, "peakValues": [], "peakBytes": 0}
    in_peak, section = False, None
    for lineno, ln in enumerate(lines, 1):
        pm = _PEAK.match(ln)
        if pm:
            out["peakTime"], in_peak = number(pm.group(1), lineno), True
            continue
        if not in_peak:
            if ln.strip() in ("InstructionSequence:", "BufferLiveRange:"):
                section = ln.strip()
            elif section == "InstructionSequence:" and (sm := _SEQ.match(ln)):
                out["instructionSequence"].append(sm.group(2))
            elif section == "BufferLiveRange:" and (rm := _RANGE.match(ln)):
                out["ranges"].append({"name": rm["name"], "shapeIndex": rm["index"].replace(" ", ""),
                                      "start": number(rm["s"].lstrip("-"), lineno) * (-1 if rm["s"].startswith("-") else 1),
                                      "end": number(rm["e"].lstrip("-"), lineno) * (-1 if rm["e"].startswith("-") else 1)})
            continue
        vm = _VALUE.match(ln)
        if not vm or ln.lstrip().startswith("Stack trace"):
            break  # the block ends at the stack-trace breakdown (or anything else)
        out["peakValues"].append({"name": vm.group(1), "bytes": number(vm.group(2), lineno)})
    out["peakBytes"] = sum(v["bytes"] for v in out["peakValues"])
    if out["peakBytes"] > _I64_MAX:
        raise BadInput(f"{path}: the peak's values add up to {out['peakBytes']} bytes, beyond int64 "
                       "(the file is corrupt)", file=path)
    return out

"""Compiler rules of the Summary (issue 35): checks on the HLO modules a run holds.

Matches XProf's agent CLI checks ``detect_layout_mismatch_copies``, ``detect_unfused_reshapes``
and ``detect_unnecessary_convert_reduce``. ``modules`` are parsed ``HloProto`` messages
(formats/hlo_proto.py). Each finding is the Summary's ``Finding`` dict (docs/analysis.md, "JSON").
"""

from __future__ import annotations

from typing import Callable

__all__ = ["hlo_findings"]


def hlo_findings(modules: list, link: Callable[..., str]) -> list[dict]:
    """The compiler findings over ``modules`` (P0..P2)."""
    return []

"""Memory rules of the Summary (issue 35): findings from an OOM-risk payload and leak hints.

Inputs are other tools' payloads, never files: ``oom`` is :func:`profscope.tools.oom_risk.assess`'s
answer, ``memory_profile`` the memory profile's payload (its leak hints, docs/memory_profile.md).
Each finding is the Summary's ``Finding`` dict (docs/analysis.md, "JSON").
"""

from __future__ import annotations

from typing import Callable

__all__ = ["memory_findings"]


def memory_findings(oom: dict | None, memory_profile: dict | None, link: Callable[..., str]) -> list[dict]:
    """The memory findings of one host (P0..P2), from whichever payloads are given."""
    return []

"""The Summary's shared vocabulary (issue 35, docs/analysis.md "JSON"): a rule's
descriptor, and the plain dicts a finding is made of. The rule modules
(tools/analysis_time.py, analysis_memory.py, analysis_hlo.py) build their findings with
these; tools/analysis.py sorts them and never re-ranks them.

A finding is a plain dict (the JSON's ``Finding``): ``id`` (its rule's), ``priority``
(``P0``..``P2``), ``area``, ``title``, ``what``, ``evidence`` (``[{label, value, number,
link}]``), ``impact`` (``{seconds_per_step, bytes, text}``), ``fix`` and ``host``.
"""

from __future__ import annotations

from dataclasses import dataclass

PRIORITIES = ("P0", "P1", "P2")
AREAS = ("time", "memory", "compiler")

# The contract's priorities by the share of step time at stake (docs/analysis.md "Status
# and priorities"): P0 loses at least a quarter of the step, P1 a tenth, P2 what is
# still worth knowing.
P0_SHARE, P1_SHARE, P2_SHARE = 0.25, 0.10, 0.02


@dataclass(frozen=True, slots=True)
class Rule:
    """One rule as docs/analysis.md and the planted suite list it: its ``id`` (a
    finding's), ``area``, default ``priority`` (``"by share"`` where the share of step
    time at stake decides), ``threshold`` (in words, with the numbers), ``source`` (where
    the rule and its threshold come from) and ``title``."""

    id: str
    area: str
    priority: str
    threshold: str
    source: str
    title: str

    def as_dict(self) -> dict:
        return {"id": self.id, "area": self.area, "priority": self.priority, "threshold": self.threshold,
                "source": self.source, "title": self.title}


def priority_for_share(share: float) -> str | None:
    """The priority of a share of step time at stake, None below :data:`P2_SHARE`."""
    if share >= P0_SHARE:
        return "P0"
    if share >= P1_SHARE:
        return "P1"
    if share >= P2_SHARE:
        return "P2"
    return None


def evidence(label: str, value: str, number: float | int | None = None, link: str | None = None) -> dict:
    return {"label": label, "value": value, "number": number, "link": link}


def impact(seconds_per_step: float | None = None, bytes: int | None = None, text: str = "") -> dict:  # noqa: A002
    return {"seconds_per_step": None if seconds_per_step is None else round(float(seconds_per_step), 9),
            "bytes": None if bytes is None else int(bytes), "text": text}


def finding(rule: Rule, *, title: str, what: str, evidence: list[dict], impact: dict, fix: str,
            host: str | None = None, priority: str | None = None) -> dict:
    """A finding of ``rule``, at ``priority`` (default the rule's own)."""
    p = priority or rule.priority
    if p not in PRIORITIES:
        raise ValueError(f"rule {rule.id!r}: priority {p!r} is not one of {PRIORITIES}")
    return {"id": rule.id, "priority": p, "area": rule.area, "title": title, "what": what,
            "evidence": list(evidence), "impact": impact, "fix": fix, "host": host}

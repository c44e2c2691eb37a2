"""A pprof Profile as plain data (formats/pprof.py reads it; tools/memory_profile_pprof.py
summarises it): frames deduplicated, each sample's stack the outermost caller first."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True, slots=True)
class Frame:
    function: str
    file: str
    line: int


@dataclass(slots=True)
class Sample:
    values: tuple[int, ...]
    stack: tuple[int, ...]  # indices into Profile.frames, the outermost caller first
    labels: dict[str, str | int]


@dataclass(slots=True)
class Profile:
    path: str
    time_nanos: int
    sample_types: list[tuple[str, str]]  # (type, unit)
    frames: list[Frame]
    samples: list[Sample]
    comments: list[str] = field(default_factory=list)

    def value_index(self, unit: str) -> int | None:
        """The index of the (last) sample value in ``unit`` (bytes, count)."""
        found = [i for i, (_, u) in enumerate(self.sample_types) if u == unit]
        return found[-1] if found else None

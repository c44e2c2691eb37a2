"""What one host of a run did, reduced to what a cross-host overview compares: its step
markers, the intervals its devices were running ops, and the span of its profile.

Made by :mod:`profscope.formats.xplane_activity` in one pass over an xplane that decodes
no stat but the few it needs; read by :mod:`profscope.tools.trace_hosts`. Times are
absolute picoseconds (an xplane line's ``timestamp_ns * 1000 + offset_ps``), the same
clock for every plane of the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np


@dataclass(frozen=True, slots=True)
class StepMarker:
    """One step event: a host event with a ``step_num`` stat, or an event of a device
    ``Steps`` line. ``name`` is what the trace viewer calls it ("train 3"), the key
    steps of different hosts are matched by."""

    name: str
    number: int | None  # the step_num / group_id it was named after, when there is one
    start_ps: int
    dur_ps: int
    where: str  # "<plane> / <line>"


@dataclass(slots=True)
class DeviceOps:
    """The op events of one device (a GPU or TPU plane, or the XLA CPU ops of a host
    without device planes): begin and end of each, int64 ps, in any order."""

    name: str
    lines: list[str]
    begin_ps: np.ndarray
    end_ps: np.ndarray


@dataclass(slots=True)
class HostActivity:
    path: str
    hostname: str
    begin_ps: int | None  # first event of the host's shown planes; None: no event at all
    end_ps: int | None
    steps: list[StepMarker] = field(default_factory=list)
    step_source: str | None = None  # "step_num events" | "Steps line" | None: no step markers
    devices: list[DeviceOps] = field(default_factory=list)
    idle_devices: list[str] = field(default_factory=list)  # device planes without an op event
    device_source: str = "none"  # "device planes" | "XLA CPU ops" | "none"
    events: int = 0  # events read (all lines of the shown planes)

"""Device capabilities recorded in an XSpace's device planes (``/device:GPU:N``,
``/device:TPU:N``): what the profiler says the device is and how much memory it has.

The profiler writes them as plane-level stats (XProf ``xprof/utils/device_caps_utils.cc``
``SetDeviceCaps``; stat names from tsl ``xplane_schema.cc``): ``memory_size`` (bytes,
``kDevCapMemorySize``), ``memory_bandwidth``, ``core_count``, ``clock_rate`` (kHz),
``compute_cap_major`` / ``_minor``, ``device_vendor`` and ``gpu_device_name``. Only the
plane's ``stat_metadata`` (XPlane field 5) and ``stats`` (field 6) are read: its lines
(field 3, the events, most of a GPU profile) and event metadata (4) are skipped on the
wire, so this stays cheap on large profiles.
"""

from __future__ import annotations

from typing import IO

from google.protobuf.message import DecodeError

from profscope.formats import protowire as wire
from profscope.formats import xplane
from profscope.formats.protos import xplane_pb2

__all__ = ["DEVICE_PLANE_PREFIX", "device_capabilities"]

DEVICE_PLANE_PREFIX = "/device:"
# The stats kept, by their tsl names.
_CAPS = ("memory_size", "memory_bandwidth", "core_count", "clock_rate", "compute_cap_major", "compute_cap_minor",
         "device_vendor", "gpu_device_name",
         # a TPU plane's peaks (XProf's roofline and op_profile read them: tsl
         # kDevCapPeakTeraflopsPerSecond, kDevCapPeakHbmBwGigabytesPerSecond); doubles
         "peak_teraflops_per_second", "peak_hbm_bw_gigabytes_per_second")


def device_capabilities(raw: IO[bytes], path: str) -> list[dict]:
    """One dict per device plane, in file order: ``{"plane": name, <stat>: value, ...}``
    with the stats of :data:`_CAPS` that the plane has (ints and strings as recorded)."""
    index = xplane.scan(raw, path)
    refs = sorted((r for r in index.planes if r.name.startswith(DEVICE_PLANE_PREFIX)), key=lambda r: r.offset)
    if not refs:
        return []
    f, size = xplane.open_stream(raw, path)
    out = []
    try:
        for ref in refs:
            wire.skip_to(f, ref.offset, size)
            kept = bytearray()
            for number, wt, length, _start in wire.iter_fields(f, end=ref.offset + ref.length, size=size):
                if wt == wire.LEN and number in (5, 6):  # XPlane.stat_metadata, XPlane.stats
                    kept += _tag_and_length(number, length) + wire.read_exact(f, length)
            plane = xplane_pb2.XPlane.FromString(bytes(kept))
            names = {k: v.name for k, v in plane.stat_metadata.items()}
            caps: dict = {"plane": ref.name}
            for stat in plane.stats:
                name = names.get(stat.metadata_id)
                if name in _CAPS:
                    value = xplane.stat_value(stat, names)
                    caps[name] = value.decode("utf-8", "replace") if isinstance(value, bytes) else value
            out.append(caps)
    except (wire.Truncated, OSError, EOFError, ValueError) as e:
        raise wire.wire_error(path, "XSpace profile", e) from e
    except DecodeError as e:  # upb's parser
        raise wire.wire_error(path, "XPlane device stats", e) from e
    return out


def _tag_and_length(number: int, length: int) -> bytes:
    return wire.encode_varint((number << 3) | wire.LEN) + wire.encode_varint(length)

"""A realistic, deterministic log directory that exercises XProf's listing rules.

``build_xprof_layout(root, xplane_bytes)`` lays out several TensorBoard-style run
folders (the log-directory root, nested folders, a hidden folder, a folder with a
space) with several profile sessions each, plus the edge cases XProf 2.24.2's
listing code reacts to (see ``docs/xprof_compat.md``):

* a session with two hosts, one of them with a dotted host name;
* a profile without HLO protos (the ``/host:metadata`` plane removed);
* a ``*.xplane.pb.gz`` file (XProf 2.24 ignores it: only ``*.xplane.pb`` and
  ``*.xplane.riegeli`` count), alone in one session and next to plain xplanes in
  another;
* an empty session folder, a session holding only a ``*.trace.json.gz``;
* the same session name under two different run folders;
* a stray file directly in ``plugins/profile`` (not a session);
* a ``profile`` folder whose parent is not ``plugins`` (not a run folder);
* a folder with no profile at all.

Every xplane file holds the same bytes (``xplane_bytes``, a real JAX profile);
host names come from the file names, as in XProf. File contents, gzip headers and
modification times are fixed, so two builds are byte-identical, and the
``tests/golden/xprof_listing.json`` answers recorded from XProf on this layout
apply to every build.
"""

from __future__ import annotations

import gzip
import os
import pathlib
import random

from profscope.formats.protowire import decode_varint

__all__ = [
    "FILES",
    "EMPTY_DIRS",
    "BASE_MTIME",
    "build_xprof_layout",
    "strip_metadata_plane",
]

# (path relative to root, kind). Kinds: "xplane" (the given bytes), "xplane_gz"
# (the given bytes gzipped), "xplane_no_hlo" (the given bytes without the
# "/host:metadata" plane, i.e. without any HLO proto), "trace_json_gz" (a small
# Chrome trace, gzipped), "text" (a short text file).
FILES: tuple[tuple[str, str], ...] = (
    # Root run ("."): sessions are listed by their bare name.
    ("plugins/profile/2026_01_01_00_00_00/hostA.xplane.pb", "xplane"),
    ("plugins/profile/2026_01_01_00_00_00/hostA.trace.json.gz", "trace_json_gz"),
    ("plugins/profile/2026_01_02_00_00_00/hostA.xplane.pb", "xplane"),
    ("plugins/profile/2026_01_02_00_00_00/hostB.internal.xplane.pb", "xplane"),
    ("plugins/profile/2026_01_02_00_00_00/hostC.xplane.pb.gz", "xplane_gz"),
    ("plugins/profile/stray.txt", "text"),
    # Nested run folder; one session name repeats the root's.
    ("train/plugins/profile/2026_01_01_00_00_00/worker0.xplane.pb", "xplane"),
    ("train/plugins/profile/2026_01_03_00_00_00/worker0.xplane.pb", "xplane"),
    ("train/plugins/profile/2026_01_03_00_00_00/worker1.xplane.pb", "xplane"),
    # Two levels deep; the only profile is gzipped.
    ("train/eval/plugins/profile/2026_01_04_00_00_00/worker0.xplane.pb.gz", "xplane_gz"),
    # A session without any xplane.
    ("other/plugins/profile/2026_01_06_00_00_00/hostA.trace.json.gz", "trace_json_gz"),
    # Three levels deep.
    ("deep/a/b/plugins/profile/2026_01_09_00_00_00/hostA.xplane.pb", "xplane"),
    # Hidden run folder.
    (".hidden/plugins/profile/2026_01_07_00_00_00/hostA.xplane.pb", "xplane"),
    # Spaces in the run folder and in the session name.
    ("with space/plugins/profile/session 1/hostA.xplane.pb", "xplane"),
    # A profile without the /host:metadata plane (no HLO protos): fewer tools,
    # and XProf's module list becomes "NO_MODULE".
    ("nohlo/plugins/profile/2026_01_10_00_00_00/hostA.xplane.pb", "xplane_no_hlo"),
    # "profile" not under "plugins": not a run folder.
    ("weird/profile/2026_01_08_00_00_00/hostA.xplane.pb", "xplane"),
    # No profile at all.
    ("not_a_run/some.txt", "text"),
)

# Folders created empty.
EMPTY_DIRS: tuple[str, ...] = ("other/plugins/profile/2026_01_05_00_00_00",)

# 2026-01-01T00:00:00Z; every file and folder gets BASE_MTIME + k hours, with k
# a fixed shuffle (see build_xprof_layout).
BASE_MTIME = 1767225600

_TRACE_JSON = (
    b'{"displayTimeUnit":"ns","traceEvents":['
    b'{"ph":"M","pid":1,"name":"process_name","args":{"name":"/host:CPU"}},'
    b'{"ph":"X","pid":1,"tid":1,"ts":0,"dur":5,"name":"step"}]}'
)


def _gzip(data: bytes) -> bytes:
    # mtime=0 and no file name in the header: deterministic bytes.
    return gzip.compress(data, compresslevel=9, mtime=0)




def _fields(buf: bytes):
    """(field number, wire type, value, raw bytes of the whole field) per field."""
    i = 0
    while i < len(buf):
        start = i
        key, i = decode_varint(buf, i)
        num, wt = key >> 3, key & 7
        if wt == 0:
            val, i = decode_varint(buf, i)
        elif wt == 1:
            val, i = buf[i : i + 8], i + 8
        elif wt == 2:
            n, i = decode_varint(buf, i)
            val, i = buf[i : i + n], i + n
        elif wt == 5:
            val, i = buf[i : i + 4], i + 4
        else:
            raise ValueError(f"unsupported wire type {wt} at byte {start}")
        yield num, wt, val, buf[start:i]


def _plane_name(plane: bytes) -> str:
    # XPlane.name = 2
    for num, wt, val, _ in _fields(plane):
        if num == 2 and wt == 2:
            return val.decode("utf-8")
    return ""


def strip_metadata_plane(xspace: bytes) -> bytes:
    """The XSpace without its "/host:metadata" plane (XSpace.planes = 1).

    Every other field is copied byte for byte.
    """
    out = bytearray()
    dropped = False
    for num, wt, val, raw in _fields(xspace):
        if num == 1 and wt == 2 and _plane_name(val) == "/host:metadata":
            dropped = True
            continue
        out += raw
    if not dropped:
        raise ValueError("the xplane has no /host:metadata plane")
    return bytes(out)


def _content(kind: str, rel: str, xplane_bytes: bytes) -> bytes:
    if kind == "xplane":
        return xplane_bytes
    if kind == "xplane_no_hlo":
        return strip_metadata_plane(xplane_bytes)
    if kind == "xplane_gz":
        return _gzip(xplane_bytes)
    if kind == "trace_json_gz":
        return _gzip(_TRACE_JSON)
    if kind == "text":
        return f"not a profile: {rel}\n".encode()
    raise ValueError(f"unknown kind {kind!r}")


def build_xprof_layout(root: pathlib.Path, xplane_bytes: bytes) -> None:
    """Lays out the log directory under ``root`` (created if missing).

    ``xplane_bytes`` is the content of one real ``*.xplane.pb`` (e.g. a JAX CPU
    profile); it is written as every host's xplane.
    """
    root = pathlib.Path(root)
    root.mkdir(parents=True, exist_ok=True)
    entries: list[pathlib.Path] = []
    for rel, kind in FILES:
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(_content(kind, rel, xplane_bytes))
        entries.append(path)
    for rel in EMPTY_DIRS:
        path = root / rel
        path.mkdir(parents=True, exist_ok=True)
        entries.append(path)

    # Fixed mtimes. Files and folders get distinct times in a fixed shuffled
    # order, neither the name order nor its reverse, so a listing that sorted
    # by mtime would not pass for one sorted by name. Folders are set after
    # their contents (setting a child's mtime does not touch its parent's).
    dirs = sorted(
        {p for e in entries for p in e.parents if root in p.parents} | set(
            e for e in entries if e.is_dir()
        ),
        key=lambda p: (-len(p.parts), str(p)),
    )
    files = [e for e in entries if not e.is_dir()]
    order = list(range(len(files) + len(dirs)))
    random.Random(20260101).shuffle(order)
    for k, path in zip(order, files + dirs):
        t = BASE_MTIME + k * 3600
        os.utime(path, (t, t))
    os.utime(root, (BASE_MTIME, BASE_MTIME))

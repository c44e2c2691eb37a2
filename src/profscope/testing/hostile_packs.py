"""Shared-cache packs a hostile (or broken) writer of the bucket could leave (issue 32),
made from an honest one: the record's commits are create-only, its packs are not, so
anyone who writes below the prefix can replace a committed entry's pack
(cache/shared.py, cache/pack.py). Each function takes the honest pack's bytes (the
record's ``entry.tar``) and returns the bytes to put in its place; the honest commit
stays, naming the true files, sizes and SHA-256s.

- :func:`tar_bomb`: the pack gzip-compressed, with its first file grown to ``expanded``
  bytes of zeros (300 MiB compress to about 300 KB; an earlier reader auto-detected the
  compression and wrote all of it before checking sizes);
- :func:`beyond_sizes`: uncompressed, the largest file followed by ``extra`` bytes more
  than its commit names (its header says so);
- :func:`garbled`: the same files at the same sizes, with bytes of one file's data
  inverted: only a checksum can tell;
- :func:`renamed`: a member named differently from the commit's file (the commit's names
  and the pack's differ, sizes the same);
- :func:`metadata_bomb`: the honest files after a pax header of ``size`` bytes, which
  tarfile reads into memory whole.
"""

from __future__ import annotations

import gzip
import io
import tarfile


def members(pack: bytes) -> list[tarfile.TarInfo]:
    """The pack's members, in order (``offset_data``: where each one's data starts)."""
    with tarfile.open(fileobj=io.BytesIO(pack), mode="r:") as tar:
        return tar.getmembers()


def _data(pack: bytes, m: tarfile.TarInfo) -> bytes:
    return pack[m.offset_data:m.offset_data + m.size]


def _tar(entries: list[tuple[tarfile.TarInfo, bytes | object]], *, mode: str = "w", **kwargs) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode=mode, format=tarfile.PAX_FORMAT, **kwargs) as tar:
        for info, data in entries:
            tar.addfile(info, io.BytesIO(data) if isinstance(data, bytes) else data)
    return out.getvalue()


def _info(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


class _Zeros:
    """``n`` zero bytes, read in pieces (a bomb is never held expanded)."""

    def __init__(self, n: int):
        self.left = n

    def read(self, size: int = -1) -> bytes:
        size = self.left if size is None or size < 0 else min(size, self.left)
        self.left -= size
        return bytes(size)


def tar_bomb(pack: bytes, expanded: int = 300 << 20) -> bytes:
    """The pack gzip-compressed, its first file grown to ``expanded`` zero bytes (its
    header says so), the others as they were."""
    ms = members(pack)
    out = io.BytesIO()
    with gzip.GzipFile(fileobj=out, mode="wb", compresslevel=9, mtime=0) as gz, \
            tarfile.open(fileobj=gz, mode="w|", format=tarfile.PAX_FORMAT) as tar:
        tar.addfile(_info(ms[0].name, expanded), _Zeros(expanded))
        for m in ms[1:]:
            tar.addfile(_info(m.name, m.size), io.BytesIO(_data(pack, m)))
    return out.getvalue()


def beyond_sizes(pack: bytes, extra: int = 32 << 20) -> bytes:
    ms = members(pack)
    big = max(ms, key=lambda m: m.size)
    return _tar([(_info(m.name, m.size + (extra if m is big else 0)),
                  _data(pack, m) + (bytes(extra) if m is big else b"")) for m in ms])


def garbled(pack: bytes, nbytes: int = 64) -> bytes:
    """The pack with ``nbytes`` of its largest file's data inverted in the middle, in
    place: the object keeps its size, every header its size."""
    big = max(members(pack), key=lambda m: m.size)
    start = big.offset_data + max(0, big.size // 2 - nbytes // 2)
    end = min(start + nbytes, big.offset_data + big.size)
    return pack[:start] + bytes(b ^ 0xFF for b in pack[start:end]) + pack[end:]


def renamed(pack: bytes) -> bytes:
    ms = members(pack)
    last = ms[-1]
    other = last.name[:-1] + ("_" if not last.name.endswith("_") else "-")
    return _tar([(_info(other if m is last else m.name, m.size), _data(pack, m)) for m in ms])


def metadata_bomb(pack: bytes, size: int = 8 << 20) -> bytes:
    ms = members(pack)
    head = _info(ms[0].name, ms[0].size)
    head.pax_headers = {"comment": "x" * size}
    return _tar([(head, _data(pack, ms[0]))] + [(_info(m.name, m.size), _data(pack, m)) for m in ms[1:]])


KINDS = {"tar_bomb": tar_bomb, "beyond_sizes": beyond_sizes, "garbled": garbled, "renamed": renamed,
         "metadata_bomb": metadata_bomb}

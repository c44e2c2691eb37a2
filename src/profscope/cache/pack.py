"""An entry's files as one tar, the shared record's *pack* (cache/shared.py), and taking
one apart without trusting it.

Whoever can write below the record's prefix can put any bytes under a pack's name, and a
pack, unlike its commit, is a plain upload that a later one replaces. So a pack is read as
hostile input, against its commit, which names every file with its size and SHA-256
(issue 32: a 332 KB gzipped pack had written 300 MB before it was refused, and a garbled
pack of the right sizes was taken and failed the trace views on every request):

- it is read as a stream of an **uncompressed** tar (tarfile mode ``r|``): the writer
  never compresses (:func:`write_pack`), so a gzip, bzip2 or xz "pack" is refused at its
  first block and cannot expand;
- through a reader that stops at the first byte past :func:`pack_bound`, the most a tar of
  the commit's files can take;
- a member must be a regular file the commit names and not yet seen, whose header gives
  the size the commit gives: that is checked on the header, before any of its data is
  read, so a member claiming 300 MB is refused with nothing written;
- a metadata header (pax, GNU long name) over :data:`META_MAX` is refused before tarfile
  reads it into memory;
- its data is copied to a new file, exactly the size named, and hashed on the way; a
  SHA-256 other than the commit's refuses the pack.

So a copy writes at most the bytes its commit names, and every file it keeps is the
committed one. A refused pack is a :class:`PackRefused`; the caller then converts the
entry itself (cache/shared.py ``_fetch``).
"""

from __future__ import annotations

import hashlib
import re
import tarfile
from pathlib import Path
from typing import BinaryIO

BLOCK = tarfile.BLOCKSIZE  # 512: every tar header and data block
# A pax or GNU long-name header's data is read into memory whole (tarfile _proc_pax,
# _proc_gnulong); ours hold a path, an mtime and a size: a few hundred bytes.
META_MAX = 64 << 10
_META_TYPES = (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.SOLARIS_XHDTYPE, tarfile.GNUTYPE_LONGNAME,
               tarfile.GNUTYPE_LONGLINK)
_SHA256 = re.compile(r"[0-9a-f]{64}")
_COPY = 1 << 20
MAX_FILES = 100_000  # a trace index is ~50 files


class PackRefused(Exception):
    """A pack, or its commit, that is not what the commit says: never extracted further."""


def _blocks(n: int) -> int:
    return -(-n // BLOCK) * BLOCK


def pack_bound(files: dict[str, tuple[int, str]]) -> int:
    """The most bytes an uncompressed tar of ``files`` (name -> (size, sha256)) takes, as
    :func:`write_pack` writes it: per file its data in 512-byte blocks, a ustar header, and
    a pax header of its own (one block) whose data holds the path (PAX_FORMAT writes one
    for a long or non-ASCII name, and for the fractional mtime a stat gives), a float
    mtime and room for the rest (one block more than the name); then the two zero blocks
    that end a tar, padded to tarfile's 10,240-byte record, and one record of slack."""
    per_file = sum(_blocks(size) + 3 * BLOCK + _blocks(len(name.encode()) + 64) for name, (size, _) in files.items())
    return per_file + 2 * tarfile.RECORDSIZE


def named_files(commit: dict) -> dict[str, tuple[int, str]]:
    """The files a commit names, name -> (size, sha256), each checked: a relative POSIX
    name with no ``..``/``.``/empty part (nothing but a file below the entry's folder), a
    size, a SHA-256 in lowercase hex. Raises PackRefused for anything else."""
    files = commit.get("files")
    if not isinstance(files, list) or not files or len(files) > MAX_FILES:
        raise PackRefused(f"the commit names no list of 1 to {MAX_FILES:,} files")
    out: dict[str, tuple[int, str]] = {}
    for item in files:
        if not (isinstance(item, list) and len(item) == 3):
            raise PackRefused(f"a commit names each file as [name, size, sha256], not {str(item)[:80]}")
        name, size, digest = item
        if not isinstance(name, str) or not _plain_name(name):
            raise PackRefused(f"the commit names {str(name)[:80]!r}, not a file below the entry's folder")
        if type(size) is not int or size < 0:
            raise PackRefused(f"the commit gives {name} the size {str(size)[:40]}")
        if not isinstance(digest, str) or not _SHA256.fullmatch(digest):
            raise PackRefused(f"the commit gives {name} no SHA-256")
        if name in out:
            raise PackRefused(f"the commit names {name} twice")
        out[name] = (size, digest)
    return out


def _plain_name(name: str) -> bool:
    parts = name.split("/")
    return bool(name) and "\\" not in name and "\x00" not in name and all(p not in ("", ".", "..") for p in parts)


class _Bounded:
    """A reader that raises PackRefused instead of returning the first byte past ``limit``
    and never asks its source for more than that one byte past. tarfile reads a stream
    10 KiB at a time; the source is asked for ``CHUNK`` at once (a bucket's file object
    costs far more per call than per byte: 100 MiB took 1.8 to 3.2 s in 10 KiB reads from
    gcsfs on the emulator, against 0.5 s downloaded whole)."""

    CHUNK = 4 << 20

    def __init__(self, f: BinaryIO, limit: int):
        self.f, self.limit = f, limit
        self.count = 0  # bytes handed on
        self.fetched = 0  # bytes read from ``f``: at most limit + 1
        self._buf, self._pos = b"", 0

    def read(self, n: int = -1) -> bytes:
        want = self.limit + 1 - self.count if n is None or n < 0 else n
        if len(self._buf) - self._pos < want:
            parts, got = [self._buf[self._pos:]], len(self._buf) - self._pos
            while got < want and self.fetched <= self.limit:
                chunk = self.f.read(min(max(want - got, self.CHUNK), self.limit + 1 - self.fetched))
                if not chunk:
                    break
                self.fetched += len(chunk)
                parts.append(chunk)
                got += len(chunk)
            self._buf, self._pos = b"".join(parts), 0
        data = self._buf[self._pos:self._pos + want]
        self._pos += len(data)
        self.count += len(data)
        if self.count > self.limit:
            raise PackRefused(f"the pack goes on past {self.limit:,} bytes, the most a tar of the files its commit "
                              "names takes")
        return data


class _Member(tarfile.TarInfo):
    """tarfile's member, refusing a metadata header too big to hold in memory before
    tarfile reads it (``_proc_member`` is where a TarInfo subclass chooses how each
    header's data is processed)."""

    def _proc_member(self, tar):
        if self.type in _META_TYPES and self.size > META_MAX:
            raise PackRefused(f"the pack has a {self.size:,}-byte metadata header (at most {META_MAX:,})")
        return super()._proc_member(tar)


def extract(f: BinaryIO, files: dict[str, tuple[int, str]], dest: Path) -> int:
    """Copy the files ``files`` names (:func:`named_files`) out of the pack read from
    ``f`` into the empty folder ``dest``; the bytes read from ``f``. Raises PackRefused on
    the first thing that differs from the commit (``dest`` may then hold the files taken
    so far: the caller removes it)."""
    source = _Bounded(f, pack_bound(files))
    left = dict(files)
    try:
        with tarfile.open(fileobj=source, mode="r|", tarinfo=_Member) as tar:
            for member in tar:
                if member.name not in left:
                    raise PackRefused(f"the pack holds {member.name[:120]!r} twice" if member.name in files else
                                      f"the pack holds {member.name[:120]!r}, which its commit does not name")
                if member.type not in (tarfile.REGTYPE, tarfile.AREGTYPE) or member.sparse is not None:
                    raise PackRefused(f"{member.name} is not a plain file in the pack")
                size, digest = left.pop(member.name)
                if member.size != size:
                    raise PackRefused(f"the pack's {member.name} is {member.size:,} bytes, its commit says {size:,}")
                _copy(tar.extractfile(member), size, digest, dest / member.name, member.name)
                if not left:
                    break  # the end-of-archive blocks and anything past them are never read
    except tarfile.TarError as e:
        raise PackRefused(f"not an uncompressed tar of the commit's files: {e}") from None
    if left:
        raise PackRefused(f"the pack lacks {len(left)} of the {len(files)} files its commit names "
                          f"({', '.join(sorted(left)[:3])})")
    return source.count


def _copy(src: BinaryIO, size: int, digest: str, path: Path, name: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    done = 0
    with open(path, "xb") as out:
        while done < size:
            chunk = src.read(min(_COPY, size - done))
            if not chunk:
                raise PackRefused(f"the pack ends inside {name}")
            h.update(chunk)
            out.write(chunk)
            done += len(chunk)
    if h.hexdigest() != digest:
        raise PackRefused(f"the pack's {name} has the size its commit names but not its SHA-256 (garbled)")


class _Hashing:
    """A file whose reads also feed a SHA-256 (the pack is written in one pass)."""

    def __init__(self, f: BinaryIO):
        self.f, self.h = f, hashlib.sha256()

    def read(self, n: int = -1) -> bytes:
        data = self.f.read(n)
        self.h.update(data)
        return data


def write_pack(entry: list[tuple[str, Path]], out: BinaryIO) -> list[list]:
    """Write ``entry`` (name in the entry, local path) to ``out`` as an uncompressed tar;
    the commit's ``files``: [name, size, sha256] for each (what :func:`extract` checks)."""
    files = []
    with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, path in entry:
            with open(path, "rb") as f:
                info = tar.gettarinfo(arcname=rel, fileobj=f)
                hashing = _Hashing(f)
                tar.addfile(info, hashing)
            files.append([rel, info.size, hashing.h.hexdigest()])
    return files

"""A log directory on any fsspec filesystem, confined to its root: a local folder,
``gs://`` (gcsfs), ``s3://`` (s3fs, the ``s3`` extra), ``az://``/``abfs://`` (adlfs, the
``azure`` extra) or ``memory://``; docs/logdirs.md says how each finds its credentials.

Listing is one recursive call (``fs.find``) whose result is kept for a few seconds: on an
object store that is one paginated object listing instead of a walk level by level, which
matters for buckets with thousands of profiles. Every path that arrives from outside goes through
:func:`safe_relpath` and, on local disks, is checked again after resolving symlinks.
"""

from __future__ import annotations

import hashlib
import os
import posixpath
import re
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from typing import IO, Any, Callable, Iterator

from profscope.errors import BadRequest, Forbidden, NotFound, ProfscopeError
from profscope.forksafe import renew_after_fork

_DRIVE = re.compile(r"^[A-Za-z]:")
MAX_NOTES = 200_000
# Remote files up to this size are copied whole, once per version, into ``copy_dir`` (the
# cache folder): gcsfs reads a parser's many small seeks as one HTTP request each (the
# 0.67 MB demo profile cost ~2,000 requests, 60 s on the emulator); one download is one
# streamed request. Bigger files are read through 8 MiB readahead blocks instead.
COPY_MAX_BYTES = 1 << 30
READ_BLOCK_BYTES = 8 << 20


@dataclass(frozen=True, slots=True)
class FileInfo:
    """One file below the root. ``path`` is relative, '/'-separated."""

    path: str
    size: int
    mtime: float | None = None
    # GCS: the object's generation (changes on every overwrite), else its md5; S3 and
    # Azure: the ETag.
    version: str | None = None

    @property
    def name(self) -> str:
        return posixpath.basename(self.path)

    @property
    def parent(self) -> str:
        return posixpath.dirname(self.path)

    def identity(self) -> str:
        """What changes when the content may have changed: the cache key's input part."""
        stamp = self.version if self.version is not None else repr(self.mtime)
        return f"{self.path}|{self.size}|{stamp}"


@dataclass(slots=True)
class Listing:
    files: dict[str, FileInfo] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=set)
    # head(info, n): a file's first n bytes (a ranged read on object stores), for readers
    # that must look inside a file to know what it is; None for a listing made by hand.
    head: Callable[[FileInfo, int], bytes] | None = field(default=None, repr=False, compare=False)
    # What those readers learnt, keyed by their own keys (with FileInfo.identity()): one
    # dict per LogDir, shared by its listings, so a file is looked into once per version.
    notes: dict[Any, Any] = field(default_factory=dict, repr=False, compare=False)


def safe_relpath(path: str) -> str:
    """Normalise a path that came from a URL; refuse anything that could leave the root.

    Refused: absolute paths, drive letters, backslashes, NUL, and any ``..`` component.
    Returns the '/'-separated relative path ('' for the root itself).
    """
    if path is None:
        raise BadRequest("missing path")
    if "\x00" in path or "\\" in path:
        raise BadRequest(f"invalid path {path!r}: contains a NUL or backslash")
    if path.startswith("/") or _DRIVE.match(path) or "://" in path:
        raise BadRequest(f"invalid path {path!r}: must be relative to the log directory")
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise BadRequest(f"invalid path {path!r}: '..' is not allowed")
    return "/".join(parts)


# The object stores a log directory may be on: URL scheme -> (fsspec protocol, the module
# that is its client, the extra that installs it; None: a dependency of profscope itself).
REMOTE_SCHEMES = {
    "gs": ("gcs", "gcsfs", None), "gcs": ("gcs", "gcsfs", None),
    "s3": ("s3", "s3fs", "s3"), "s3a": ("s3", "s3fs", "s3"),
    "az": ("abfs", "adlfs", "azure"), "abfs": ("abfs", "adlfs", "azure"), "abfss": ("abfs", "adlfs", "azure"),
}
_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
# abfs[s]://CONTAINER@ACCOUNT.dfs.core.windows.net/path (the Hadoop ABFS form, which adlfs
# reads too): the container is the path's first part and the account a client option.
_ABFS_HOST = re.compile(r"^([^/@]+)@([^./]+)\.(?:dfs|blob)\.core\.windows\.net(/.*)?$")


def _split_url(url: str) -> tuple[str, str]:
    """Return (protocol, root path as fsspec wants it)."""
    scheme = _SCHEME.match(url)
    name = scheme.group(1).lower() if scheme else None
    if name in REMOTE_SCHEMES:
        rest = url.split("://", 1)[1]
        host = _ABFS_HOST.match(rest)
        if host and REMOTE_SCHEMES[name][0] == "abfs":
            rest = host.group(1) + (host.group(3) or "")
        return REMOTE_SCHEMES[name][0], rest.strip("/")
    if name == "memory":
        return "memory", "/" + url.split("://", 1)[1].strip("/")
    if name == "file":
        url = url[len("file://") :]
    elif name is not None:
        # Before s3:// was read, such a URL was taken for a relative folder and refused as
        # "does not exist": say what is read instead.
        raise BadRequest(f"cannot read log directory {url}: profscope reads a local folder, gs://, s3://, "
                         "az:// or abfs:// (and memory://), not " + name + "://", file=url)
    return "file", os.path.realpath(os.path.expanduser(url))


def _url_options(url: str) -> dict:
    """Client options a URL itself carries: the account of an abfs://CONTAINER@ACCOUNT... URL."""
    rest = url.split("://", 1)[-1]
    host = _ABFS_HOST.match(rest)
    if host and _split_url(url)[0] == "abfs":
        return {"account_name": host.group(2)}
    return {}


def _client_module(url: str):
    """The fsspec client of a remote URL's scheme, or a clear error naming the extra that
    installs it (s3fs and adlfs are optional: ``pip install 'profscope[s3]'``)."""
    import importlib

    _, module, extra = REMOTE_SCHEMES[_SCHEME.match(url).group(1).lower()]
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise BadRequest(f"cannot read log directory {url}: its client {module} is not installed; "
                         f"install it with: pip install 'profscope[{extra}]'", file=url) from e


def _gcs_filesystem(storage_options: dict):
    # gcsfs >= 2026 first asks the bucket type over gRPC unless this is off; an emulator
    # (and some proxies) cannot answer, and every call then stalls ~60 s. Must be set
    # before gcsfs is imported.
    os.environ.setdefault("GCSFS_EXPERIMENTAL_ZB_HNS_SUPPORT", "false")
    import gcsfs

    options = dict(storage_options)
    emulator = os.environ.get("STORAGE_EMULATOR_HOST")
    if emulator and "endpoint_url" not in options:
        options["endpoint_url"] = emulator if "://" in emulator else f"http://{emulator}"
    if options.get("endpoint_url") and "token" not in options:
        options["token"] = "anon"
    # Our listing has its own short TTL; gcsfs's directory cache would never expire.
    options.setdefault("use_listings_cache", False)
    return gcsfs.GCSFileSystem(**options)


def _s3_filesystem(url: str, storage_options: dict):
    s3fs = _client_module(url)
    options = dict(storage_options)
    # botocore reads credentials and the region from AWS_* and ~/.aws itself; the endpoint
    # override (MinIO, moto, a proxy) is read here too, for clients older than botocore's
    # own AWS_ENDPOINT_URL support.
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint and "endpoint_url" not in options:
        options["endpoint_url"] = endpoint
    # Our listing has its own short TTL; s3fs's directory cache would never expire.
    options.setdefault("use_listings_cache", False)
    return s3fs.S3FileSystem(**options)


def _azure_filesystem(url: str, storage_options: dict):
    adlfs = _client_module(url)
    # adlfs reads AZURE_STORAGE_CONNECTION_STRING (Azurite's too), AZURE_STORAGE_ACCOUNT_NAME
    # with _KEY, _SAS_TOKEN or a service principal (_CLIENT_ID, _CLIENT_SECRET,
    # _TENANT_ID) itself, and falls back to DefaultAzureCredential for an account alone.
    options = {**_url_options(url), **storage_options}
    options.setdefault("use_listings_cache", False)
    return adlfs.AzureBlobFileSystem(**options)


class LogDir:
    """The files below one root URL, listed once per ``listing_ttl`` seconds."""

    def __init__(self, url: str, *, storage_options: dict | None = None, listing_ttl: float = 5.0,
                 copy_dir: str | os.PathLike | None = None):
        self.url = url
        # Where whole copies of remote files go (never the log directory); None: no copies.
        self.copy_dir = copy_dir
        self.protocol, self.root = _split_url(url)
        self._storage_options = dict(storage_options or {})
        # a local log directory is read with os and open(): fsspec is not even imported,
        # one of the modules that made the server's first answer slow
        self._fs = None if self.protocol == "file" else self._filesystem()
        self.listing_ttl = listing_ttl
        self._lock = threading.Lock()
        self._listing: Listing | None = None
        self._listed_at = 0.0
        self._notes: dict = {}
        renew_after_fork(self, LogDir._after_fork)

    @property
    def fs(self):
        if self._fs is None:
            self._fs = self._filesystem()
        return self._fs

    def _filesystem(self):
        if self.protocol == "gcs":
            return _gcs_filesystem(self._storage_options)
        if self.protocol == "s3":
            return _s3_filesystem(self.url, self._storage_options)
        if self.protocol == "abfs":
            return _azure_filesystem(self.url, self._storage_options)
        import fsspec

        return fsspec.filesystem(self.protocol, **self._storage_options)

    def _after_fork(self) -> None:
        # In a conversion worker (cache/worker.py): gcsfs (s3fs, adlfs alike) runs on an
        # event-loop thread that a fork does not copy (fsspec refuses: "This class is not
        # fork-safe"), so the child opens its own client, when it first needs one (not here, in the fork
        # handler, before the child has settled); the listing lock may have been held
        # by another thread.
        self._lock = threading.Lock()
        if self.protocol not in ("file", "memory"):
            self._fs = None

    def __repr__(self) -> str:
        return f"LogDir({self.url!r})"

    @property
    def is_local(self) -> bool:
        return self.protocol == "file"

    def check(self) -> None:
        """Fail early, with the URL in the message, when the root is not a readable folder."""
        try:
            with _store_errors(self.url):
                ok = os.path.isdir(self.root) if self.is_local else self.fs.isdir(self.root)
        except ProfscopeError:
            raise
        except Exception as e:  # noqa: BLE001 - any backend error is the user's to see
            raise NotFound(f"cannot open log directory {self.url}: {_first_line(e)}", file=self.url) from e
        if not ok:
            raise NotFound(f"log directory {self.url} does not exist or is not a folder", file=self.url)

    # -- listing -------------------------------------------------------------------------

    def listing(self, *, refresh: bool = False) -> Listing:
        """Every file and folder below the root (cached ``listing_ttl`` seconds)."""
        with self._lock:
            now = time.monotonic()
            if refresh or self._listing is None or now - self._listed_at > self.listing_ttl:
                with _store_errors(self.url):
                    listing = self._list_local() if self.is_local else self._list_remote()
                if len(self._notes) > MAX_NOTES:  # files rewritten many times: start over
                    self._notes.clear()
                listing.head, listing.notes = self.head, self._notes
                self._listing = listing
                self._listed_at = now
            return self._listing

    def files(self, *, refresh: bool = False) -> dict[str, FileInfo]:
        """All files below the root, keyed by relative path."""
        return self.listing(refresh=refresh).files

    def _list_remote(self) -> Listing:
        found = self.fs.find(self.root, detail=True, withdirs=True)
        prefix = self.root.rstrip("/") + "/"
        listing = Listing()
        for full, info in found.items():
            if self.protocol == "memory" and not full.startswith("/"):
                full = "/" + full
            if not full.startswith(prefix):
                continue
            rel = full[len(prefix) :].rstrip("/")
            if info.get("type") == "directory":
                listing.dirs.add(rel)
                continue
            listing.files[rel] = FileInfo(
                path=rel,
                size=int(info.get("size") or 0),
                mtime=_mtime(info),
                version=_version(info),
            )
            # Object stores have no folders: every prefix of an object is one.
            parent = posixpath.dirname(rel)
            while parent and parent not in listing.dirs:
                listing.dirs.add(parent)
                parent = posixpath.dirname(parent)
        return listing

    def _list_local(self) -> Listing:
        # os.walk does not follow directory symlinks; file symlinks are kept only when
        # they resolve inside the root, so nothing outside it is ever listed.
        listing = Listing()
        root = self.root
        for dirpath, dirnames, filenames in os.walk(root):
            rel_dir = os.path.relpath(dirpath, root).replace(os.sep, "/")
            rel_dir = "" if rel_dir == "." else rel_dir + "/"
            for name in dirnames:
                if not os.path.islink(os.path.join(dirpath, name)):
                    listing.dirs.add(rel_dir + name)
            for name in filenames:
                full = os.path.join(dirpath, name)
                if os.path.islink(full) and not _inside(os.path.realpath(full), root):
                    continue
                try:
                    st = os.stat(full)
                except OSError:
                    continue  # dangling link or vanished file
                rel = rel_dir + name
                listing.files[rel] = FileInfo(path=rel, size=st.st_size, mtime=st.st_mtime)
        return listing

    # -- access --------------------------------------------------------------------------

    def full_path(self, relpath: str) -> str:
        """The backend path of a relative path, after the confinement checks."""
        rel = safe_relpath(relpath)
        full = posixpath.join(self.root, rel) if rel else self.root
        if self.is_local:
            full = os.path.join(self.root, *rel.split("/")) if rel else self.root
            if not _inside(os.path.realpath(full), self.root):
                raise BadRequest(f"invalid path {relpath!r}: it points outside the log directory")
        return full

    def info(self, relpath: str) -> FileInfo:
        rel = safe_relpath(relpath)
        known = self.files().get(rel)
        if known is not None:
            return known
        known = self.files(refresh=True).get(rel)
        if known is None:
            raise NotFound(f"no file {rel!r} in {self.url}", file=rel)
        return known

    def open(self, relpath: str) -> IO[bytes]:
        info = self.info(relpath)
        local = self._local_copy(info)
        if local is not None:
            return open(local, "rb")
        if self.is_local:
            return open(self.full_path(info.path), "rb")
        with _store_errors(self.display_path(info.path)):
            return self.fs.open(self.full_path(info.path), "rb", block_size=READ_BLOCK_BYTES, cache_type="readahead")

    def local_file(self, relpath: str) -> str | None:
        """A path on this machine holding the file's bytes, as :meth:`open` reads them: the
        file itself in a local log directory, a remote file's whole copy (made now if need
        be); None for a remote file too big to copy."""
        info = self.info(relpath)
        if self.is_local:
            return self.full_path(info.path)
        return self._local_copy(info)

    def _local_copy(self, info: FileInfo) -> str | None:
        """A remote file's whole bytes in ``copy_dir``, keyed by the URL and the file's
        identity (path, size, generation or mtime), so a rewritten object is fetched again."""
        if self.is_local or self.copy_dir is None or info.size > COPY_MAX_BYTES:
            return None
        digest = hashlib.sha256(f"{self.url}|{info.identity()}".encode()).hexdigest()
        folder = os.path.join(os.fspath(self.copy_dir), digest[:2])
        path = os.path.join(folder, digest + "-" + info.name)
        if os.path.exists(path):
            return path
        os.makedirs(folder, exist_ok=True)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.part"
        try:
            with _store_errors(self.display_path(info.path)):
                self.fs.get_file(self.full_path(info.path), tmp)
            if os.path.getsize(tmp) != info.size:  # rewritten since it was listed
                raise NotFound(f"{self.display_path(info.path)} changed while it was read; try again", file=info.path)
            os.replace(tmp, path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return path

    def head(self, info: FileInfo, n: int) -> bytes:
        """The first ``n`` bytes of a listed file (fewer if it is shorter). On object stores
        this is one ranged request, not a download."""
        full = self.full_path(info.path)
        if info.size == 0:
            return b""
        local = None if self.is_local or self.copy_dir is None else self._copied(info)
        if self.is_local or local:
            with open(local or full, "rb") as f:
                return f.read(n)
        with _store_errors(self.display_path(info.path)):
            return self.fs.cat_file(full, start=0, end=min(n, info.size))

    def _copied(self, info: FileInfo) -> str | None:
        digest = hashlib.sha256(f"{self.url}|{info.identity()}".encode()).hexdigest()
        path = os.path.join(os.fspath(self.copy_dir), digest[:2], digest + "-" + info.name)
        return path if os.path.exists(path) else None

    def read_bytes(self, relpath: str) -> bytes:
        with self.open(relpath) as f:
            return f.read()

    def display_path(self, relpath: str) -> str:
        """How a file is named in messages: the URL a user would type."""
        return self.url.rstrip("/") + "/" + relpath


@contextmanager
def _store_errors(what: str) -> Iterator[None]:
    """An object store's refusal as the one error shape, naming the URL: s3fs raises
    ``PermissionError`` for AccessDenied (s3fs/errors.py maps the S3 codes to OSErrors),
    azure-core an ``HttpResponseError`` whose ``status_code`` is 403 for a wrong key or a
    missing role; gcsfs ``HttpError`` with ``code``. Anything else is left as it is."""
    try:
        yield
    except ProfscopeError:
        raise
    except Exception as e:
        status = getattr(e, "status_code", None) or getattr(e, "code", None)
        if isinstance(e, PermissionError) or status in (401, 403):
            raise Forbidden(f"cannot read {what}: the store refused access ({_first_line(e)}); "
                            "check the credentials profscope runs with (docs/logdirs.md)", file=what) from e
        if isinstance(e, FileNotFoundError) or status == 404:
            raise NotFound(f"cannot read {what}: not found ({_first_line(e)})", file=what) from e
        raise


def _first_line(e: BaseException) -> str:
    # azure-core's messages go on with the request id, time and the XML body
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _mtime(info: dict) -> float | None:
    # local/memory, gcsfs, gcsfs, s3fs, adlfs
    for key in ("mtime", "updated", "created", "LastModified", "last_modified"):
        value = info.get(key)
        if value is None:
            continue
        if isinstance(value, (int, float)):
            return float(value)
        if hasattr(value, "timestamp"):
            return value.timestamp()
        try:  # GCS JSON API: RFC 3339 text, e.g. "2026-11-29T18:51:13.123Z"
            return datetime.fromisoformat(str(value).replace("Z", "+00:00")).timestamp()
        except ValueError:
            return None
    return None


def _version(info: dict) -> str | None:
    # gcsfs object metadata (JSON API): "generation" changes on every write, "md5Hash"
    # with the content; s3fs "ETag" (the content's md5 for a single-part upload), adlfs
    # "etag" (new on every write).
    for key in ("generation", "md5Hash", "etag", "ETag"):
        if info.get(key):
            return str(info[key])
    return None

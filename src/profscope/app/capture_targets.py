"""The targets of a capture, written the short way: every worker of a job without typing
each ``host:port`` (issue 39 item 3).

- a list: ``a:1, b:2`` (commas, semicolons or one per line; ``#`` starts a comment, so a
  targets file is the same text: :func:`read_targets_file`);
- a range, as the shell's brace expansion writes it: ``worker-{0..255}:9999``,
  ``localhost:{9000..9007}``, ``w{00..15}:1`` (a bound with a leading zero pads every
  number to its width); several ranges in one address multiply;
- every address of a name: ``dns:///trainer-headless:9999`` (gRPC's spelling of a DNS
  name) is one target per address the name resolves to, as a Kubernetes headless service
  answers with one address per pod. It is resolved on the machine that captures and each
  address obeys the capture allow-list (:func:`expand_dns`).

:func:`parse_targets` expands ranges (no resolving: it is only text) and checks the count
against :data:`MAX_TARGETS` before expanding, so ``{0..99999999}`` costs nothing.
"""

from __future__ import annotations

import ipaddress
import math
import re
from pathlib import Path
from typing import TYPE_CHECKING

from profscope.errors import BadRequest, Forbidden, ProfscopeError
from profscope.storage.profiler_client import split_address

if TYPE_CHECKING:
    from profscope.app.capture import TargetPolicy

__all__ = ["DNS_PREFIX", "MAX_TARGETS", "expand_dns", "parse_targets", "read_targets_file"]

# The most profiler servers one capture records (one thread and one gRPC channel each).
MAX_TARGETS = 256
# gRPC's target URI for a DNS name (grpc/doc/naming.md): here, every address it resolves to.
DNS_PREFIX = "dns:///"
# The largest targets file read (one address a line: 256 of them are ~6 KB).
MAX_FILE_BYTES = 1 << 20
_RANGE = re.compile(r"\{(\d{1,9})\.\.(\d{1,9})\}")
_SPLIT = re.compile(r"[,;\n]")


def _items(text: str) -> list[str]:
    """The addresses of ``text``: split at commas, semicolons and line ends, ``#``
    comments dropped (a comment runs to the end of its line)."""
    lines = [line.split("#", 1)[0] for line in (text or "").splitlines()]
    return [t.strip() for t in _SPLIT.split("\n".join(lines)) if t.strip()]


def _ranges(item: str, what: str) -> list[tuple[int, int, int]]:
    """``(low, high, width)`` of each ``{a..b}`` in ``item``; braces that are not a range
    are an error naming the item."""
    found = [(int(a), int(b), len(a) if a.startswith("0") and len(a) > 1 else 0) for a, b in _RANGE.findall(item)]
    if "{" in _RANGE.sub("", item) or "}" in _RANGE.sub("", item):
        raise BadRequest(f"{what}: {item!r} has braces that are not a range: write a range as {{FIRST..LAST}}, "
                         "e.g. worker-{0..7}:9999 or localhost:{9000..9007}")
    for low, high, _ in found:
        if low > high:
            raise BadRequest(f"{what}: {item!r}: the range {{{low}..{high}}} runs backwards; write {{{high}..{low}}}")
    return found


def _expand(item: str, ranges: list[tuple[int, int, int]]) -> list[str]:
    out = [item]
    for low, high, width in ranges:
        out = [_RANGE.sub(str(n).zfill(width), t, count=1) for t in out for n in range(low, high + 1)]
    return out


def _normal(item: str, what: str) -> str:
    """``host:port`` as the capture names it (``[v6]:port``), or ``dns:///host:port``."""
    dns = item.lower().startswith(DNS_PREFIX)
    try:
        host, port = split_address(item[len(DNS_PREFIX):] if dns else item)
    except ProfscopeError as e:
        raise BadRequest(f"{what}: {e.message}") from None
    address = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
    return DNS_PREFIX + address if dns else address


def parse_targets(text: str, what: str = "targets") -> list[str]:
    """``a:1, b:2``, ``w-{0..7}:9999``, one per line with ``#`` comments -> the normalised
    ``host:port`` list (``dns:///`` names kept as they are, for :func:`expand_dns`), each
    checked, duplicates dropped; an error names ``what``, the field the addresses came in."""
    items = _items(text)
    if not items:
        raise BadRequest(f"{what}: no profiler address given: name the job's profiler server as HOST:PORT, "
                         "e.g. localhost:9999, or a range such as worker-{0..7}:9999")
    plans = [(item, _ranges(item, what)) for item in items]
    counts = [math.prod(high - low + 1 for low, high, _ in ranges) for _, ranges in plans]
    if sum(counts) > MAX_TARGETS:
        biggest = max(range(len(plans)), key=counts.__getitem__)
        alone = f" ({plans[biggest][0]} alone is {counts[biggest]:,})" if counts[biggest] > 1 else ""
        raise BadRequest(f"{what}: {sum(counts):,} addresses given{alone}; one capture takes at most {MAX_TARGETS} "
                         "(MAX_TARGETS): capture fewer at a time")
    out: list[str] = []
    for item, ranges in plans:
        for one in _expand(item, ranges):
            address = _normal(one, what)
            if address not in out:
                out.append(address)
    return out


def read_targets_file(path: str | Path) -> str:
    """The text of a targets file (one address or range a line, ``#`` comments), for
    :func:`parse_targets`; an error names the file."""
    p = Path(path).expanduser()
    try:
        with open(p, "rb") as f:
            data = f.read(MAX_FILE_BYTES + 1)
    except OSError as e:
        raise ProfscopeError(f"--targets-file {str(p)!r}: cannot read it ({e.strerror or e})") from None
    if len(data) > MAX_FILE_BYTES:
        raise ProfscopeError(f"--targets-file {str(p)!r} is over {MAX_FILE_BYTES >> 20} MiB; it should list addresses")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ProfscopeError(f"--targets-file {str(p)!r} is not UTF-8 text: it should list HOST:PORT, one a line") from None
    if not _items(text):
        raise ProfscopeError(f"--targets-file {str(p)!r} lists no address (one HOST:PORT a line, # for comments)")
    return text


def expand_dns(policy: TargetPolicy, target: str) -> list[tuple[str, str]]:
    """``(target, address to dial)`` pairs for one target of :func:`parse_targets`: itself
    and :meth:`TargetPolicy.route`'s answer, or for ``dns:///NAME:PORT`` one pair per
    address ``NAME`` resolves to (resolved once, here: the capture dials the addresses it
    checked). Each address must be allowed: loopback, an address pattern, or a name
    pattern that matches ``NAME`` (dialling the name would reach these same addresses)."""
    if not target.startswith(DNS_PREFIX):
        return [(target, policy.route(target))]
    host, port = split_address(target[len(DNS_PREFIX):])
    found = policy.resolve(host)
    ips = [ip for ip in map(_address, found) if ip is not None]
    if not ips:
        raise BadRequest(f"{target}: {host} does not resolve here" if not found
                         else f"{target}: {host} resolves to {', '.join(found)}, which are not addresses")
    by_name = any(p.matches_name(host, port) for p in policy.patterns)
    out = []
    for ip in ips:
        address = f"[{ip.compressed}]:{port}" if ip.version == 6 else f"{ip}:{port}"
        if not (by_name or policy.address_ok(ip, port)):
            raise Forbidden(
                f"refused to capture from {address} ({host} resolves to {', '.join(found)}): this server dials only "
                f"loopback profiler addresses" + (f" and those matching {', '.join(policy.allow)}" if policy.allow else "")
                + "; start profscope with --capture-allow PATTERN (e.g. --capture-allow '10.0.*' for addresses, "
                  f"'{host}' for every address of this name) to allow more")
        out.append((address, address))
    return out


def _address(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None

"""The HTTP server's defences, as one ASGI middleware in front of every route.

A profile viewer on ``127.0.0.1`` is still reachable from every web page its user opens:
a page can send requests to it (and, after a DNS rebinding, read the answers). So every
request passes, in this order:

1. **Host**: the name the browser thinks it talks to must be a loopback name or address
   (``localhost``, ``*.localhost``, ``127.0.0.0/8``, ``::1``), the ``--host`` the server was
   given, or a name passed with ``--allow-host`` (reverse proxies). A DNS-rebinding page
   has its own name in ``Host``, so it is refused (403), as Jupyter refuses it.
2. **Origin** (when present): a request from another origin is refused (403); only the
   server's own origin (``Origin`` equal to ``Host``) or an ``--allow-host`` name passes.
   ``Sec-Fetch-Site`` (sent by browsers on every request, also on ``<img>`` and
   ``<script>`` loads, which carry no ``Origin``) refuses cross-site and same-site
   subresource requests, so another page cannot start conversions here; a top-level
   navigation from another site (a shared link) may open the main page only.
3. **Length of the URL**: path and query string over the limits are a 414 before
   anything is parsed (uvicorn's own limit on a request head is raised above ours, so
   the answer is this JSON and not uvicorn's plain-text 400).
4. **Token** (when the server has one: by default when bound beyond loopback): the
   ``token`` query parameter, an ``Authorization: token ...`` (or ``Bearer``) header, or the
   cookie set after the first; none is a 401, a wrong one a 403. A browser that brings it
   in the URL gets the cookie and a redirect to the same URL without it, so the token
   does not stay in the address bar or the history.
5. **Query values**: each value over the limit is a 414, a NUL or bytes that are not
   UTF-8 (which is where lone surrogates end up) a 400.

Every answer, a refusal included, carries the security headers (a Content-Security-
Policy, ``X-Content-Type-Options``, ``Referrer-Policy``, ``X-Frame-Options``); every answer
of status 500 or more also ``Connection: close``, since uvicorn drops the connection after
an exception anyway and the client must know not to send its next request on it.

Refusals use the one error shape of profscope (errors.py): ``{"ok": false, "status": ...,
"error": ..., "file": null}``. docs/security.md describes it for users.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
import socket
from dataclasses import dataclass, field
from http.cookies import SimpleCookie
from urllib.parse import parse_qsl, unquote_to_bytes

import orjson

# -- policy ------------------------------------------------------------------------------

# The pages load only their own scripts (app.js, the tool scripts, Plotly from the plotly
# package) and fetch only their own API: nothing from elsewhere, no inline script. Styles
# need 'unsafe-inline': Plotly writes style="..." attributes into the SVG it draws and its
# modebar (d3's attr("style")), and the allocation-timeline page (frontend/templates/
# memory_viewer_timeline.html) styles its body inline; an inline style cannot run code,
# the script policy is what keeps data from becoming code. img-src data: is the
# favicon (base.html) and Plotly's PNG download; blob: in img-src the same download in
# some browsers. No 'unsafe-eval': Plotly's SVG charts, which are all the pages draw,
# run without it (tests/test_browser_security.py looks for violations in Chromium).
CSP = "; ".join((
    "default-src 'none'",
    "script-src 'self'",
    "style-src 'self' 'unsafe-inline'",
    "img-src 'self' data: blob:",
    "font-src 'self'",
    "connect-src 'self'",
    "form-action 'self'",
    "base-uri 'none'",
    "frame-ancestors 'self'",
))
SECURITY_HEADERS = (
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),  # never send a URL (a run name, a token) elsewhere
    (b"x-frame-options", b"SAMEORIGIN"),  # frame-ancestors for browsers without CSP 2
    (b"cross-origin-opener-policy", b"same-origin"),
    (b"cross-origin-resource-policy", b"same-origin"),  # no <script src> of our JSON elsewhere
)

MAX_PATH_BYTES = 4 * 1024
MAX_QUERY_BYTES = 64 * 1024
MAX_VALUE_BYTES = 8 * 1024
MAX_PARAMS = 256
# uvicorn (h11) refuses a request head over 16 KiB with a plain-text 400; the CLI raises
# that to this, so that a query up to MAX_QUERY_BYTES gets this module's JSON answer.
H11_MAX_HEAD_BYTES = MAX_QUERY_BYTES + MAX_PATH_BYTES + 32 * 1024

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
WILDCARD_BINDS = frozenset({"0.0.0.0", "::", ""})
# Starlette's TestClient sends ``Host: testserver``. create_app() without a Security
# (tests, embedding an app in-process) accepts it; the CLI never does.
TEST_CLIENT_HOST = "testserver"
TOKEN_PARAM = "token"


def is_loopback(name: str) -> bool:
    """A loopback name (``localhost``, ``*.localhost``, RFC 6761) or address."""
    name = name.lower().rstrip(".")
    if name in LOOPBACK_NAMES or name.endswith(".localhost"):
        return True
    addr = _ip(name)
    if addr is None:
        return False
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped  # ::ffff:127.0.0.1
    return addr.is_loopback


def _ip(name: str):
    try:
        return ipaddress.ip_address(name.strip("[]").split("%", 1)[0])
    except ValueError:
        return None


def split_host(value: str) -> tuple[str, str] | None:
    """``Host`` (or an origin's netloc) -> (lower-case name, port or ""); None if malformed."""
    value = value.strip()
    if value.startswith("["):
        end = value.find("]")
        if end < 0:
            return None
        name, rest = value[1:end], value[end + 1:]
        if rest and not rest.startswith(":"):
            return None
        port = rest[1:]
    elif value.count(":") > 1:
        return None  # an IPv6 address must be bracketed
    else:
        name, _, port = value.partition(":")
    if port and not (port.isascii() and port.isdigit() and len(port) <= 5):
        return None
    if not name or any(c in name for c in "/\\@ \t") or not name.isascii():
        return None
    return name.lower().rstrip("."), port


def new_token() -> str:
    return secrets.token_hex(24)


@dataclass(frozen=True)
class Security:
    """What the guard lets through. ``bind_host`` is the ``--host`` the server was given;
    ``allow_hosts`` are extra names (``--allow-host``; ``*.example.com`` matches any name
    under it, ``*`` any name at all); ``token`` None means no token is asked for."""

    bind_host: str = "127.0.0.1"
    allow_hosts: tuple[str, ...] = ()
    token: str | None = None
    port: int | None = None
    local_names: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def for_bind(cls, host: str, port: int, allow_hosts=(), token: str | None = None) -> Security:
        """The CLI's policy for ``serve --host HOST``: a wildcard bind also accepts this
        machine's own host names (the ones a colleague types)."""
        names: set[str] = set()
        if host in WILDCARD_BINDS:
            for name in (socket.gethostname(), socket.getfqdn()):
                if name:
                    names.add(name.lower().rstrip("."))
        return cls(bind_host=host, allow_hosts=tuple(a.lower().rstrip(".") for a in allow_hosts),
                   token=token, port=port, local_names=frozenset(names))

    @property
    def cookie_name(self) -> str:
        # Cookies ignore the port: two servers on one machine must not overwrite each
        # other's cookie.
        return f"profscope-token-{self.port}" if self.port else "profscope-token"

    def host_allowed(self, name: str) -> bool:
        if is_loopback(name) or self._listed(name):
            return True
        bind = self.bind_host.lower().strip("[]").rstrip(".")
        if bind in WILDCARD_BINDS:
            # Bound on every interface: any address of this machine may be the one dialled.
            # An address cannot be a rebinding name (a rebinding page's Host is its own
            # DNS name), so any IP literal passes, and so do this machine's names.
            return _ip(name) is not None or name in self.local_names
        return name == bind or (_ip(name) is not None and _ip(name) == _ip(bind))

    def _listed(self, name: str, any_name: bool = True) -> bool:
        for allowed in self.allow_hosts:
            if (allowed == "*" and any_name) or name == allowed or (allowed.startswith("*.") and name.endswith(allowed[1:])):
                return True
        return False

    def origin_allowed(self, origin: str, host: str) -> bool:
        """Same origin (the origin's name and port are the request's ``Host``), or a name
        given with ``--allow-host`` (a proxy that rewrites ``Host`` keeps the browser's
        origin). ``--allow-host '*'`` lifts the Host check only: origins stay checked."""
        scheme, sep, netloc = origin.partition("://")
        if not sep or scheme not in ("http", "https"):
            return False  # "null" (a sandboxed frame, a file:// page), other schemes
        theirs, own = split_host(netloc), split_host(host)
        if theirs is None or own is None:
            return False
        default = "443" if scheme == "https" else "80"
        if theirs[0] == own[0] and (theirs[1] or default) == (own[1] or default):
            return True
        return self._listed(theirs[0], any_name=False)


# -- the middleware ----------------------------------------------------------------------


def _error_body(status: int, message: str) -> bytes:
    return orjson.dumps({"ok": False, "status": status, "error": message, "file": None})


class Guard:
    """ASGI middleware applying a :class:`Security` (see the module docstring)."""

    def __init__(self, app, security: Security):
        self.app = app
        self.security = security

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        answer = self.check(scope)
        if answer is not None:
            status, message, extra = answer
            body = b"" if status < 400 else _error_body(status, message)
            kind = [(b"content-type", b"application/json")] if body else []
            await _send(send, status, body, [*kind, *extra])
            return
        await self.app(scope, receive, _with_headers(send))

    def check(self, scope) -> tuple[int, str, list] | None:
        """None to let the request through (``scope`` may lose its token parameter), else
        (status, message, extra headers) to answer instead."""
        sec = self.security
        headers = _headers(scope)
        host = headers.get("host", "")
        parts = split_host(host)
        if parts is None:
            return 400, f"malformed Host header {host[:100]!r}", []
        if not sec.host_allowed(parts[0]):
            return 403, (f"refused: Host {parts[0][:100]!r} is not this server's name (a DNS-rebinding page "
                         "would look like this); behind a reverse proxy, start profscope with --allow-host NAME"), []
        origin = headers.get("origin")
        if origin is not None and not sec.origin_allowed(origin, host):
            return 403, f"refused: a request from another origin ({origin[:100]!r}); profscope answers its own pages only", []
        site = headers.get("sec-fetch-site")
        if site in ("cross-site", "same-site"):
            # <img>/<script> loads from another page carry no Origin, but browsers say
            # where they come from here. Only a top-level navigation to the main page
            # (a shared link) passes; its own requests are then same-origin.
            navigation = headers.get("sec-fetch-mode") == "navigate" and scope["method"] == "GET"
            if not (navigation and scope["path"] == "/"):
                return 403, f"refused: a {site} request; profscope answers its own pages only", []
        raw_path = scope.get("raw_path") or scope["path"].encode("utf-8", "surrogateescape")
        query = scope.get("query_string", b"")
        if len(raw_path) > MAX_PATH_BYTES:
            return 414, f"the URL path is {len(raw_path):,} bytes; the limit is {MAX_PATH_BYTES:,}", []
        if len(query) > MAX_QUERY_BYTES:
            return 414, f"the query string is {len(query):,} bytes; the limit is {MAX_QUERY_BYTES:,}", []
        bad = _bad_text(raw_path)
        if bad:
            return 400, f"the URL path {bad}", []
        try:
            pairs = _pairs(query)
        except _TooLong as e:
            return 414, str(e), []
        except ValueError as e:
            return 400, str(e), []
        if sec.token is not None:
            answer = self._check_token(scope, headers, pairs, raw_path)
            if answer is not None:
                return answer
        if any(k == TOKEN_PARAM for k, _ in pairs):
            # The token is the guard's: no route sees it (nor keys a cache entry by it).
            scope["query_string"] = _without_token(query)
        return None

    def _check_token(self, scope, headers, pairs, raw_path: bytes):
        sec = self.security
        given = [v for k, v in pairs if k == TOKEN_PARAM]
        if given:
            if not _same(given[-1], sec.token):
                return 403, "refused: wrong token (open the URL that profscope serve printed)", []
            if _browser_navigation(scope, headers):
                # Keep the token out of the address bar and history: the cookie carries it.
                rest = _without_token(scope.get("query_string", b""))
                location = raw_path + (b"?" + rest if rest else b"")
                cookie = f"{sec.cookie_name}={sec.token}; Path=/; HttpOnly; SameSite=Strict"
                return 302, "", [(b"location", location), (b"set-cookie", cookie.encode()),
                                 (b"cache-control", b"no-store")]
            return None  # a script with ?token=...: answered, as by Jupyter
        auth = headers.get("authorization", "")
        if auth:
            scheme, _, value = auth.partition(" ")
            if scheme.lower() in ("token", "bearer") and _same(value.strip(), sec.token):
                return None
            return 403, "refused: wrong token in the Authorization header", []
        cookie = _cookie(headers.get("cookie", ""), sec.cookie_name)
        if cookie is not None:
            if _same(cookie, sec.token):
                return None
            return 403, ("refused: the token cookie is stale (the server restarted?); "
                         "open the URL that profscope serve printed"), []
        return 401, ("this server asks for a token: open the URL that profscope serve printed (it ends in ?token=...), "
                     "or send the header 'Authorization: token ...'"), [(b"www-authenticate", b'Token realm="profscope"')]


def _without_token(query: bytes) -> bytes:
    """The raw query string less its ``token`` pairs, the others byte for byte."""
    return b"&".join(p for p in query.split(b"&") if p and p.split(b"=", 1)[0] != TOKEN_PARAM.encode())


def _same(a: str, b: str) -> bool:
    return hmac.compare_digest(a.encode("utf-8", "surrogateescape"), b.encode("utf-8", "surrogateescape"))


def _browser_navigation(scope, headers) -> bool:
    """A browser opening the URL (not a script asking for data, which gets its answer)."""
    if scope["method"] != "GET":
        return False
    return headers.get("sec-fetch-mode") == "navigate" or "text/html" in headers.get("accept", "")


def _cookie(header: str, name: str) -> str | None:
    if not header:
        return None
    jar = SimpleCookie()
    try:
        jar.load(header)
    except Exception:  # a malformed Cookie header from elsewhere: as if none
        return None
    morsel = jar.get(name)
    return morsel.value if morsel is not None else None


def _headers(scope) -> dict[str, str]:
    out: dict[str, str] = {}
    for k, v in scope.get("headers", ()):
        out.setdefault(k.decode("latin-1").lower(), v.decode("latin-1"))
    return out


def _bad_text(raw: bytes) -> str | None:
    """Why percent-decoded ``raw`` cannot be text: a NUL, or not UTF-8 (lone surrogates
    are encoded as bytes that UTF-8 forbids, %ED%A0%80)."""
    data = unquote_to_bytes(raw)
    if b"\x00" in data:
        return "holds a NUL character"
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return "is not valid UTF-8 (a lone surrogate?)"
    return None


def _pairs(query: bytes) -> list[tuple[str, str]]:
    """The query's (name, value) pairs, checked; ValueError names the first bad one."""
    if not query:
        return []
    text = query.decode("latin-1")
    pairs = parse_qsl(text, keep_blank_values=True, encoding="latin-1", max_num_fields=None)
    if len(pairs) > MAX_PARAMS:
        raise ValueError(f"{len(pairs)} query parameters; the limit is {MAX_PARAMS}")
    out = []
    for k, v in pairs:
        kb, vb = k.encode("latin-1"), v.encode("latin-1")
        try:
            name = kb.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("a query parameter name is not valid UTF-8 (a lone surrogate?)") from None
        shown = name[:40]
        if len(kb) > 256:
            raise ValueError(f"a query parameter name is {len(kb):,} bytes; the limit is 256")
        if len(vb) > MAX_VALUE_BYTES:
            raise _TooLong(f"parameter {shown!r} is {len(vb):,} bytes; the limit is {MAX_VALUE_BYTES:,}")
        if b"\x00" in kb or b"\x00" in vb:
            raise ValueError(f"parameter {shown!r} holds a NUL character")
        try:
            value = vb.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError(f"parameter {shown!r} is not valid UTF-8 (a lone surrogate?)") from None
        out.append((name, value))
    return out


class _TooLong(ValueError):
    pass


def _with_headers(send):
    async def wrapped(message):
        if message["type"] == "http.response.start":
            message = dict(message)
            message["headers"] = add_headers(list(message.get("headers", [])), message["status"])
        await send(message)

    return wrapped


def add_headers(headers: list, status: int) -> list:
    """``headers`` (raw ASGI pairs) with the security headers that are not set yet, and
    ``Connection: close`` on a 5xx."""
    present = {k.lower() for k, _ in headers}
    headers.extend((k, v) for k, v in SECURITY_HEADERS if k not in present)
    if status >= 500 and b"connection" not in present:
        headers.append((b"connection", b"close"))
    return headers


async def _send(send, status: int, body: bytes, headers: list) -> None:
    headers = add_headers([*headers, (b"content-length", str(len(body)).encode())], status)
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})

"""The first answers of ``profscope serve``, given before FastAPI and uvicorn are imported.

Importing FastAPI (pydantic) and uvicorn, and building the app, takes 0.25-0.35 s on the
project's 2-core machine, several times the rest of the start. So the CLI binds the
socket, builds the workspace and starts a :class:`QuickStart` thread on that socket at
once; the thread answers the page (``/``) and the run lists (``/api/runs``, XProf's
``/data/plugin/profile/runs``) with the same bodies, status and headers as the routes
(the bodies come from the functions the routes call: :func:`index_html`,
app/run_list.py), through the same guard (server/guard.py's ``Guard.check``).

Every other request waits for the full app, and so does any request the thread is not
sure of (a method other than GET, a body, HTTP/1.0, an ``Upgrade``, a query the routes
would read, a head not complete in one read, a guard refusal or token redirect): the
thread reads request heads with ``MSG_PEEK`` and consumes only those it answers, so a
connection it does not answer still holds its whole request in the kernel's buffer.
When uvicorn has started (:meth:`QuickStart.hand_over`, called by server/app.py's
``Server.startup``), each connection the thread holds is handed to uvicorn's own
protocol (``loop.connect_accepted_socket``), which reads the request as if it had
accepted the connection itself; kept-alive connections go the same way, between two
requests. From then on uvicorn alone accepts.
"""

from __future__ import annotations

import email.utils
import functools
import gzip
import logging
import selectors
import socket
import threading
import time
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl

import h11
import orjson

from profscope import __version__
from profscope.server.guard import H11_MAX_HEAD_BYTES, Guard, Security, add_headers

if TYPE_CHECKING:
    import asyncio

log = logging.getLogger("profscope.server.quick_start")

JSON = b"application/json"
HTML = b"text/html; charset=utf-8"  # Starlette's HTMLResponse
# The app's GZipMiddleware too (server/app.py). Level 1: a busy timeline window (3.5 MB
# of JSON) took 58 ms of CPU to deflate at level 5 and 19 ms at 1, against ~10 ms to make
# it (an XProf window of 7.7 MB: 45 against 23 ms), for answers 23-26 % larger (1.05
# against 0.85 MB): what a slow link (an ssh tunnel) still carries fast enough.
GZIP_MIN, GZIP_LEVEL = 2048, 1


def index_html(logdir_url: str, rows=None) -> str:
    """The dashboard's page (``GET /``) of the tools ``rows`` (name, title, page modules):
    the app passes the tool table's (``tool_table.page_rows()``); here, by default,
    app/tool_pages.py's, where the table's rows read their titles and pages: importing
    the table imports the app modules its rows name, a third of the first page's CPU
    (docs/performance.md, issue 40)."""
    from profscope.app import tool_pages
    from profscope.frontend import render

    rows = tool_pages.ROWS if rows is None else rows
    # Every tool's title, for the shell's tool picker to name the open tool on a run
    # that has no input for it (the run's own tools come with /api/run).
    return render.page("index.html", version=__version__, logdir=logdir_url,
                       pages=tool_pages.page_modules(rows), titles=tool_pages.titles(rows))


def _api_runs(logdir, query: list) -> tuple[bytes, bytes] | None:
    from profscope.app.run_list import runs_listing, runs_of

    return (orjson.dumps(runs_listing(logdir, runs_of(logdir))), JSON) if not query else None


def _xprof_runs(logdir, query: list) -> tuple[bytes, bytes] | None:
    from profscope.app.run_list import runs_of

    # Without session_path / run_path, Workspace.runs_at is runs(); with them the route
    # checks the paths against the log directory (its errors): the full app answers.
    return (orjson.dumps([run.name for run in runs_of(logdir)]), JSON) if not query else None


def _index(logdir, query: list) -> tuple[bytes, bytes] | None:
    # tag= (an XProf link) is a redirect the route decides with the tool table
    return None if any(k == "tag" for k, _ in query) else (_page(logdir.url), HTML)


@functools.lru_cache(maxsize=4)
def _page(logdir_url: str) -> bytes:
    # The page depends on the log directory's URL only (the tool table and the templates
    # are the package's): rendered once, in the thread's idle time (QuickStart._warm_up)
    return index_html(logdir_url).encode()


ROUTES = {b"/": _index, b"/api/runs": _api_runs, b"/data/plugin/profile/runs": _xprof_runs}


class QuickStart:
    """Answers :data:`ROUTES` on ``sock`` until :meth:`hand_over` (module docstring)."""

    def __init__(self, sock: socket.socket, logdir, security: Security):
        # logdir: the workspace's storage.LogDir (the server layer names no storage type)
        self.sock = sock
        self.logdir = logdir
        self.guard = Guard(None, security)
        self.answered = 0  # requests answered here (tests, the benchmark)
        self._lock = threading.Lock()
        self._target: tuple[asyncio.AbstractEventLoop, object] | None = None
        self._stopped = False
        self._tasks: set = set()
        # Set once what the first answers need is imported and the page rendered: the CLI
        # waits for it before importing the rest (the workspace, FastAPI), which would
        # otherwise share the interpreter with the first answers. Nothing is imported
        # twice: the workspace and the app import the same modules.
        self.warm = threading.Event()
        self._warm_steps = [self._warm_runs, self._warm_page]
        self._thread = threading.Thread(target=self._run, name="profscope-quick-start", daemon=True)

    def start(self) -> QuickStart:
        self._thread.start()
        return self

    def hand_over(self, loop: asyncio.AbstractEventLoop, protocol_factory) -> None:
        """uvicorn serves on ``loop`` now: give it every connection held, then stop."""
        with self._lock:
            self._target = (loop, protocol_factory)

    def stop(self) -> None:
        """Stop without handing over (the server is exiting): held connections are closed."""
        with self._lock:
            self._stopped = True
        self._thread.join(5)

    # -- the thread ----------------------------------------------------------------------

    def _run(self) -> None:
        open_: list[socket.socket] = []  # connections whose next request may be answered here
        held: list[socket.socket] = []  # connections waiting for uvicorn
        try:
            self._answer_until_hand_over(open_, held)
        except Exception:  # noqa: BLE001 - what is held still goes to uvicorn, which answers it
            log.exception("the quick start stopped answering; the app answers from its start")
        while True:
            with self._lock:
                target, stopped = self._target, self._stopped
            if stopped or target is not None:
                break
            time.sleep(0.02)
        for conn in [*held, *open_]:
            if target is not None:
                self._give(conn, *target)
            else:
                conn.close()

    def _answer_until_hand_over(self, open_: list[socket.socket], held: list[socket.socket]) -> None:
        # A selector (epoll), not select(): select() refuses a descriptor over 1023, and a
        # process may hold that many (a test run's did: the thread died, and what it held
        # waited for ever).
        with selectors.DefaultSelector() as sel:
            sel.register(self.sock, selectors.EVENT_READ)
            while True:
                with self._lock:
                    if self._stopped or self._target is not None:
                        return
                ready = sel.select(0 if self._warm_steps else 0.02)
                if not ready and self._warm_steps:
                    self._warm_up()
                for key, _ in ready:
                    s = key.fileobj
                    if s is self.sock:
                        conn = self._accept()
                        if conn is not None:
                            open_.append(conn)
                            sel.register(conn, selectors.EVENT_READ)
                        continue
                    state = self._serve(s)
                    if state == "open":
                        continue
                    open_.remove(s)
                    sel.unregister(s)
                    if state == "held":
                        held.append(s)

    def _warm_up(self) -> None:
        """One step of the warm-up, between requests (a request never waits for it)."""
        step = self._warm_steps.pop(0)
        try:
            step()
        except Exception:  # noqa: BLE001 - the request that needs it meets the error (the app answers it)
            pass
        if not self._warm_steps:
            self.warm.set()

    def _warm_runs(self) -> None:
        import profscope.app.run_list  # noqa: F401 - discovery and the readers of file heads

    def _warm_page(self) -> None:
        _page(self.logdir.url)

    def _accept(self) -> socket.socket | None:
        try:
            conn, _ = self.sock.accept()
        except (BlockingIOError, InterruptedError, ConnectionAbortedError):
            return None  # uvicorn (started meanwhile) or the client was first
        conn.settimeout(5.0)
        return conn

    def _serve(self, conn: socket.socket) -> str:
        """Answer the next request on ``conn`` if it is one of ours: "open" (answered, kept
        alive), "closed", or "held" (left unread for uvicorn)."""
        try:
            data = conn.recv(H11_MAX_HEAD_BYTES, socket.MSG_PEEK)
        except OSError:
            data = b""
        if not data:
            conn.close()
            return "closed"
        end = data.find(b"\r\n\r\n")
        if end < 0:
            return "held"
        head = data[: end + 4]
        answer = self._answer(head)
        if answer is None:
            return "held"
        response, close = answer
        self.answered += 1
        try:
            _consume(conn, len(head))
            conn.sendall(response)
        except OSError:
            close = True
        if close:
            conn.close()
            return "closed"
        return "open"

    def _answer(self, head: bytes) -> tuple[bytes, bool] | None:
        """The response to ``head``, and whether to close after it; None: uvicorn's.
        h11 (uvicorn's own HTTP/1.1 parser) reads the head and frames the answer."""
        http = h11.Connection(h11.SERVER, max_incomplete_event_size=H11_MAX_HEAD_BYTES)
        http.receive_data(head)
        try:
            request = http.next_event()
        except h11.RemoteProtocolError:
            return None  # a malformed head: uvicorn's h11 answers it
        if not isinstance(request, h11.Request) or request.method != b"GET" or request.http_version != b"1.1":
            return None
        raw_path, _, query = request.target.partition(b"?")
        route = ROUTES.get(raw_path)
        if route is None:
            return None
        headers = list(request.headers)  # (lower-case name, value), as ASGI's scope has them
        if {k for k, _ in headers} & {b"content-length", b"transfer-encoding", b"upgrade", b"expect"}:
            return None
        scope = {"type": "http", "method": "GET", "path": raw_path.decode(), "raw_path": raw_path,
                 "query_string": query, "headers": headers}
        if self.guard.check(scope) is not None:
            return None  # a refusal or the token's redirect: the app's answer, unchanged
        pairs = parse_qsl(scope["query_string"].decode("latin-1"), keep_blank_values=True)
        try:
            got = route(self.logdir, pairs)
        except Exception:  # noqa: BLE001 - the app's route answers it, in the one error shape
            return None
        if got is None:
            return None
        body, media_type = got
        response = _response(http, body, media_type, headers)
        return response, http.our_state is h11.MUST_CLOSE

    def _give(self, conn: socket.socket, loop: asyncio.AbstractEventLoop, factory) -> None:
        conn.setblocking(False)

        async def adopt():
            try:
                await loop.connect_accepted_socket(factory, conn)
            except OSError:
                conn.close()

        def schedule():
            task = loop.create_task(adopt())
            self._tasks.add(task)  # the loop keeps only a weak reference
            task.add_done_callback(self._tasks.discard)

        loop.call_soon_threadsafe(schedule)


def _consume(conn: socket.socket, n: int) -> None:
    """Read exactly the ``n`` bytes peeked (the request head), no more."""
    while n:
        chunk = conn.recv(n)
        if not chunk:
            raise ConnectionResetError
        n -= len(chunk)


def _response(http: h11.Connection, body: bytes, media_type: bytes, request_headers: list) -> bytes:
    """The bytes uvicorn would send for the route's Response, behind the app's gzip and
    guard middlewares; h11 adds ``Connection: close`` where the request asked for it."""
    headers = [(b"date", email.utils.formatdate(usegmt=True).encode())]
    accept = b", ".join(v for k, v in request_headers if k == b"accept-encoding")
    if len(body) >= GZIP_MIN and b"gzip" in accept:
        body = gzip.compress(body, GZIP_LEVEL)
        headers += [(b"content-encoding", b"gzip"), (b"vary", b"Accept-Encoding")]
    headers += [(b"content-length", str(len(body)).encode()), (b"content-type", media_type)]
    headers = add_headers(headers, 200)
    return (http.send(h11.Response(status_code=200, reason=b"OK", headers=headers))
            + http.send(h11.Data(data=body)) + http.send(h11.EndOfMessage()))

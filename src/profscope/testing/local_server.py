"""Live servers for tests: an ASGI app served by a real uvicorn on 127.0.0.1 in a thread
of the test process (``serve_in_thread``), or ``python -m profscope`` in its own process
as a user runs it (``profscope_server``)."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager


@contextmanager
def serve_in_thread(app, **config):
    """Yield the free port ``app`` listens on; ``config``: more ``uvicorn.Config`` options."""
    import uvicorn

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(128)
    options = {"log_level": "warning", "access_log": False, "lifespan": "off", **config}
    server = uvicorn.Server(uvicorn.Config(app, **options))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "uvicorn did not start"
        time.sleep(0.05)
    try:
        yield sock.getsockname()[1]
    finally:
        server.should_exit = True
        thread.join(timeout=20)
        sock.close()


@contextmanager
def profscope_server(*args: str):
    """Run ``python -m profscope ARGS`` as a user would; yield (url, output lines so far).
    The server gets a process group of its own, which is killed when the test is done:
    a conversion worker it forked never outlives the test, whatever state it was left in."""
    with profscope_process(*args) as (url, lines, _):
        yield url, lines


@contextmanager
def profscope_process(*args: str):
    """:func:`profscope_server`, yielding its ``Popen`` too (url, output lines so far,
    process): for a test that reads what the server process itself spent
    (``/proc/<pid>/stat``), apart from the conversion workers it reaped."""
    proc = subprocess.Popen([sys.executable, "-m", "profscope", *args], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            m = re.search(r"serving at (http://\S+)", line)
            if m:
                # the rest of its output keeps coming into ``lines`` (a test's message shows it)
                threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True).start()
                yield m.group(1), lines, proc
                break
        else:
            raise AssertionError("profscope did not start:\n" + "".join(lines))
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        finally:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass  # the server and everything it started have exited
            proc.wait()
            proc.stdout.close()

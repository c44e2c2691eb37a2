"""An ASGI app served by a real uvicorn on 127.0.0.1, in a thread of the test process."""

from __future__ import annotations

import socket
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

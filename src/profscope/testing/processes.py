"""What the test servers started as processes share (moto's S3 server, Azurite, a JAX
profiler job, the GCS emulator's port): a free local port, a stop that never hangs, and
the ``with`` shape of a server process (start, wait until it answers, set it up, stop it
on any error on the way)."""

from __future__ import annotations

import signal
import socket
import subprocess
import time


def free_port() -> int:
    """A port on 127.0.0.1 no one listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def interruptible() -> None:
    """``preexec_fn`` of a child a test sends SIGINT (Ctrl+C): SIGINT's default disposition
    in the child, whatever this process inherited. A shell without job control starts a
    background command with SIGINT ignored (POSIX, asynchronous lists), the whole test run
    inherits that, and Python keeps an ignored SIGINT ignored: the child would never see
    the Ctrl+C the test sends it."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Terminate, and kill what has not exited after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


class ServerProcess:
    """A test server run as a child process for the length of a ``with`` block. A
    subclass gives ``_popen`` (start it), ``_ready`` (true once it answers; raise to give
    up early) and, if it needs one, ``_setup`` (users, buckets, containers)."""

    url: str
    _proc: subprocess.Popen | None = None

    def _popen(self) -> subprocess.Popen:
        raise NotImplementedError

    def _ready(self) -> bool:
        raise NotImplementedError

    def _setup(self) -> None:
        pass

    def __enter__(self):
        self._proc = self._popen()
        try:
            self._wait()
            self._setup()
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc) -> None:
        if self._proc is not None:
            stop(self._proc)
            self._proc = None

    def _wait(self, timeout: float = 60.0) -> None:
        deadline = time.monotonic() + timeout
        while not self._ready():
            if self._proc.poll() is not None:
                raise RuntimeError(f"{type(self).__name__} exited (status {self._proc.returncode}) before it answered on {self.url}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{type(self).__name__} did not answer on {self.url} in {timeout:.0f} s")
            time.sleep(0.1)

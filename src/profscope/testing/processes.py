"""What the test servers started as processes share (moto's S3 server, Azurite, a JAX
profiler job, the GCS emulator's port): a free local port, and a stop that never hangs."""

from __future__ import annotations

import socket
import subprocess


def free_port() -> int:
    """A port on 127.0.0.1 no one listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(proc: subprocess.Popen, grace: float = 10.0) -> None:
    """Terminate, and kill what has not exited after ``grace`` seconds."""
    proc.terminate()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()

"""Progress of long conversions on the terminal that runs ``profscope serve``."""

from __future__ import annotations

import sys
import threading
import time
from typing import TextIO

from profscope.cache.progress import ProgressBoard


class ProgressPrinter:
    """Prints a line for each conversion that takes longer than ``after`` seconds, again
    every ``every`` seconds while it runs, and once more when it is done."""

    def __init__(self, board: ProgressBoard, out: TextIO = sys.stderr, after: float = 1.0, every: float = 2.0):
        self.board, self.out, self.after, self.every = board, out, after, every
        self._shown: dict[str, float] = {}  # job key -> when last printed
        self._labels: dict[str, tuple[str, float]] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="profscope-progress", daemon=True)

    def start(self) -> "ProgressPrinter":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def tick(self) -> None:
        now = time.time()
        running = {job["key"]: job for job in self.board.snapshot()}
        for key, job in running.items():
            if job["elapsedSeconds"] < self.after or now - self._shown.get(key, 0) < self.every:
                continue
            pct = f" {job['fraction'] * 100:.0f}%" if job["fraction"] else ""
            message = f": {job['message']}" if job["message"] else ""
            print(f"[profscope] {job['label']}{message}{pct} ({job['elapsedSeconds']:.0f} s)", file=self.out, flush=True)
            self._shown[key] = now
            self._labels[key] = (job["label"], now - job["elapsedSeconds"])
        for key in [k for k in self._shown if k not in running]:
            label, started = self._labels.pop(key)
            del self._shown[key]
            print(f"[profscope] {label}: done in {now - started:.1f} s", file=self.out, flush=True)

    def _run(self) -> None:
        while not self._stop.wait(0.25):
            self.tick()

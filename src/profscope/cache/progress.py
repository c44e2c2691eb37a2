"""Progress of long conversions, readable by the page (``/api/progress``) and the CLI."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field

from profscope.forksafe import renew_locks_after_fork


@dataclass
class Progress:
    key: str
    label: str
    fraction: float = 0.0  # 0..1; stays 0 when the amount of work is unknown
    message: str = ""
    started: float = field(default_factory=time.time)
    done: bool = False

    def update(self, fraction: float | None = None, message: str | None = None) -> None:
        if fraction is not None:
            self.fraction = min(max(fraction, 0.0), 1.0)
        if message is not None:
            self.message = message

    def part(self, start: float, end: float) -> "ProgressPart":
        """A view of this progress for one stage that covers [start, end] of the whole."""
        return ProgressPart(self, start, end)

    def to_json(self) -> dict:
        return {
            "key": self.key,
            "label": self.label,
            "fraction": round(self.fraction, 4),
            "message": self.message,
            "elapsedSeconds": round(time.time() - self.started, 2),
            "done": self.done,
        }


@dataclass
class ProgressPart:
    """One stage of a conversion: its 0..1 maps onto [start, end] of the whole."""

    whole: Progress
    start: float
    end: float

    def update(self, fraction: float | None = None, message: str | None = None) -> None:
        mapped = None if fraction is None else self.start + (self.end - self.start) * fraction
        self.whole.update(mapped, message)


class ProgressBoard:
    """The conversions under way in this process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._jobs: dict[str, Progress] = {}
        renew_locks_after_fork(self, "_lock")

    def start(self, key: str, label: str) -> Progress:
        with self._lock:
            job = self._jobs.get(key)
            if job is None or job.done:
                job = self._jobs[key] = Progress(key, label)
            return job

    def finish(self, job: Progress) -> None:
        job.done = True
        job.fraction = 1.0
        with self._lock:
            if self._jobs.get(job.key) is job:
                del self._jobs[job.key]

    def snapshot(self) -> list[dict]:
        with self._lock:
            return [j.to_json() for j in self._jobs.values()]

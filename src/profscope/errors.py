"""The one error shape of profscope.

Every layer raises a subclass of :class:`ProfscopeError` for problems a user can fix (a bad
path, a corrupt file, an unknown run). The server turns them into an HTTP 4xx with a JSON
body ``{"ok": false, "status": ..., "error": ..., "file": ...}``; the CLI prints the message
and exits non-zero. Anything else escaping is a bug.
"""

from __future__ import annotations


class ProfscopeError(Exception):
    """A problem with the user's input, reported to them as-is."""

    status = 400

    def __init__(self, message: str, *, file: str | None = None):
        super().__init__(message)
        self.message = message
        self.file = file

    def to_json(self) -> dict:
        return {"ok": False, "status": self.status, "error": self.message, "file": self.file}


class BadRequest(ProfscopeError):
    """The request itself is malformed (a missing parameter, a path escaping the root)."""

    status = 400


class NotFound(ProfscopeError):
    """The named run, host, file, module or tool does not exist."""

    status = 404


class NothingToAssess(NotFound):
    """The files read, but hold nothing a tool measures: a PyTorch trace recorded without
    ``profile_memory=True`` has no ``[memory]`` events for the OOM risk. A 404 like any
    missing input, but not a refusal: ``profscope report`` lists the run as not assessed.
    Here with the other errors because a conversion worker rebuilds an error from its
    class name in this module (cache/worker.py ``_rebuild``)."""


class BadInput(ProfscopeError):
    """A file exists but cannot be read as what it claims to be (truncated, corrupt)."""

    status = 422


class TooLarge(BadInput):
    """A file would cost more than profscope spends on one input: bytes decompressed, the
    bytes of one field, nesting depth, objects expanded from shared references, entries.
    The message names the file and the limit (and how to raise it, where it can be)."""

    status = 413


class CacheFull(ProfscopeError):
    """The cache folder's disk is full (or its quota reached): nothing can be converted."""

    status = 507


class Forbidden(ProfscopeError):
    """The request is well formed but this server will not do it (a capture target outside
    the allowed addresses)."""

    status = 403


class Conflict(ProfscopeError):
    """The request clashes with work already under way (a second capture from a target
    that is being recorded)."""

    status = 409


class Stopping(ProfscopeError):
    """The server is stopping (Ctrl+C, SIGTERM), or a conversion was stopped from outside
    (its worker sent SIGINT/SIGTERM): the input is not at fault, nothing is remembered of
    it, and the same request to a running server converts it."""

    status = 503

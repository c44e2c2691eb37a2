"""A local GCS for tests and benchmarks: the ``gcp-storage-emulator`` server, with the
upload precondition it lacks.

GCS refuses an upload whose ``ifGenerationMatch`` does not hold with 412 Precondition
Failed: ``ifGenerationMatch=0`` means "only if no live object has this name", the
create-only write the shared cache's commit markers and leases rely on (cache/shared.py).
The emulator (2026.7.19) ignores the parameter and overwrites; the shared cache tested on
it as it is would pass while losing races. So its upload handlers are wrapped here to
check the parameter before the object is stored, as the service does: for a simple or
multipart upload on the request itself, for a resumable one on the parameter given when
the upload was started (a resumable session carries its preconditions to the final
chunk). The emulator serves one request at a time (``http.server.HTTPServer``), so the
check and the write are one step, as in the service.
"""

from __future__ import annotations

import http.server
import logging
import sys
import threading
from http import HTTPStatus

from profscope.testing.processes import free_port

_patched = False
_lock = threading.Lock()
_current = threading.local()  # the precondition of the upload being handled
_resumable: dict[str, str] = {}  # upload id -> ifGenerationMatch given when it started


class _PreconditionFailed(Exception):
    pass


def _precondition(request) -> str | None:
    values = request.query.get("ifGenerationMatch")
    return values[0] if values else None


def _enforce_preconditions() -> None:
    global _patched
    with _lock:
        if _patched:
            return
        from gcp_storage_emulator import server
        from gcp_storage_emulator.handlers import objects
        from gcp_storage_emulator.storage import Storage
        from gcp_storage_emulator.exceptions import NotFound

        create_file, create_resumable = Storage.create_file, Storage.create_resumable_upload

        def checked_create_file(self, bucket_name, file_name, content, file_obj, file_id=None):
            want = _resumable.pop(file_id, None) if file_id else getattr(_current, "want", None)
            if want is not None:
                try:
                    have = self.get_file_obj(bucket_name, file_name).get("generation", "0")
                except NotFound:
                    have = "0"
                if str(have) != str(want):
                    raise _PreconditionFailed(f"{file_name}: ifGenerationMatch={want}, the object's generation is {have}")
            return create_file(self, bucket_name, file_name, content, file_obj, file_id)

        def recorded_resumable(self, bucket_name, file_name, file_obj):
            upload_id = create_resumable(self, bucket_name, file_name, file_obj)
            want = getattr(_current, "want", None)
            if want is not None:
                _resumable[upload_id] = want
            return upload_id

        def wrap(handler):
            def checked(request, response, storage, *args, **kwargs):
                _current.want = _precondition(request)
                try:
                    return handler(request, response, storage, *args, **kwargs)
                except _PreconditionFailed as e:
                    response.status = HTTPStatus.PRECONDITION_FAILED
                    response.json({"error": {"code": 412, "message": f"Precondition Failed: {e}",
                                             "errors": [{"reason": "conditionNotMet"}]}})
                finally:
                    _current.want = None

            checked.__wrapped__ = handler
            return checked

        # Its handler writes the head and the body in separate sends: with Nagle's
        # algorithm each small answer then waited ~40 ms for the client's delayed ACK.
        server.RequestHandler.disable_nagle_algorithm = True
        Storage.create_file = checked_create_file
        Storage.create_resumable_upload = recorded_resumable
        insert = objects.insert
        wrapped = {insert: wrap(insert), objects.upload_partial: wrap(objects.upload_partial)}
        for _, handlers in server.HANDLERS:
            for method, handler in list(handlers.items()):
                if handler in wrapped:
                    handlers[method] = wrapped[handler]
        objects.insert = wrapped[insert]  # server.py falls back to objects.insert by name
        _patched = True


class _Server(http.server.HTTPServer):
    request_queue_size = 128

    def handle_error(self, request, client_address) -> None:
        # A client that hung up (gcsfs closing a pooled connection) is no error; the rest
        # is printed as socketserver does.
        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError)):
            super().handle_error(request, client_address)


class GcsEmulator:
    """``with GcsEmulator("bucket") as url:`` a GCS JSON API at ``url`` (in memory),
    with ``bucket`` made; gcsfs reaches it with ``endpoint_url=url, token="anon"``."""

    def __init__(self, bucket: str, *, port: int | None = None):
        _enforce_preconditions()
        from gcp_storage_emulator.server import create_server

        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server = create_server("127.0.0.1", self.port, in_memory=True, default_bucket=bucket)
        self._server._api.run = self._run_api
        # It logs every 404 at ERROR: a cache asking whether a commit exists is no error.
        logging.getLogger("gcp_storage_emulator").setLevel(logging.CRITICAL)

    def _run_api(self) -> None:
        # The emulator's own APIThread.run, with a listen backlog of 128 instead of
        # socketserver's 5: gcsfs downloads a list of objects over many connections at
        # once, and with 5 the rest were reset and retried with back-off (56 s for the 51
        # files of one trace index, 0.3 s with this).
        from functools import partial

        from gcp_storage_emulator.server import RequestHandler

        api = self._server._api
        api._httpd = _Server((api._host, api._port), partial(RequestHandler, api._storage))
        api.is_running.set()
        api._httpd.serve_forever()

    def __enter__(self) -> str:
        self._server.start()
        return self.url

    def __exit__(self, *exc) -> None:
        self._server.stop()


def main() -> None:
    """``python -m profscope.testing.gcs_emulator BUCKET [PORT]``: serve until killed, in a
    process of its own (a benchmark's emulator must not share the measured one's GIL)."""
    import argparse
    import time

    p = argparse.ArgumentParser()
    p.add_argument("bucket")
    p.add_argument("port", type=int, nargs="?")
    args = p.parse_args()
    with GcsEmulator(args.bucket, port=args.port) as url:
        print(url, flush=True)
        while True:
            time.sleep(3600)


if __name__ == "__main__":
    main()

"""Server layer: thin FastAPI glue over the application layer: every query parameter
parsed once (server/params.py), one error shape. Nothing imports it but the CLI.

``Server`` and ``create_app`` are imported on first use (PEP 562): ``profscope serve``
answers its first requests (server/quick_start.py) with server/guard.py alone, before
FastAPI is imported."""


def __getattr__(name: str):
    if name in ("Server", "create_app"):
        from profscope.server import app

        return getattr(app, name)
    raise AttributeError(f"module 'profscope.server' has no attribute {name!r}")


__all__ = ["Server", "create_app"]

"""Server layer: thin FastAPI glue over the application layer: every query parameter
parsed once (server/params.py), one error shape. Nothing imports it but the CLI."""

from profscope.server.app import Server, create_app

__all__ = ["Server", "create_app"]

"""Server layer: thin FastAPI glue over the workspace. Nothing imports it but the CLI."""

from profscope.server.app import create_app

__all__ = ["create_app"]

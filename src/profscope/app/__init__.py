"""Application layer: :class:`~profscope.app.workspace.Workspace`, one log directory's
runs and every tool's payload. It dispatches (tool, run kind) to the reader (formats) and
the builder (tools), keys the cache (app/keys.py) on typed queries (app/queries.py), and
knows no HTTP."""

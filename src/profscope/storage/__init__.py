"""Storage layer: where bytes come from (local folders, ``gs://``, ``s3://`` and ``az://``
buckets, ``memory://``).

Nothing here knows about file formats; it lists, stats and opens files below one root and
refuses any path that would leave it.
"""

from profscope.storage.logdir import FileInfo, Listing, LogDir, safe_relpath

__all__ = ["FileInfo", "Listing", "LogDir", "safe_relpath"]

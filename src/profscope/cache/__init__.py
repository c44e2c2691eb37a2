"""Cache layer: storage of converted results on local disk, keyed by the application
(app/keys.py), each conversion in a forked worker, size limits and progress."""

"""Cache layer: converted results on local disk, keyed by input identity, and the
workspace that ties a log directory's runs to the tools and the cache."""
